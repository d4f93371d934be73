/**
 * Sandboxes: create or connect, run commands and code, move files,
 * checkpoint, fork, suspend, resume and terminate.
 *
 * ```ts
 * import { Sandbox, CheckpointType } from "@forkbox/sdk";
 *
 * await using sb = await Sandbox.create({ cpus: 1, memoryMb: 2048, timeoutSecs: 600 });
 * const r = await sb.run("python3", ["-c", "print(6 * 7)"]);
 * console.log(r.stdout); // "42\n"
 * await sb.runCode("sales = [120, 95]");
 * console.log((await sb.runCode("sum(sales)")).text); // "215"
 * const snap = await sb.checkpoint({ type: CheckpointType.MEMORY });
 * const [a, b] = await sb.fork(2);
 * ```
 *
 * @module
 */
import { Transport, type CallOptions, type ConnectionOptions } from "./http.js";
import { type CheckpointKind, type CodeContext, type CommandResult, type Execution, type ExecutionError, type FileInfo, type NetworkPolicy, type PortInfo, type Result, type SandboxInfo, type SandboxState, type Snapshot, type WriteInfo } from "./types.js";
/** Options of {@link Sandbox.create}: the sandbox's settings and the connection. */
export interface SandboxCreateOptions extends ConnectionOptions, CallOptions {
    /**
     * A name (unique among live sandboxes). A named sandbox suspends when idle
     * past timeoutSecs; an unnamed one is terminated.
     */
    name?: string;
    /** The image to start from (default: the daemon's default image). */
    image?: string;
    /** A snapshot to restore (filesystem: cold boot; memory: warm start). */
    snapshotId?: string;
    cpus?: number;
    memoryMb?: number;
    diskMb?: number;
    pidsLimit?: number;
    /** The idle threshold in seconds (activity resets it). */
    timeoutSecs?: number;
    /** A wall-clock limit in seconds. */
    maxLifetimeSecs?: number;
    /** Network access to the outside (default false). */
    allowInternetAccess?: boolean;
    /** What a sandbox with internet access may reach (default: the public internet only). */
    network?: NetworkPolicy;
    env?: Record<string, string>;
    labels?: Record<string, string>;
    /**
     * A call that needs a suspended sandbox running resumes it (default true);
     * false makes such calls fail with a ConflictError.
     */
    autoResume?: boolean;
    /**
     * Suspend rather than terminate when idle past timeoutSecs, even without
     * a name (named sandboxes always suspend).
     */
    suspendOnIdle?: boolean;
    /** Take a ready sandbox of this warm pool. */
    pool?: string;
    /**
     * Run the sandbox on this node of a cluster (default: the daemon places
     * it on a node with room).
     */
    node?: string;
}
/** Filters of {@link Sandbox.list}. */
export interface SandboxListOptions extends ConnectionOptions, CallOptions {
    state?: SandboxState;
    name?: string;
    /** A sandbox must carry every one of these labels. */
    labels?: Record<string, string>;
    /** List terminated sandboxes too (without it they are left out, unless state is "terminated"). */
    includeTerminated?: boolean;
}
/** Options of {@link Sandbox.run}. */
export interface RunOptions extends CallOptions {
    env?: Record<string, string>;
    /** The working directory (default the image's, /workspace). */
    cwd?: string;
    /** Text written to the command's standard input. */
    stdin?: string;
    /** Kill the command after this many seconds (the result says timedOut). */
    timeoutSecs?: number;
    /** Receives stdout as the command prints it (the call streams then). */
    onStdout?: (data: string) => void;
    /** Receives stderr as the command prints it (the call streams then). */
    onStderr?: (data: string) => void;
}
/** Options of {@link Sandbox.runCode}. */
export interface RunCodeOptions extends CallOptions {
    /** A context (or its id); default the language's default context. */
    context?: string | CodeContext;
    /** "python" (default) or a kernelspec name such as "r". */
    language?: string;
    /** Interrupt the cell after this many milliseconds (error name TimeoutError). */
    timeoutMs?: number;
    /** Environment variables for this cell only (Python). */
    env?: Record<string, string>;
    /** Receives what the code prints on stdout, chunk by chunk. */
    onStdout?: (data: string) => void;
    /** Receives what the code prints on stderr, chunk by chunk. */
    onStderr?: (data: string) => void;
    /** Receives each displayed value as it is produced. */
    onResult?: (result: Result) => void;
    /** Receives the cell's error when it raises. */
    onError?: (error: ExecutionError) => void;
}
/** Options of {@link Sandbox.createCodeContext}. */
export interface CreateContextOptions extends CallOptions {
    /** Default "python". */
    language?: string;
    /** An existing directory; default /workspace. */
    cwd?: string;
    env?: Record<string, string>;
}
/** Options of {@link Sandbox.checkpoint}. */
export interface CheckpointOptions extends CallOptions {
    /** "filesystem" (default) or "memory"; see {@link CheckpointType}. */
    type?: CheckpointKind;
    name?: string;
}
/** Options of {@link Sandbox.fork}. */
export interface ForkOptions extends CallOptions {
    /** Names for the branches: as many distinct names as branches. */
    names?: string[];
    /** An egress policy for the branches; by default they keep this sandbox's. */
    network?: NetworkPolicy;
}
/** The branches of a fork, with the memory snapshot they started from. */
export type ForkedSandboxes = Sandbox[] & {
    snapshot: Snapshot;
};
/** Options of {@link Files.write}. */
export interface WriteOptions extends CallOptions {
    /** Permission bits, as a number (0o755) or octal text ("0755"); default 0644. */
    mode?: number | string;
}
/** Options of {@link Files.remove}. */
export interface RemoveOptions extends CallOptions {
    /** Remove a directory and everything in it. */
    recursive?: boolean;
}
/** What {@link Files.write} takes. */
export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;
/**
 * A sandbox of a forkbox daemon. Get one with {@link Sandbox.create},
 * {@link Sandbox.connect} or {@link Sandbox.fork}. Its methods call the
 * daemon by the sandbox's id; {@link Sandbox.info} is the state the last
 * call returned.
 *
 * `await using sb = await Sandbox.create()` terminates the sandbox when the
 * scope ends (see {@link Sandbox.close}).
 */
export declare class Sandbox implements AsyncDisposable {
    /** The sandbox's id (sbx_…). */
    readonly id: string;
    /** The sandbox as the last call that returned it described it. */
    info: SandboxInfo;
    /** The sandbox's files. */
    readonly files: Files;
    /** The daemon connection. */
    readonly transport: Transport;
    /** Wraps a sandbox description; most programs use create or connect. */
    constructor(transport: Transport, info: SandboxInfo);
    /** The sandbox's name, if it has one. */
    get name(): string | undefined;
    /** The state as of the last call; {@link refresh} asks again. */
    get state(): SandboxState;
    /** Creates a sandbox and returns it once it is running. */
    static create(opts?: SandboxCreateOptions): Promise<Sandbox>;
    /**
     * Connects to an existing sandbox by name or id. A suspended sandbox stays
     * suspended until {@link resume} (or, with auto-resume, the next call that
     * needs it running). An unknown one is a NotFoundError.
     */
    static connect(nameOrId: string, opts?: ConnectionOptions & CallOptions): Promise<Sandbox>;
    /**
     * Lists sandboxes, newest first: every page of the daemon's list.
     * Terminated ones are left out unless `state` is "terminated" (them
     * alone) or `includeTerminated` is set.
     */
    static list(opts?: SandboxListOptions): Promise<SandboxInfo[]>;
    private path;
    private setInfo;
    /** Asks the daemon for the sandbox's current state and usage. */
    refresh(opts?: CallOptions): Promise<SandboxInfo>;
    /**
     * Runs a command and waits for it. A command that runs and exits non-zero
     * is not an error: look at exitCode (and signal, timedOut, oomKilled).
     * With onStdout or onStderr the output streams to them as it is printed;
     * the result still carries all of it.
     *
     * ```ts
     * const r = await sb.run("python3", ["-c", "print('hi')"]);
     * ```
     */
    run(cmd: string, args?: string[], opts?: RunOptions): Promise<CommandResult>;
    run(cmd: string, opts?: RunOptions): Promise<CommandResult>;
    /**
     * Runs a cell of code in a context (the language's default context unless
     * one is given) and waits for it. The context keeps its variables between
     * calls. A cell that raises is not an error of the call: it comes back in
     * the execution's error (NameError, SyntaxError, TimeoutError after
     * timeoutMs, KernelDied, …).
     *
     * With any of onStdout, onStderr, onResult or onError the cell streams:
     * they are called in arrival order as the kernel produces output; the
     * returned execution is still the whole one.
     *
     * ```ts
     * await sb.runCode("sales = [120, 95]");
     * (await sb.runCode("sum(sales)")).text; // "215"
     * ```
     */
    runCode(code: string, opts?: RunCodeOptions): Promise<Execution>;
    /** Starts a new code context: a kernel with its own variables, cwd and env. */
    createCodeContext(opts?: CreateContextOptions): Promise<CodeContext>;
    /** Lists the sandbox's code contexts. */
    listCodeContexts(opts?: CallOptions): Promise<CodeContext[]>;
    /** Shuts a context's kernel down and forgets the context. */
    removeCodeContext(context: string | CodeContext, opts?: CallOptions): Promise<void>;
    /** Interrupts the cell running in a context; its variables stay. */
    interruptCodeContext(context: string | CodeContext, opts?: CallOptions): Promise<CodeContext>;
    /** Restarts a context's kernel: its variables are gone, its count restarts. */
    restartCodeContext(context: string | CodeContext, opts?: CallOptions): Promise<CodeContext>;
    private contextPath;
    /**
     * Saves the sandbox's state as a snapshot; the sandbox keeps running.
     * "filesystem" (the default) saves the disk; "memory" also every process
     * and its memory, so a restore is a warm start. Pass the snapshot's
     * snapshotId to {@link Sandbox.create} to restore it.
     */
    checkpoint(opts?: CheckpointOptions): Promise<Snapshot>;
    /**
     * Takes a memory snapshot and starts n (1–16) new sandboxes from it, which
     * then diverge from this one and from each other. All or nothing: when a
     * branch fails to start the others are removed. The returned array also
     * carries the snapshot.
     */
    fork(n: number, opts?: ForkOptions): Promise<ForkedSandboxes>;
    /**
     * Saves the sandbox with its memory and processes to disk and frees its
     * CPU and RAM. It keeps its id and name; {@link resume} brings it back.
     */
    suspend(opts?: CallOptions): Promise<SandboxInfo>;
    /**
     * How to reach a server listening on `port` inside the sandbox: its URL on
     * the daemon and its token. Requests to the URL are proxied into the
     * sandbox (resuming it when suspended) and need the API key, or the token
     * (header `X-Forkbox-Token` or `?forkbox_token=`), unless the port is
     * public; `opts.public` changes that first.
     */
    port(port: number, opts?: CallOptions & {
        public?: boolean;
    }): Promise<PortInfo>;
    /**
     * The URL that reaches `port` inside the sandbox (see {@link port}): its
     * own host name when the daemon has a ports domain, else the daemon's
     * path for it.
     */
    getHost(port: number, opts?: CallOptions): Promise<string>;
    /**
     * Replaces the egress policy (an empty one: the default). A running
     * sandbox follows it at once.
     */
    setNetwork(policy: NetworkPolicy, opts?: CallOptions): Promise<SandboxInfo>;
    /** Restores a suspended sandbox with its files, processes and variables. */
    resume(opts?: CallOptions): Promise<SandboxInfo>;
    /** Terminates the sandbox and frees everything it holds. */
    terminate(opts?: CallOptions): Promise<SandboxInfo>;
    /**
     * Terminates the sandbox unless it is gone already; never throws for a
     * sandbox that is already terminated or unknown. `await using` calls it.
     */
    close(): Promise<void>;
    [Symbol.asyncDispose](): Promise<void>;
    toJSON(): SandboxInfo;
}
/**
 * The files of a sandbox. Paths are sandbox paths; a relative path is
 * relative to /workspace.
 */
export declare class Files {
    private readonly sb;
    /** @internal */
    constructor(sb: Sandbox);
    private path;
    /** Reads a whole file as bytes. */
    read(path: string, opts?: CallOptions): Promise<Uint8Array>;
    /** Reads a whole file as UTF-8 text. */
    readText(path: string, opts?: CallOptions): Promise<string>;
    /**
     * Writes a file (text is written as UTF-8), creating parent directories
     * and replacing the file if it exists. A ReadableStream is streamed.
     */
    write(path: string, data: FileData, opts?: WriteOptions): Promise<WriteInfo>;
    /** Lists a directory (default /workspace). */
    list(path?: string, opts?: CallOptions): Promise<FileInfo[]>;
    /** Removes a file or an empty directory; with recursive, any directory. */
    remove(path: string, opts?: RemoveOptions): Promise<void>;
    /** Tells whether a path exists (a file, directory or link). */
    exists(path: string, opts?: CallOptions): Promise<boolean>;
}
