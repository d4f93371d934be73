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
import { eventData, sandboxPath, Transport, type CallOptions, type ConnectionOptions, type RequestBody } from "./http.js";
import {
  networkWire,
  toCodeContext,
  toCommandResult,
  toExecution,
  toExecutionError,
  toFileInfo,
  toPortInfo,
  toResult,
  toSandboxInfo,
  toSnapshot,
  toWriteInfo,
  type CheckpointKind,
  type CodeContext,
  type CommandResult,
  type Execution,
  type ExecutionError,
  type FileInfo,
  type NetworkPolicy,
  type PortInfo,
  type Result,
  type SandboxInfo,
  type SandboxState,
  type Snapshot,
  type Wire,
  type WireKeys,
  type WriteInfo,
} from "./types.js";
import type * as wire from "./wire.js";

// Node 18.18+ and 20.4+ define Symbol.asyncDispose; older runtimes get the
// symbol TypeScript's `await using` helper looks for.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for("Symbol.asyncDispose");

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
export type ForkedSandboxes = Sandbox[] & { snapshot: Snapshot };

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
} satisfies WireKeys<wire.CreateSandboxRequest, SandboxCreateOptions>;

function createBody(o: SandboxCreateOptions): wire.CreateSandboxRequest {
  const b: Wire = {};
  for (const [key, option] of Object.entries(createKeys)) {
    const v = o[option];
    if (v !== undefined && v !== null) b[key] = v;
  }
  // Only true is sent: false is the default.
  if (!o.allowInternetAccess) delete b.allow_internet_access;
  if (o.network) b.network = networkWire(o.network);
  return b as wire.CreateSandboxRequest;
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
export class Sandbox implements AsyncDisposable {
  /** The sandbox's id (sbx_…). */
  readonly id: string;
  /** The sandbox as the last call that returned it described it. */
  info: SandboxInfo;
  /** The sandbox's files. */
  readonly files: Files;
  /** The daemon connection. */
  readonly transport: Transport;

  /** Wraps a sandbox description; most programs use create or connect. */
  constructor(transport: Transport, info: SandboxInfo) {
    this.transport = transport;
    this.id = info.id;
    this.info = info;
    this.files = new Files(this);
  }

  /** The sandbox's name, if it has one. */
  get name(): string | undefined {
    return this.info.name;
  }

  /** The state as of the last call; {@link refresh} asks again. */
  get state(): SandboxState {
    return this.info.state;
  }

  /** Creates a sandbox and returns it once it is running. */
  static async create(opts: SandboxCreateOptions = {}): Promise<Sandbox> {
    const t = new Transport(opts);
    const w = await t.json<Wire>({ method: "POST", path: "/v1/sandboxes", json: createBody(opts), signal: opts.signal });
    return new Sandbox(t, toSandboxInfo(w));
  }

  /**
   * Connects to an existing sandbox by name or id. A suspended sandbox stays
   * suspended until {@link resume} (or, with auto-resume, the next call that
   * needs it running). An unknown one is a NotFoundError.
   */
  static async connect(nameOrId: string, opts: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const t = new Transport(opts);
    const w = await t.json<Wire>({ method: "GET", path: sandboxPath(nameOrId), signal: opts.signal });
    return new Sandbox(t, toSandboxInfo(w));
  }

  /**
   * Lists sandboxes, newest first: every page of the daemon's list.
   * Terminated ones are left out unless `state` is "terminated" (them
   * alone) or `includeTerminated` is set.
   */
  static async list(opts: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const t = new Transport(opts);
    const labels = Object.entries(opts.labels ?? {})
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${k}:${v}`);
    const { items } = await t.listAll<Wire>(
      {
        method: "GET",
        path: "/v1/sandboxes",
        query: {
          state: opts.state || undefined,
          name: opts.name || undefined,
          include_terminated: opts.includeTerminated ? "true" : undefined,
          label: labels.length ? labels : undefined,
        },
        signal: opts.signal,
      },
      "sandboxes",
    );
    return items.map(toSandboxInfo);
  }

  private path(suffix = ""): string {
    return sandboxPath(this.id, suffix);
  }

  private setInfo(w: Wire): SandboxInfo {
    this.info = toSandboxInfo(w);
    return this.info;
  }

  /** Asks the daemon for the sandbox's current state and usage. */
  async refresh(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.setInfo(await this.transport.json<Wire>({ method: "GET", path: this.path(), signal: opts.signal }));
  }

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
  async run(cmd: string, argsOrOpts?: string[] | RunOptions, maybeOpts?: RunOptions): Promise<CommandResult> {
    const args = Array.isArray(argsOrOpts) ? argsOrOpts : undefined;
    const opts = (Array.isArray(argsOrOpts) ? maybeOpts : argsOrOpts) ?? {};
    const body: Wire = { cmd };
    if (args && args.length) body.args = args;
    if (opts.env) body.env = opts.env;
    if (opts.cwd) body.cwd = opts.cwd;
    if (opts.stdin !== undefined && opts.stdin !== "") body.stdin = opts.stdin;
    if (opts.timeoutSecs !== undefined) body.timeout_secs = opts.timeoutSecs;
    const spec = { method: "POST", path: this.path("/exec"), json: body, signal: opts.signal };
    if (!opts.onStdout && !opts.onStderr) {
      return toCommandResult(await this.transport.json<Wire>(spec));
    }
    let stdout = "";
    let stderr = "";
    let result: CommandResult | undefined;
    await this.transport.stream(
      spec,
      "exec",
      (plain) => {
        result = toCommandResult(plain as Wire);
        if (result.stdout) opts.onStdout?.(result.stdout);
        if (result.stderr) opts.onStderr?.(result.stderr);
      },
      (ev) => {
        switch (ev.event) {
          case "stdout":
          case "stderr": {
            const chunk = eventData<{ data?: string }>(ev).data ?? "";
            if (chunk === "") return;
            if (ev.event === "stdout") {
              stdout += chunk;
              opts.onStdout?.(chunk);
            } else {
              stderr += chunk;
              opts.onStderr?.(chunk);
            }
            return;
          }
          case "exit":
            result = toCommandResult(eventData<Wire>(ev));
            result.stdout = stdout;
            result.stderr = stderr;
            return true;
          case "error":
            throw errorFromEventData(ev.data);
        }
        // Other events are from a newer daemon; skip them.
        return;
      },
    );
    return result!;
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
  async runCode(code: string, opts: RunCodeOptions = {}): Promise<Execution> {
    const body: Wire = { code };
    if (opts.language) body.language = opts.language;
    const ctx = typeof opts.context === "string" ? opts.context : opts.context?.id;
    if (ctx) body.context = ctx;
    if (opts.timeoutMs !== undefined) body.timeout_ms = opts.timeoutMs;
    if (opts.env) body.env = opts.env;
    const spec = { method: "POST", path: this.path("/code"), json: body, signal: opts.signal };
    if (!opts.onStdout && !opts.onStderr && !opts.onResult && !opts.onError) {
      return toExecution(await this.transport.json<Wire>(spec));
    }
    let exec: Execution | undefined;
    await this.transport.stream(
      spec,
      "code",
      (plain) => {
        // A daemon (or proxy) that ignores Accept answers with the whole
        // execution: replay it (the order of stdout against the rest is lost).
        exec = toExecution(plain as Wire);
        for (const s of exec.logs.stdout) if (s) opts.onStdout?.(s);
        for (const s of exec.logs.stderr) if (s) opts.onStderr?.(s);
        for (const r of exec.results) opts.onResult?.(r);
        if (exec.error) opts.onError?.(exec.error);
      },
      (ev) => {
        switch (ev.event) {
          case "stdout":
          case "stderr": {
            const chunk = eventData<{ data?: string }>(ev).data ?? "";
            if (chunk === "") return;
            (ev.event === "stdout" ? opts.onStdout : opts.onStderr)?.(chunk);
            return;
          }
          case "result": {
            const r = eventData<Wire | null>(ev);
            if (r) opts.onResult?.(toResult(r));
            return;
          }
          case "error":
            opts.onError?.(toExecutionError(eventData<Wire>(ev)));
            return;
          case "done":
            exec = toExecution(eventData<Wire>(ev));
            return true;
          case "failure":
            throw errorFromEventData(ev.data);
        }
        return;
      },
    );
    return exec!;
  }

  /** Starts a new code context: a kernel with its own variables, cwd and env. */
  async createCodeContext(opts: CreateContextOptions = {}): Promise<CodeContext> {
    const body: Wire = {};
    if (opts.language) body.language = opts.language;
    if (opts.cwd) body.cwd = opts.cwd;
    if (opts.env) body.env = opts.env;
    const w = await this.transport.json<Wire>({ method: "POST", path: this.path("/contexts"), json: body, signal: opts.signal });
    return toCodeContext(w);
  }

  /** Lists the sandbox's code contexts. */
  async listCodeContexts(opts: CallOptions = {}): Promise<CodeContext[]> {
    const w = await this.transport.json<Wire>({ method: "GET", path: this.path("/contexts"), signal: opts.signal });
    return (w.contexts ?? []).map(toCodeContext);
  }

  /** Shuts a context's kernel down and forgets the context. */
  async removeCodeContext(context: string | CodeContext, opts: CallOptions = {}): Promise<void> {
    await this.transport.send({ method: "DELETE", path: this.contextPath(context), signal: opts.signal }).then((r) => r.arrayBuffer());
  }

  /** Interrupts the cell running in a context; its variables stay. */
  async interruptCodeContext(context: string | CodeContext, opts: CallOptions = {}): Promise<CodeContext> {
    return toCodeContext(await this.transport.json<Wire>({ method: "POST", path: this.contextPath(context, "/interrupt"), signal: opts.signal }));
  }

  /** Restarts a context's kernel: its variables are gone, its count restarts. */
  async restartCodeContext(context: string | CodeContext, opts: CallOptions = {}): Promise<CodeContext> {
    return toCodeContext(await this.transport.json<Wire>({ method: "POST", path: this.contextPath(context, "/restart"), signal: opts.signal }));
  }

  private contextPath(context: string | CodeContext, suffix = ""): string {
    const id = typeof context === "string" ? context : context.id;
    if (!id) throw new InvalidArgumentError("invalid_argument", 400, "context id is empty");
    return this.path("/contexts/" + encodeURIComponent(id) + suffix);
  }

  /**
   * Saves the sandbox's state as a snapshot; the sandbox keeps running.
   * "filesystem" (the default) saves the disk; "memory" also every process
   * and its memory, so a restore is a warm start. Pass the snapshot's
   * snapshotId to {@link Sandbox.create} to restore it.
   */
  async checkpoint(opts: CheckpointOptions = {}): Promise<Snapshot> {
    const body: Wire = {};
    if (opts.type) body.type = opts.type;
    if (opts.name) body.name = opts.name;
    return toSnapshot(await this.transport.json<Wire>({ method: "POST", path: this.path("/checkpoint"), json: body, signal: opts.signal }));
  }

  /**
   * Takes a memory snapshot and starts n (1–16) new sandboxes from it, which
   * then diverge from this one and from each other. All or nothing: when a
   * branch fails to start the others are removed. The returned array also
   * carries the snapshot.
   */
  async fork(n: number, opts: ForkOptions = {}): Promise<ForkedSandboxes> {
    const body: Wire = { count: n };
    if (opts.names) body.names = opts.names;
    if (opts.network) body.network = networkWire(opts.network);
    const w = await this.transport.json<Wire>({ method: "POST", path: this.path("/fork"), json: body, signal: opts.signal });
    const branches = (w.sandboxes ?? []).map((s: Wire) => new Sandbox(this.transport, toSandboxInfo(s)));
    return Object.assign(branches, { snapshot: toSnapshot(w.snapshot ?? {}) });
  }

  /**
   * Saves the sandbox with its memory and processes to disk and frees its
   * CPU and RAM. It keeps its id and name; {@link resume} brings it back.
   */
  async suspend(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.setInfo(await this.transport.json<Wire>({ method: "POST", path: this.path("/suspend"), signal: opts.signal }));
  }

  /**
   * How to reach a server listening on `port` inside the sandbox: its URL on
   * the daemon and its token. Requests to the URL are proxied into the
   * sandbox (resuming it when suspended) and need the API key, or the token
   * (header `X-Forkbox-Token` or `?forkbox_token=`), unless the port is
   * public; `opts.public` changes that first.
   */
  async port(port: number, opts: CallOptions & { public?: boolean } = {}): Promise<PortInfo> {
    const path = this.path(`/ports/${port}`);
    const w =
      opts.public === undefined
        ? await this.transport.json<Wire>({ method: "GET", path, signal: opts.signal })
        : await this.transport.json<Wire>({ method: "PUT", path, json: { public: opts.public }, signal: opts.signal });
    return toPortInfo(w);
  }

  /**
   * The URL that reaches `port` inside the sandbox (see {@link port}): its
   * own host name when the daemon has a ports domain, else the daemon's
   * path for it.
   */
  async getHost(port: number, opts: CallOptions = {}): Promise<string> {
    const p = await this.port(port, opts);
    return p.hostUrl ?? p.url;
  }

  /**
   * Replaces the egress policy (an empty one: the default). A running
   * sandbox follows it at once.
   */
  async setNetwork(policy: NetworkPolicy, opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.setInfo(
      await this.transport.json<Wire>({ method: "PATCH", path: this.path(), json: { network: networkWire(policy) }, signal: opts.signal }),
    );
  }

  /** Restores a suspended sandbox with its files, processes and variables. */
  async resume(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.setInfo(await this.transport.json<Wire>({ method: "POST", path: this.path("/resume"), signal: opts.signal }));
  }

  /** Terminates the sandbox and frees everything it holds. */
  async terminate(opts: CallOptions = {}): Promise<SandboxInfo> {
    return this.setInfo(await this.transport.json<Wire>({ method: "DELETE", path: this.path(), signal: opts.signal }));
  }

  /**
   * Terminates the sandbox unless it is gone already; never throws for a
   * sandbox that is already terminated or unknown. `await using` calls it.
   */
  async close(): Promise<void> {
    if (this.info.state === "terminated") return;
    try {
      await this.terminate();
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  toJSON(): SandboxInfo {
    return this.info;
  }
}

/**
 * The files of a sandbox. Paths are sandbox paths; a relative path is
 * relative to /workspace.
 */
export class Files {
  private readonly sb: Sandbox;

  /** @internal */
  constructor(sb: Sandbox) {
    this.sb = sb;
  }

  private path(suffix: string): string {
    return sandboxPath(this.sb.id, suffix);
  }

  /** Reads a whole file as bytes. */
  async read(path: string, opts: CallOptions = {}): Promise<Uint8Array> {
    const resp = await this.sb.transport.send({ method: "GET", path: this.path("/files"), query: { path }, accept: "application/octet-stream", signal: opts.signal });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** Reads a whole file as UTF-8 text. */
  async readText(path: string, opts: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, opts));
  }

  /**
   * Writes a file (text is written as UTF-8), creating parent directories
   * and replacing the file if it exists. A ReadableStream is streamed.
   */
  async write(path: string, data: FileData, opts: WriteOptions = {}): Promise<WriteInfo> {
    let mode: string | undefined;
    if (typeof opts.mode === "number") mode = "0" + (opts.mode & 0o777).toString(8).padStart(3, "0");
    else if (opts.mode) mode = opts.mode;
    const body: RequestBody = data instanceof ArrayBuffer ? new Uint8Array(data) : data;
    const w = await this.sb.transport.json<Wire>({
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
  async list(path = ".", opts: CallOptions = {}): Promise<FileInfo[]> {
    const w = await this.sb.transport.json<Wire>({ method: "GET", path: this.path("/files/list"), query: { path }, signal: opts.signal });
    return (w.entries ?? []).map(toFileInfo);
  }

  /** Removes a file or an empty directory; with recursive, any directory. */
  async remove(path: string, opts: RemoveOptions = {}): Promise<void> {
    const resp = await this.sb.transport.send({
      method: "DELETE",
      path: this.path("/files"),
      query: { path, recursive: opts.recursive ? "true" : undefined },
      signal: opts.signal,
    });
    await resp.arrayBuffer();
  }

  /** Tells whether a path exists (a file, directory or link). */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    const trimmed = path.replace(/\/+$/, "");
    const slash = trimmed.lastIndexOf("/");
    const base = trimmed.slice(slash + 1);
    if (base === "" || base === "." || base === "..") {
      // "/", ".", "..": a directory if it lists.
      try {
        await this.list(path || ".", opts);
        return true;
      } catch (err) {
        if (err instanceof NotFoundError || err instanceof InvalidArgumentError) return false;
        throw err;
      }
    }
    const parent = slash < 0 ? "." : slash === 0 ? "/" : trimmed.slice(0, slash);
    try {
      return (await this.list(parent, opts)).some((e) => e.name === base);
    } catch (err) {
      // No parent, or a parent that is not a directory.
      if (err instanceof NotFoundError || err instanceof InvalidArgumentError) return false;
      throw err;
    }
  }
}
