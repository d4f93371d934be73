/**
 * The API's JSON wire types (snake_case), as /v1/openapi.json describes them:
 * what the daemon sends and takes. The SDK's own types (types.ts) are made
 * from these.
 *
 * @module
 */
/**
 * Body of POST /v1/sandboxes. Every field is optional; the daemon fills
 * defaults and validates ranges.
 */
export interface CreateSandboxRequest {
    /**
     * Unique name. A named sandbox is suspended, not terminated, when its idle
     * timeout fires.
     */
    name?: string;
    /** Image to start from. Ignored when snapshot_id is set. */
    image?: string;
    /** Snapshot (snap_…) to restore instead of starting from an image. */
    snapshot_id?: string;
    /**
     * CPU limit, fractional; at most the CPUs this host has (the daemon's CPU
     * affinity).
     */
    cpus?: number;
    /**
     * Memory limit in MiB; at most this host's memory less a reserve for the
     * host itself (a 16th of it, at least 1 GiB).
     */
    memory_mb?: number;
    /**
     * Size of the writable layer in MiB; at most the free space of the daemon's
     * data dir filesystem less a reserve for the host (a 20th of the
     * filesystem, at least 1 GiB). The disk is a sparse file that grows as the
     * sandbox writes, so each live (running or suspended) sandbox's disk_mb is
     * promised in full until it is deleted: a disk that fits the host but not
     * what is still unpromised is a 507 insufficient_storage.
     */
    disk_mb?: number;
    /**
     * Maximum number of processes and threads, forkbox's own init and agent in
     * the sandbox included (they take up to ~20, hence the minimum of 64); at
     * most a quarter of this host's PID table (the smaller of kernel.pid_max
     * and kernel.threads-max), and no more than a quarter of fs.file-max
     * divided by 256. Every process of the sandbox may hold at most
     * (fs.file-max / 4) / pids_limit open files (at least 256), so that no
     * sandbox can fill the host's file table.
     */
    pids_limit?: number;
    /** Idle timeout in seconds: every call that touches the sandbox resets it. */
    timeout_secs?: number;
    /** Wall-clock lifetime in seconds; 0 or absent means no limit. */
    max_lifetime_secs?: number;
    /**
     * Give the sandbox outbound network access. Without it the sandbox has only
     * loopback.
     */
    allow_internet_access?: boolean;
    /**
     * What the sandbox may reach (needs allow_internet_access); default the
     * public internet only.
     */
    network?: NetworkPolicy;
    /** Environment variables for every process in the sandbox. */
    env?: Record<string, string>;
    /**
     * Free-form labels, usable as list filters. Keys are 1-63 characters
     * without :, = or , (values at most 255); forkbox.pool, forkbox.pool.ready
     * and forkbox.pool.image are reserved for warm pools (400).
     */
    labels?: Record<string, string>;
    /**
     * When the sandbox is suspended, a call that needs it running (exec, code,
     * files, …) resumes it first. False makes such calls answer 409 until an
     * explicit resume.
     */
    auto_resume?: boolean;
    /**
     * An idle sandbox is suspended rather than terminated even without a name
     * (named sandboxes always are).
     */
    suspend_on_idle?: boolean;
    /**
     * Warm pool to take a ready sandbox from (see POST /v1/pools). The pool's
     * snapshot or image is used; image and snapshot_id must not be set. Falls
     * back to a normal restore when the pool is empty.
     */
    pool?: string;
    /**
     * Run the sandbox on this node of a cluster (default: the daemon places it
     * on a node with room; a create from a pool stays on the node that got it).
     * 503 when that node is down, 404 when there is no such node.
     */
    node?: string;
}
/** A sandbox. */
export interface Sandbox {
    /** Sandbox id. */
    id: string;
    /** Unique name, if any. */
    name?: string;
    /**
     * `lost`: it was running on a node of a cluster that stopped answering; its
     * processes are gone with that node (it can only be deleted).
     */
    state: "creating" | "running" | "suspending" | "suspended" | "resuming" | "terminated" | "error" | "lost";
    /** Why the sandbox is in its state, e.g. the cause of an error. */
    state_reason?: string;
    image: string;
    /** Snapshot the sandbox was restored from, if any. */
    snapshot_id?: string;
    cpus: number;
    memory_mb: number;
    disk_mb: number;
    pids_limit: number;
    timeout_secs: number;
    max_lifetime_secs?: number;
    allow_internet_access: boolean;
    /** Its egress policy; absent: the default. */
    network?: NetworkPolicy;
    /**
     * Whether a call that needs the sandbox running resumes it when it is
     * suspended.
     */
    auto_resume: boolean;
    /** Suspended, not terminated, at its idle timeout though unnamed. */
    suspend_on_idle?: boolean;
    env?: Record<string, string>;
    labels?: Record<string, string>;
    created_at: string;
    /**
     * Last time an API call touched the sandbox; the idle timeout counts from
     * here.
     */
    last_active_at: string;
    terminated_at?: string;
    usage?: Usage;
    /**
     * The node of the cluster that runs the sandbox (or holds its suspend
     * image); absent on a single daemon.
     */
    node?: string;
}
/** What a running sandbox consumes now. */
export interface Usage {
    cpu_seconds: number;
    memory_bytes: number;
    memory_peak_bytes: number;
    pids: number;
    disk_used_bytes: number;
    /** Seconds spent running since creation. */
    running_seconds: number;
    /** Seconds spent suspended since creation. */
    suspended_seconds: number;
}
/**
 * SandboxList is the body of GET /v1/sandboxes: one page of sandboxes, newest
 * first.
 */
export interface SandboxList {
    sandboxes: Sandbox[];
    /**
     * next_cursor, when set, is the cursor of the next page (pass it as
     * ?cursor=); absent on the last page.
     */
    next_cursor?: string;
}
/** Body of POST /v1/sandboxes/{sandbox}/exec. */
export interface ExecRequest {
    /** Program to run, looked up in PATH. */
    cmd: string;
    args?: string[];
    /** Extra environment variables. */
    env?: Record<string, string>;
    /** Working directory; default /workspace. */
    cwd?: string;
    /** Standard input for the command. */
    stdin?: string;
    /** Kill the command after this many seconds. */
    timeout_secs?: number;
}
/**
 * Outcome of a command. A command that ran and exited non-zero is a 200 with
 * its exit_code. exit_code is -1 when a signal killed the process; error then
 * says why in words.
 */
export interface ExecResult {
    /** Empty in the exit event of a stream. */
    stdout: string;
    /** Empty in the exit event of a stream. */
    stderr: string;
    exit_code: number;
    duration_ms: number;
    /** Signal that killed the process, e.g. SIGKILL. */
    signal?: string;
    timed_out?: boolean;
    oom_killed?: boolean;
    error?: string;
}
/** Data of a stdout or stderr event of a streaming exec or run_code. */
export interface OutputChunk {
    data: string;
}
/** FileInfo describes one entry of GET /v1/sandboxes/{sandbox}/files/list. */
export interface FileInfo {
    name: string;
    /** Absolute path in the sandbox. */
    path: string;
    /** "file", "dir", "symlink" or "other" */
    type: "file" | "dir" | "symlink" | "other";
    size: number;
    /** Permission bits in octal, e.g. 0644. */
    mode: string;
    modified_at: string;
}
/** FileList is the body of GET /v1/sandboxes/{sandbox}/files/list. */
export interface FileList {
    /** Absolute path of the listed directory. */
    path: string;
    entries: FileInfo[];
}
/** WriteFileResult answers PUT /v1/sandboxes/{sandbox}/files. */
export interface WriteFileResult {
    /** Absolute path written. */
    path: string;
    /** Bytes written. */
    size: number;
}
/** Body of POST /v1/sandboxes/{sandbox}/code. */
export interface RunCodeRequest {
    /**
     * The cell: source code in the context's language. A syntax error is
     * reported without running anything.
     */
    code: string;
    /**
     * "python" or the name of an installed Jupyter kernelspec. Picks the
     * default context of that language when `context` is absent.
     */
    language?: string;
    /**
     * Context id from POST /contexts, or "default": the language's default
     * context, created on first use.
     */
    context?: string;
    /**
     * Interrupt the cell after this many milliseconds; the execution's error is
     * then TimeoutError and the context keeps its variables.
     */
    timeout_ms?: number;
    /** Environment variables set for this cell only (Python contexts). */
    env?: Record<string, string>;
}
/** The result of running a cell. */
export interface Execution {
    logs: Logs;
    /**
     * One object per displayed value, in display order; every open matplotlib
     * figure becomes a png result when the cell ends.
     */
    results: Result[];
    /** null on success. */
    error: ExecutionError | null;
    /** Cells run in the context so far, this one included. */
    execution_count: number;
    /** The context that ran the cell. */
    context_id?: string;
    duration_ms: number;
}
/**
 * What the code printed, in order: one string per stream message of the
 * kernel.
 */
export interface Logs {
    stdout: string[];
    stderr: string[];
}
/**
 * The error of a cell: what it raised (NameError, SyntaxError, …),
 * TimeoutError when timeout_ms passed, or KernelDied when the kernel died
 * (the next cell starts a fresh kernel).
 */
export interface ExecutionError {
    name: string;
    /** The message, e.g. name 'x' is not defined. */
    value: string;
    /** Traceback lines without ANSI color codes. */
    traceback: string[];
}
/**
 * One displayed value keyed by format; a value may come in several formats (a
 * pandas DataFrame gives text and html). Keys other than these may appear in
 * later versions.
 */
export interface Result {
    /** text/plain. */
    text?: string;
    /** text/html. */
    html?: string;
    /** text/markdown. */
    markdown?: string;
    /** text/latex. */
    latex?: string;
    /** image/png, base64 without line breaks. */
    png?: string;
    /** image/jpeg, base64 without line breaks. */
    jpeg?: string;
    /** image/svg+xml, as text. */
    svg?: string;
    /** application/json: the JSON value itself, not a string. */
    json?: unknown;
    /** application/javascript. */
    javascript?: string;
    /** application/pdf, base64 without line breaks. */
    pdf?: string;
    /** Other MIME types of the value, keyed by MIME type. */
    extra?: Record<string, unknown>;
    /** Present on the value of the cell's last expression. */
    is_main_result?: true;
    /** Keys a later daemon may add. */
    [key: string]: unknown;
}
/** Body of POST /v1/sandboxes/{sandbox}/contexts. Every field is optional. */
export interface CreateContextRequest {
    /** "python" or the name of an installed Jupyter kernelspec. */
    language?: string;
    /**
     * Working directory of the kernel: an existing directory in the sandbox; a
     * relative path is relative to /workspace.
     */
    cwd?: string;
    /** Environment variables of the kernel. */
    env?: Record<string, string>;
}
/** A kernel-backed code context in a sandbox. */
export interface Context {
    id: string;
    language: string;
    /** Kernelspec name, e.g. python3. */
    kernel: string;
    cwd: string;
    /** Whether this is its language's default context. */
    default: boolean;
    /**
     * new: no kernel started yet; dead: the kernel died, the next cell starts a
     * fresh one.
     */
    state: "new" | "idle" | "busy" | "dead";
    /** Cells run in the context so far. */
    execution_count: number;
    created_at: string;
}
/** ContextList is the body of GET /v1/sandboxes/{sandbox}/contexts. */
export interface ContextList {
    contexts: Context[];
}
/** Body of POST /v1/sandboxes/{sandbox}/checkpoint. Every field is optional. */
export interface CheckpointRequest {
    /**
     * `filesystem`: the writable layer only (a cold boot on restore). `memory`:
     * also every process and its memory (a warm start on restore; needs CRIU).
     */
    type?: "filesystem" | "memory";
    /** A label for the snapshot; need not be unique. */
    name?: string;
}
/** A saved state of a sandbox. */
export interface Snapshot {
    /** Snapshot id. */
    id: string;
    type: "filesystem" | "memory";
    /** The label given at checkpoint, if any. */
    name?: string;
    /** The sandbox the snapshot was taken of. */
    sandbox_id: string;
    /**
     * The snapshot that sandbox was itself restored from, if any: the snapshots
     * form a tree.
     */
    parent_id?: string;
    /** The image the snapshot sits on; a restore uses it. */
    image: string;
    /** Space the snapshot takes on disk. */
    size_bytes: number;
    /** How long the sandbox was paused to take the snapshot. */
    paused_ms: number;
    created_at: string;
}
/**
 * SnapshotList is the body of GET /v1/snapshots: one page of snapshots,
 * newest first.
 */
export interface SnapshotList {
    /** Newest first. */
    snapshots: Snapshot[];
    /**
     * next_cursor, when set, is the cursor of the next page (pass it as
     * ?cursor=); absent on the last page.
     */
    next_cursor?: string;
}
/** Body of POST /v1/sandboxes/{sandbox}/fork. */
export interface ForkRequest {
    /** How many sandboxes to start. */
    count: number;
    /**
     * Names of the new sandboxes, in order: none, or exactly `count` distinct
     * ones.
     */
    names?: string[];
    /**
     * An egress policy for the branches; by default they keep the source's (and
     * its internet access).
     */
    network?: NetworkPolicy;
}
/**
 * Answer of a fork: the memory snapshot taken and the sandboxes started from
 * it.
 */
export interface ForkResult {
    snapshot: Snapshot;
    sandboxes: Sandbox[];
}
/** Body of POST /v1/pools: exactly one of snapshot_id and image. */
export interface CreatePoolRequest {
    /** Unique pool name; POST /v1/sandboxes takes it as `pool`. */
    name: string;
    /**
     * Golden snapshot (snap_…) to restore the pool's sandboxes from; a memory
     * snapshot makes them warm starts.
     */
    snapshot_id?: string;
    /** Image to start the pool's sandboxes from, instead of a snapshot. */
    image?: string;
    /** How many sandboxes to keep ready. */
    size: number;
}
/** A warm pool of ready sandboxes. */
export interface Pool {
    name: string;
    /** The golden snapshot the pool restores, if any. */
    snapshot_id?: string;
    /**
     * The image of the pool's sandboxes (the snapshot's, for a snapshot pool).
     */
    image: string;
    /** How many sandboxes the pool keeps ready. */
    size: number;
    /** How many are ready now; the rest are being started. */
    ready: number;
    created_at: string;
    /**
     * members are the pool's sandboxes not handed out yet, on this node (listed
     * only when asked for: GET /v1/pools?members=true).
     */
    members?: PoolMember[];
}
/**
 * PoolMember is a sandbox a pool keeps ready (or one it made that failed and
 * has not been removed yet). Its id works with DELETE
 * /v1/sandboxes/{sandbox}.
 */
export interface PoolMember {
    id: string;
    state: "creating" | "running" | "suspending" | "suspended" | "resuming" | "terminated" | "error" | "lost";
    created_at: string;
    /** node is the node that runs it (in a cluster). */
    node?: string;
}
/** PoolList is the body of GET /v1/pools. */
export interface PoolList {
    /** Sorted by name. */
    pools: Pool[];
}
/**
 * An image: a stack of read-only layers plus the defaults a sandbox starts
 * with.
 */
export interface Image {
    name: string;
    /**
     * Digest of the image's layers and defaults (sha256:…); it changes when a
     * rebuild changes anything.
     */
    id: string;
    /**
     * What the image was built on: debian:<suite>, another image's name, oci
     * for an import, host for the host-derived image.
     */
    base?: string;
    /** Layer ids, bottom first. */
    layers: string[];
    /** KEY=VALUE defaults of the sandboxes' environment. */
    env: string[];
    /** Working directory of the sandboxes' processes. */
    workdir: string;
    /** The run user as the recipe (or OCI config) named it. */
    user?: string;
    uid: number;
    gid: number;
    /** Apparent size of the image's layers. */
    size_bytes: number;
    created_at: string;
}
/** ImageList is the body of GET /v1/images: one page of images, by name. */
export interface ImageList {
    images: Image[];
    /** The daemon's own images being built now. */
    building?: ImageReadiness[];
    /**
     * next_cursor, when set, is the cursor of the next page (pass it as
     * ?cursor=); absent on the last page.
     */
    next_cursor?: string;
}
/**
 * How an image is built: a base, then steps in order. Each run or copy step
 * becomes a cached layer.
 */
export interface Recipe {
    /** The image's name; an existing image of this name is replaced. */
    name: string;
    /** debian:<suite> (bootstrapped with debootstrap) or the name of an image. */
    base: string;
    /** Debian mirror for a debian: base (default: the host's). */
    mirror?: string;
    steps: RecipeStep[];
}
/** One step: exactly one of its properties. */
export interface RecipeStep {
    /**
     * A shell command run by /bin/sh -c as root, with network access. Its
     * changes become a layer.
     */
    run?: string;
    /** Environment variables for later steps and for sandboxes. */
    env?: Record<string, string>;
    /** Absolute working directory for later steps and for sandboxes. */
    workdir?: string;
    /**
     * Who sandbox processes run as: a name from the image's /etc/passwd or
     * uid[:gid]; not root. Run steps stay root.
     */
    user?: string;
    /** copy copies a file or directory of the build context into the image. */
    copy?: CopyStep;
}
/** Copies a file or directory of the build context into the image. */
export interface CopyStep {
    /** Path relative to the build context's root; it may not leave it. */
    src: string;
    /** Absolute path in the image. */
    dest: string;
}
/** One event of a build or import. */
export interface BuildEvent {
    type: "step" | "log" | "done" | "error";
    /** 1-based step number; 0 for the base. */
    step: number;
    /** Number of steps of the recipe. */
    total?: number;
    /** Kind of a step event. */
    kind?: string;
    /**
     * What a step event is about: the command, the variables, the path or the
     * base.
     */
    detail?: string;
    /** The step's layer came from the cache: it did not run. */
    cached?: boolean;
    /** A line of output (log events). */
    line?: string;
    image?: Image;
}
/** Body of every error answer. */
export interface Error {
    error: ErrorBody;
}
/** ErrorBody carries the machine-readable code and the human message. */
export interface ErrorBody {
    /**
     * busy (409): another operation holds the sandbox (a suspend, resume,
     * checkpoint or create) for longer than the daemon waits; the message names
     * it. Try again. insufficient_storage (507): this host could give what was
     * asked (a sandbox's disk_mb, a pool's disks) but not now: the disk space
     * is promised to live sandboxes; delete some, or ask for less.
     * permission_denied (403): the call needs an admin key. resource_exhausted
     * (429): a host limit, or one of the tenant's quotas (then `quota` says
     * which).
     */
    code: "invalid_argument" | "unauthenticated" | "permission_denied" | "not_found" | "conflict" | "failed_precondition" | "busy" | "too_large" | "resource_exhausted" | "insufficient_storage" | "timeout" | "unavailable" | "internal";
    /** Human-readable message. */
    message: string;
    /**
     * The request's id in the daemon's log, also sent as the X-Request-Id
     * header.
     */
    request_id?: string;
    /** On a 429 for a tenant's quota: which quota, with its numbers. */
    quota?: QuotaExceeded;
}
/**
 * Health is the body of GET /healthz: the daemon answers; images says whether
 * its own images are ready, chat whether a model is configured.
 */
export interface Health {
    status: "ok";
    /**
     * The daemon's own images: a create from one that is `building` answers 503
     * with Retry-After.
     */
    images: ImageReadiness[];
    chat?: ChatReadiness;
    /**
     * recovering counts the sandboxes a restart found that are still being
     * settled (calls about them answer 503 with Retry-After); 0 once all are.
     */
    recovering: number;
}
/**
 * Body of POST /v1/chat: a question about data, answered by a model that runs
 * code in the conversation's sandbox.
 */
export interface ChatRequest {
    /** The question, in plain language. Empty (or only spaces) is a 400. */
    question: string;
    /**
     * CSV text to put in /workspace as `csv_name` before the question is asked;
     * bounded by the upload limit.
     */
    csv?: string;
    /** File name of `csv` in /workspace. */
    csv_name?: string;
    /**
     * Uploaded files (POST /v1/files) to put in /workspace under their names
     * before the question is asked; an unknown id is a 404.
     */
    file_ids?: string[];
    /**
     * Continues this conversation (its sandbox keeps the variables of earlier
     * questions); empty starts a new one. An unknown id is a 404.
     */
    conversation_id?: string;
    /** Overrides the configured model (FORKBOX_MODEL) for this question. */
    model?: string;
}
/** A chart the code drew (chart-1.png, chart-2.png, … within an answer). */
export interface ChatImage {
    file_name: string;
    /** The PNG, base64 without line breaks. */
    png_base64: string;
}
/** One piece of code the model ran, and its result. */
export interface ChatStep {
    code: string;
    /** The execution; null when the code could not be run at all. */
    execution: Execution | null;
}
/** The answer of POST /v1/chat, and the data of its SSE `done` event. */
export interface ChatResponse {
    /** The model's final answer (markdown), grounded in the steps' output. */
    answer: string;
    /** Every chart the steps drew, in order. */
    images: ChatImage[];
    /** The code the model ran, in order, with each execution. */
    steps: ChatStep[];
    /** The conversation (new unless the request named one). */
    conversation_id: string;
    /** Id of the conversation's sandbox. */
    sandbox: string;
    /** Tool rounds used. */
    rounds: number;
    /**
     * The bound on tool rounds was hit: the answer was made from what had been
     * computed by then.
     */
    truncated?: boolean;
}
/** A piece of the output of running code, while it runs. */
export interface ChatOutput {
    type: "stdout" | "stderr" | "result" | "error";
    /** Printed text (stdout, stderr). */
    text?: string;
    /** A displayed value (result). */
    result?: Result;
    /** What the code raised (error). */
    error?: ExecutionError;
}
/**
 * One event of the chat stream (the data of every event but `done` and
 * `error`); `type` is the event's name.
 */
export interface ChatEvent {
    type: "conversation" | "text" | "tool_call" | "tool_error" | "output" | "execution" | "answer";
    /** The tool round the event belongs to, from 1. */
    round?: number;
    /** text: a delta of the model's text; answer: the final answer. */
    text?: string;
    /** The tool call (tool_call, tool_error, output, execution). */
    call_id?: string;
    /** tool_call: the code the model asked to run. */
    code?: string;
    /** output: live output of the running code. */
    output?: ChatOutput;
    /** execution: the code's result. */
    execution?: Execution;
    /** execution: the charts the code drew; answer: every chart. */
    images?: ChatImage[];
    /**
     * tool_error: what was wrong with the tool call (fed back to the model,
     * which goes on).
     */
    error?: string;
    /** conversation: the conversation's id. */
    conversation_id?: string;
    /** conversation: its sandbox's id. */
    sandbox?: string;
}
/** One question of a conversation and its answer, as stored. */
export interface ChatTurn {
    question: string;
    answer: string;
    images: ChatImage[];
    steps: ChatStep[];
    /** Why the question got no answer (the provider failed, say). */
    error?: string;
    created_at: string;
}
/** A CSV uploaded with POST /v1/files. */
export interface UploadedFile {
    /** Upload id; ChatRequest.file_ids takes it. */
    id: string;
    /** The file name it is given in /workspace. */
    name: string;
    size_bytes: number;
    /** Hex SHA-256 of the content. */
    sha256: string;
    created_at: string;
    /** The CSV's header fields. */
    columns: string[];
    /** Data rows (the header not counted). */
    rows: number;
}
/**
 * A chat conversation and its sandbox (named conv-<id>: it suspends when idle
 * and resumes on the next question).
 */
export interface Conversation {
    id: string;
    /** Given at creation, or else made from the first question. */
    title: string;
    /**
     * Id of the conversation's sandbox; run code cells in it with POST
     * /v1/sandboxes/{sandbox}/code.
     */
    sandbox: string;
    sandbox_name: string;
    /** The model of the latest question. */
    model?: string;
    created_at: string;
    /** The latest question's time (or the creation's). */
    updated_at: string;
    /**
     * The questions and answers, oldest first (GET /v1/conversations/{id}
     * only).
     */
    turns?: ChatTurn[];
    /**
     * Files uploaded to the conversation, oldest first (GET
     * /v1/conversations/{id} only).
     */
    files?: UploadedFile[];
    /**
     * The code its sandbox ran: cells of the Code tab and the model's steps,
     * oldest first (GET /v1/conversations/{id} only).
     */
    cells?: Cell[];
}
/**
 * ConversationList is the body of GET /v1/conversations: one page of
 * conversations, the most recently updated first.
 */
export interface ConversationList {
    /** The most recently updated first, without turns and files. */
    conversations: Conversation[];
    /**
     * next_cursor, when set, is the cursor of the next page (pass it as
     * ?cursor=); absent on the last page.
     */
    next_cursor?: string;
}
/** Body of POST /v1/conversations (optional). */
export interface CreateConversationRequest {
    /** Title; empty: made from the first question. */
    title?: string;
}
/**
 * Egress policy of a sandbox with internet access. By default it reaches the
 * public internet only: loopback, link-local (the cloud metadata address
 * among them), RFC 1918, CGNAT, multicast and reserved ranges are refused, as
 * are the host and other sandboxes. allow_out entries are reachable even
 * where a default or deny_out covers them. A domain name in allow_out makes
 * the policy an allow-list: only allowed names resolve (through the daemon's
 * resolver) and every destination not allowed is refused.
 */
export interface NetworkPolicy {
    /**
     * IPv4 addresses, CIDRs, domain names, or `*.example.com` for every name
     * under example.com.
     */
    allow_out?: string[];
    /** IPv4 addresses or CIDRs. */
    deny_out?: string[];
}
/**
 * Body of PATCH /v1/sandboxes/{sandbox}: absent fields are left as they are.
 */
export interface UpdateSandboxRequest {
    /**
     * Replaces the egress policy (an empty object: the default). Applies to a
     * running sandbox at once, to a suspended one when it resumes.
     */
    network?: NetworkPolicy;
    /** A new idle timeout, counted from now. */
    timeout_secs?: number;
}
/**
 * How to reach a server listening on a port inside a sandbox. Requests to
 * `path` (and below) are proxied to 127.0.0.1:port in the sandbox (HTTP/1.1,
 * streamed, WebSocket upgrades passed through), resuming it when suspended;
 * they need the API key, or `token` (header X-Forkbox-Token or query
 * parameter forkbox_token), unless `public`. Answers carry
 * `Content-Security-Policy: sandbox …`: pages a sandbox serves run in an
 * opaque origin.
 */
export interface Port {
    sandbox: string;
    port: number;
    /** The proxy's path on the daemon, ending in /. */
    path: string;
    /** `path` on the address the request came to. */
    url: string;
    /**
     * With the daemon's --ports-domain: the port at "/" of a host name of its
     * own, <port>-<sandbox>.<domain>. A token given there as ?forkbox_token= is
     * kept in an HttpOnly cookie of that host.
     */
    host_url?: string;
    /**
     * Lets a client through without the API key; DELETE on the port makes a new
     * one.
     */
    token: string;
    public: boolean;
    /** In listings: a process in the sandbox listens on the port now. */
    listening?: boolean;
    /**
     * In listings: the name of the process listening (as the sandbox names it).
     */
    process?: string;
}
/** Body of PUT /v1/sandboxes/{sandbox}/ports/{port}. */
export interface UpdatePortRequest {
    /** Let anyone reach the port, without key or token. */
    public?: boolean;
}
/**
 * An API key's record. The secret is shown once, in the answer to POST
 * /v1/keys; the daemon keeps only its hash.
 */
export interface Key {
    /** Names the key in listings, the audit log and DELETE /v1/keys/{id}. */
    id: string;
    tenant: string;
    /**
     * admin: also manages keys and tenants' quotas and reads the audit log of
     * every tenant; user: its tenant's resources only.
     */
    role: "admin" | "user";
    /** The creator's note on the key. */
    name?: string;
    created_at: string;
    /** When the key stops working, if it expires. */
    expires_at?: string;
    /** When the key was revoked, if it was. */
    revoked_at?: string;
    /** The bearer token (fbk_…): only in the answer to POST /v1/keys. */
    secret?: string;
}
/**
 * Body of POST /v1/keys. Give expires_at or expires_in, not both; with
 * neither the key lasts until revoked.
 */
export interface CreateKeyRequest {
    /** The tenant the key belongs to. */
    tenant: string;
    /** role is "user" (default) or "admin". */
    role?: "admin" | "user";
    /** A note on what the key is for. */
    name?: string;
    /** The key stops working at this time, which must be in the future. */
    expires_at?: string;
    /** The key stops working after this long: a Go duration such as 720h. */
    expires_in?: string;
    /**
     * When given, these become the tenant's quotas, as a whole (as PUT
     * /v1/tenants/{tenant} sets them).
     */
    quotas?: Quotas;
}
/** KeyList is the body of GET /v1/keys. */
export interface KeyList {
    /** Without their secrets; revoked and expired keys included. */
    keys: Key[];
}
/** What one tenant may hold at once. A missing field is unlimited. */
export interface Quotas {
    /** Sandboxes running (or starting). */
    running_sandboxes?: number;
    /** The memory limits of the running sandboxes, summed, in MB. */
    memory_mb?: number;
    /** The CPU limits of the running sandboxes, summed. */
    cpus?: number;
    /** Suspended sandboxes. */
    suspended_sandboxes?: number;
    /** The tenant's snapshots (checkpoints and suspend images), summed. */
    snapshot_bytes?: number;
    /** The images the tenant built or imported, summed. */
    image_bytes?: number;
}
/** What a tenant holds now, against its quotas. */
export interface TenantUsage {
    tenant: string;
    running_sandboxes: number;
    memory_mb: number;
    cpus: number;
    suspended_sandboxes: number;
    snapshot_bytes: number;
    image_bytes: number;
    quotas: Quotas;
}
/** A tenant's quotas, with its usage when read. */
export interface Tenant {
    name: string;
    quotas: Quotas;
    usage?: TenantUsage;
}
/** TenantList is the body of GET /v1/tenants. */
export interface TenantList {
    /** Each with its usage. */
    tenants: Tenant[];
}
/**
 * Carried by a 429 for a tenant's quota: use + requested would exceed limit.
 */
export interface QuotaExceeded {
    quota: "running_sandboxes" | "memory_mb" | "cpus" | "suspended_sandboxes" | "snapshot_bytes" | "image_bytes";
    /** What the tenant holds now. */
    use: number;
    /** What the call asked for on top. */
    requested: number;
    limit: number;
}
/** One call that changed something, or tried to. */
export interface AuditEntry {
    /** Increases with time; GET /v1/audit?before= pages by it. */
    id: number;
    at: string;
    /**
     * The key that made the call: `admin` for the daemon's own key, empty with
     * no key configured.
     */
    key_id: string;
    tenant: string;
    /** The route. */
    action: string;
    /**
     * The resource the path names (a sandbox id or name, a snapshot id, ...),
     * if any.
     */
    resource?: string;
    /** The HTTP status of the answer. */
    status: number;
    /** `ok`, or the error code. */
    outcome: string;
    /** The request's id, as in X-Request-Id. */
    request_id?: string;
    /** `mcp` for calls an MCP tool made on the caller's behalf. */
    via?: "mcp";
}
/**
 * AuditList is the body of GET /v1/audit: one page of entries, newest first.
 */
export interface AuditList {
    /** Newest first. */
    entries: AuditEntry[];
    /**
     * next_cursor, when set, is the cursor of the next page (pass it as
     * ?cursor=); absent on the last page.
     */
    next_cursor?: string;
}
/**
 * The ports listening in the sandbox now (its Jupyter kernels' left out; a
 * suspended sandbox is not resumed to list them) and those with access
 * settings, by port. Tokens are not listed: GET the port for its token.
 */
export interface PortList {
    ports: Port[];
}
/** One run of code in a sandbox, as its history keeps it. */
export interface Cell {
    id: string;
    /** The sandbox's id. */
    sandbox: string;
    /**
     * From 1, per sandbox (absent in a notebook run's answer: given when
     * stored).
     */
    seq?: number;
    /** `user`: a /code call; `model`: a step of the chat's model. */
    source: "user" | "model";
    code: string;
    language: string;
    context_id?: string;
    execution: Execution | null;
    created_at: string;
}
/** CellList is the body of GET /v1/sandboxes/{sandbox}/cells, oldest first. */
export interface CellList {
    cells: Cell[];
}
/**
 * NotebookRun answers POST /v1/sandboxes/{sandbox}/notebook (and is the data
 * of its SSE "done" event, without cells): the code cells of an uploaded
 * notebook run in order; stopped says a cell failed and the rest were not
 * run.
 */
export interface NotebookRun {
    /** The cells that ran (JSON answer only). */
    cells?: Cell[];
    ran: number;
    /** Code cells in the notebook (empty ones skipped). */
    total: number;
    /** A cell failed and the rest did not run. */
    stopped: boolean;
}
/** An image the daemon makes itself (the default python image). */
export interface ImageReadiness {
    name: string;
    state: "building" | "ready" | "failed";
    step?: number;
    steps?: number;
    error?: string;
}
/** ChatReadiness says whether the chat has a model, and if not, why. */
export interface ChatReadiness {
    ready: boolean;
    /** Without a model: why, and how to configure one. */
    why?: string;
}
/**
 * One daemon of a cluster: daemons that share a PostgreSQL store (--store)
 * and an S3 bucket (--blobs).
 */
export interface Node {
    /** The node's id (--node-id). */
    id: string;
    /** The base URL the other nodes reach its API at (--advertise). */
    address: string;
    /** up while its heartbeat is more recent than --node-timeout. */
    state: "up" | "down";
    /** The node that answered. */
    self?: boolean;
    cpus: number;
    memory_bytes: number;
    disk_bytes: number;
    disk_free_bytes: number;
    /** Its running sandboxes. */
    running: number;
    /** The memory limits of its running sandboxes, added up. */
    memory_reserved_bytes: number;
    started_at: string;
    heartbeat_at: string;
}
/** NodeList is the body of GET /v1/nodes. */
export interface NodeList {
    nodes: Node[];
}
