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
import { errorFromEventData, InvalidArgumentError, NotFoundError } from "./errors.js";
import { eventData, sandboxPath, Transport } from "./http.js";
import { networkWire, toCodeContext, toCommandResult, toExecution, toExecutionError, toFileInfo, toPortInfo, toResult, toSandboxInfo, toSnapshot, toWriteInfo, } from "./types.js";
// Node 18.18+ and 20.4+ define Symbol.asyncDispose; older runtimes get the
// symbol TypeScript's `await using` helper looks for.
Symbol.asyncDispose ??= Symbol.for("Symbol.asyncDispose");
/**
 * Which option carries each key of the create request: a key the API adds,
 * renames or drops fails to compile here, naming it.
 */
const createKeys = {
    name: "name",
    image: "image",
    snapshot_id: "snapshotId",
    cpus: "cpus",
    memory_mb: "memoryMb",
    disk_mb: "diskMb",
    pids_limit: "pidsLimit",
    timeout_secs: "timeoutSecs",
    max_lifetime_secs: "maxLifetimeSecs",
    allow_internet_access: "allowInternetAccess",
    network: "network",
    env: "env",
    labels: "labels",
    auto_resume: "autoResume",
    suspend_on_idle: "suspendOnIdle",
    pool: "pool",
    node: "node",
};
function createBody(o) {
    const b = {};
    for (const [key, option] of Object.entries(createKeys)) {
        const v = o[option];
        if (v !== undefined && v !== null)
            b[key] = v;
    }
    // Only true is sent: false is the default.
    if (!o.allowInternetAccess)
        delete b.allow_internet_access;
    if (o.network)
        b.network = networkWire(o.network);
    return b;
}
/**
 * A sandbox of a forkbox daemon. Get one with {@link Sandbox.create},
 * {@link Sandbox.connect} or {@link Sandbox.fork}. Its methods call the
 * daemon by the sandbox's id; {@link Sandbox.info} is the state the last
 * call returned.
 *
 * `await using sb = await Sandbox.create()` terminates the sandbox when the
 * scope ends (see {@link Sandbox.close}).
 */
export class Sandbox {
    /** The sandbox's id (sbx_…). */
    id;
    /** The sandbox as the last call that returned it described it. */
    info;
    /** The sandbox's files. */
    files;
    /** The daemon connection. */
    transport;
    /** Wraps a sandbox description; most programs use create or connect. */
    constructor(transport, info) {
        this.transport = transport;
        this.id = info.id;
        this.info = info;
        this.files = new Files(this);
    }
    /** The sandbox's name, if it has one. */
    get name() {
        return this.info.name;
    }
    /** The state as of the last call; {@link refresh} asks again. */
    get state() {
        return this.info.state;
    }
    /** Creates a sandbox and returns it once it is running. */
    static async create(opts = {}) {
        const t = new Transport(opts);
        const w = await t.json({ method: "POST", path: "/v1/sandboxes", json: createBody(opts), signal: opts.signal });
        return new Sandbox(t, toSandboxInfo(w));
    }
    /**
     * Connects to an existing sandbox by name or id. A suspended sandbox stays
     * suspended until {@link resume} (or, with auto-resume, the next call that
     * needs it running). An unknown one is a NotFoundError.
     */
    static async connect(nameOrId, opts = {}) {
        const t = new Transport(opts);
        const w = await t.json({ method: "GET", path: sandboxPath(nameOrId), signal: opts.signal });
        return new Sandbox(t, toSandboxInfo(w));
    }
    /**
     * Lists sandboxes, newest first: every page of the daemon's list.
     * Terminated ones are left out unless `state` is "terminated" (them
     * alone) or `includeTerminated` is set.
     */
    static async list(opts = {}) {
        const t = new Transport(opts);
        const labels = Object.entries(opts.labels ?? {})
            .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
            .map(([k, v]) => `${k}:${v}`);
        const { items } = await t.listAll({
            method: "GET",
            path: "/v1/sandboxes",
            query: {
                state: opts.state || undefined,
                name: opts.name || undefined,
                include_terminated: opts.includeTerminated ? "true" : undefined,
                label: labels.length ? labels : undefined,
            },
            signal: opts.signal,
        }, "sandboxes");
        return items.map(toSandboxInfo);
    }
    path(suffix = "") {
        return sandboxPath(this.id, suffix);
    }
    setInfo(w) {
        this.info = toSandboxInfo(w);
        return this.info;
    }
    /** Asks the daemon for the sandbox's current state and usage. */
    async refresh(opts = {}) {
        return this.setInfo(await this.transport.json({ method: "GET", path: this.path(), signal: opts.signal }));
    }
    async run(cmd, argsOrOpts, maybeOpts) {
        const args = Array.isArray(argsOrOpts) ? argsOrOpts : undefined;
        const opts = (Array.isArray(argsOrOpts) ? maybeOpts : argsOrOpts) ?? {};
        const body = { cmd };
        if (args && args.length)
            body.args = args;
        if (opts.env)
            body.env = opts.env;
        if (opts.cwd)
            body.cwd = opts.cwd;
        if (opts.stdin !== undefined && opts.stdin !== "")
            body.stdin = opts.stdin;
        if (opts.timeoutSecs !== undefined)
            body.timeout_secs = opts.timeoutSecs;
        const spec = { method: "POST", path: this.path("/exec"), json: body, signal: opts.signal };
        if (!opts.onStdout && !opts.onStderr) {
            return toCommandResult(await this.transport.json(spec));
        }
        let stdout = "";
        let stderr = "";
        let result;
        await this.transport.stream(spec, "exec", (plain) => {
            result = toCommandResult(plain);
            if (result.stdout)
                opts.onStdout?.(result.stdout);
            if (result.stderr)
                opts.onStderr?.(result.stderr);
        }, (ev) => {
            switch (ev.event) {
                case "stdout":
                case "stderr": {
                    const chunk = eventData(ev).data ?? "";
                    if (chunk === "")
                        return;
                    if (ev.event === "stdout") {
                        stdout += chunk;
                        opts.onStdout?.(chunk);
                    }
                    else {
                        stderr += chunk;
                        opts.onStderr?.(chunk);
                    }
                    return;
                }
                case "exit":
                    result = toCommandResult(eventData(ev));
                    result.stdout = stdout;
                    result.stderr = stderr;
                    return true;
                case "error":
                    throw errorFromEventData(ev.data);
            }
            // Other events are from a newer daemon; skip them.
            return;
        });
        return result;
    }
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
    async runCode(code, opts = {}) {
        const body = { code };
        if (opts.language)
            body.language = opts.language;
        const ctx = typeof opts.context === "string" ? opts.context : opts.context?.id;
        if (ctx)
            body.context = ctx;
        if (opts.timeoutMs !== undefined)
            body.timeout_ms = opts.timeoutMs;
        if (opts.env)
            body.env = opts.env;
        const spec = { method: "POST", path: this.path("/code"), json: body, signal: opts.signal };
        if (!opts.onStdout && !opts.onStderr && !opts.onResult && !opts.onError) {
            return toExecution(await this.transport.json(spec));
        }
        let exec;
        await this.transport.stream(spec, "code", (plain) => {
            // A daemon (or proxy) that ignores Accept answers with the whole
            // execution: replay it (the order of stdout against the rest is lost).
            exec = toExecution(plain);
            for (const s of exec.logs.stdout)
                if (s)
                    opts.onStdout?.(s);
            for (const s of exec.logs.stderr)
                if (s)
                    opts.onStderr?.(s);
            for (const r of exec.results)
                opts.onResult?.(r);
            if (exec.error)
                opts.onError?.(exec.error);
        }, (ev) => {
            switch (ev.event) {
                case "stdout":
                case "stderr": {
                    const chunk = eventData(ev).data ?? "";
                    if (chunk === "")
                        return;
                    (ev.event === "stdout" ? opts.onStdout : opts.onStderr)?.(chunk);
                    return;
                }
                case "result": {
                    const r = eventData(ev);
                    if (r)
                        opts.onResult?.(toResult(r));
                    return;
                }
                case "error":
                    opts.onError?.(toExecutionError(eventData(ev)));
                    return;
                case "done":
                    exec = toExecution(eventData(ev));
                    return true;
                case "failure":
                    throw errorFromEventData(ev.data);
            }
            return;
        });
        return exec;
    }
    /** Starts a new code context: a kernel with its own variables, cwd and env. */
    async createCodeContext(opts = {}) {
        const body = {};
        if (opts.language)
            body.language = opts.language;
        if (opts.cwd)
            body.cwd = opts.cwd;
        if (opts.env)
            body.env = opts.env;
        const w = await this.transport.json({ method: "POST", path: this.path("/contexts"), json: body, signal: opts.signal });
        return toCodeContext(w);
    }
    /** Lists the sandbox's code contexts. */
    async listCodeContexts(opts = {}) {
        const w = await this.transport.json({ method: "GET", path: this.path("/contexts"), signal: opts.signal });
        return (w.contexts ?? []).map(toCodeContext);
    }
    /** Shuts a context's kernel down and forgets the context. */
    async removeCodeContext(context, opts = {}) {
        await this.transport.send({ method: "DELETE", path: this.contextPath(context), signal: opts.signal }).then((r) => r.arrayBuffer());
    }
    /** Interrupts the cell running in a context; its variables stay. */
    async interruptCodeContext(context, opts = {}) {
        return toCodeContext(await this.transport.json({ method: "POST", path: this.contextPath(context, "/interrupt"), signal: opts.signal }));
    }
    /** Restarts a context's kernel: its variables are gone, its count restarts. */
    async restartCodeContext(context, opts = {}) {
        return toCodeContext(await this.transport.json({ method: "POST", path: this.contextPath(context, "/restart"), signal: opts.signal }));
    }
    contextPath(context, suffix = "") {
        const id = typeof context === "string" ? context : context.id;
        if (!id)
            throw new InvalidArgumentError("invalid_argument", 400, "context id is empty");
        return this.path("/contexts/" + encodeURIComponent(id) + suffix);
    }
    /**
     * Saves the sandbox's state as a snapshot; the sandbox keeps running.
     * "filesystem" (the default) saves the disk; "memory" also every process
     * and its memory, so a restore is a warm start. Pass the snapshot's
     * snapshotId to {@link Sandbox.create} to restore it.
     */
    async checkpoint(opts = {}) {
        const body = {};
        if (opts.type)
            body.type = opts.type;
        if (opts.name)
            body.name = opts.name;
        return toSnapshot(await this.transport.json({ method: "POST", path: this.path("/checkpoint"), json: body, signal: opts.signal }));
    }
    /**
     * Takes a memory snapshot and starts n (1–16) new sandboxes from it, which
     * then diverge from this one and from each other. All or nothing: when a
     * branch fails to start the others are removed. The returned array also
     * carries the snapshot.
     */
    async fork(n, opts = {}) {
        const body = { count: n };
        if (opts.names)
            body.names = opts.names;
        if (opts.network)
            body.network = networkWire(opts.network);
        const w = await this.transport.json({ method: "POST", path: this.path("/fork"), json: body, signal: opts.signal });
        const branches = (w.sandboxes ?? []).map((s) => new Sandbox(this.transport, toSandboxInfo(s)));
        return Object.assign(branches, { snapshot: toSnapshot(w.snapshot ?? {}) });
    }
    /**
     * Saves the sandbox with its memory and processes to disk and frees its
     * CPU and RAM. It keeps its id and name; {@link resume} brings it back.
     */
    async suspend(opts = {}) {
        return this.setInfo(await this.transport.json({ method: "POST", path: this.path("/suspend"), signal: opts.signal }));
    }
    /**
     * How to reach a server listening on `port` inside the sandbox: its URL on
     * the daemon and its token. Requests to the URL are proxied into the
     * sandbox (resuming it when suspended) and need the API key, or the token
     * (header `X-Forkbox-Token` or `?forkbox_token=`), unless the port is
     * public; `opts.public` changes that first.
     */
    async port(port, opts = {}) {
        const path = this.path(`/ports/${port}`);
        const w = opts.public === undefined
            ? await this.transport.json({ method: "GET", path, signal: opts.signal })
            : await this.transport.json({ method: "PUT", path, json: { public: opts.public }, signal: opts.signal });
        return toPortInfo(w);
    }
    /**
     * The URL that reaches `port` inside the sandbox (see {@link port}): its
     * own host name when the daemon has a ports domain, else the daemon's
     * path for it.
     */
    async getHost(port, opts = {}) {
        const p = await this.port(port, opts);
        return p.hostUrl ?? p.url;
    }
    /**
     * Replaces the egress policy (an empty one: the default). A running
     * sandbox follows it at once.
     */
    async setNetwork(policy, opts = {}) {
        return this.setInfo(await this.transport.json({ method: "PATCH", path: this.path(), json: { network: networkWire(policy) }, signal: opts.signal }));
    }
    /** Restores a suspended sandbox with its files, processes and variables. */
    async resume(opts = {}) {
        return this.setInfo(await this.transport.json({ method: "POST", path: this.path("/resume"), signal: opts.signal }));
    }
    /** Terminates the sandbox and frees everything it holds. */
    async terminate(opts = {}) {
        return this.setInfo(await this.transport.json({ method: "DELETE", path: this.path(), signal: opts.signal }));
    }
    /**
     * Terminates the sandbox unless it is gone already; never throws for a
     * sandbox that is already terminated or unknown. `await using` calls it.
     */
    async close() {
        if (this.info.state === "terminated")
            return;
        try {
            await this.terminate();
        }
        catch (err) {
            if (!(err instanceof NotFoundError))
                throw err;
        }
    }
    async [Symbol.asyncDispose]() {
        await this.close();
    }
    toJSON() {
        return this.info;
    }
}
/**
 * The files of a sandbox. Paths are sandbox paths; a relative path is
 * relative to /workspace.
 */
export class Files {
    sb;
    /** @internal */
    constructor(sb) {
        this.sb = sb;
    }
    path(suffix) {
        return sandboxPath(this.sb.id, suffix);
    }
    /** Reads a whole file as bytes. */
    async read(path, opts = {}) {
        const resp = await this.sb.transport.send({ method: "GET", path: this.path("/files"), query: { path }, accept: "application/octet-stream", signal: opts.signal });
        return new Uint8Array(await resp.arrayBuffer());
    }
    /** Reads a whole file as UTF-8 text. */
    async readText(path, opts = {}) {
        return new TextDecoder().decode(await this.read(path, opts));
    }
    /**
     * Writes a file (text is written as UTF-8), creating parent directories
     * and replacing the file if it exists. A ReadableStream is streamed.
     */
    async write(path, data, opts = {}) {
        let mode;
        if (typeof opts.mode === "number")
            mode = "0" + (opts.mode & 0o777).toString(8).padStart(3, "0");
        else if (opts.mode)
            mode = opts.mode;
        const body = data instanceof ArrayBuffer ? new Uint8Array(data) : data;
        const w = await this.sb.transport.json({
            method: "PUT",
            path: this.path("/files"),
            query: { path, mode },
            body,
            contentType: "application/octet-stream",
            signal: opts.signal,
        });
        return toWriteInfo(w, path);
    }
    /** Lists a directory (default /workspace). */
    async list(path = ".", opts = {}) {
        const w = await this.sb.transport.json({ method: "GET", path: this.path("/files/list"), query: { path }, signal: opts.signal });
        return (w.entries ?? []).map(toFileInfo);
    }
    /** Removes a file or an empty directory; with recursive, any directory. */
    async remove(path, opts = {}) {
        const resp = await this.sb.transport.send({
            method: "DELETE",
            path: this.path("/files"),
            query: { path, recursive: opts.recursive ? "true" : undefined },
            signal: opts.signal,
        });
        await resp.arrayBuffer();
    }
    /** Tells whether a path exists (a file, directory or link). */
    async exists(path, opts = {}) {
        const trimmed = path.replace(/\/+$/, "");
        const slash = trimmed.lastIndexOf("/");
        const base = trimmed.slice(slash + 1);
        if (base === "" || base === "." || base === "..") {
            // "/", ".", "..": a directory if it lists.
            try {
                await this.list(path || ".", opts);
                return true;
            }
            catch (err) {
                if (err instanceof NotFoundError || err instanceof InvalidArgumentError)
                    return false;
                throw err;
            }
        }
        const parent = slash < 0 ? "." : slash === 0 ? "/" : trimmed.slice(0, slash);
        try {
            return (await this.list(parent, opts)).some((e) => e.name === base);
        }
        catch (err) {
            // No parent, or a parent that is not a directory.
            if (err instanceof NotFoundError || err instanceof InvalidArgumentError)
                return false;
            throw err;
        }
    }
}
