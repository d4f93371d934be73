/**
 * The SDK's data types (camelCase, with dates as Date) and their conversion
 * from the API's JSON wire types (snake_case), which /v1/openapi.json
 * documents.
 *
 * @module
 */

import type * as wire from "./wire.js";

/** Sandbox lifecycle states. */
export type SandboxState =
  | "creating"
  | "running"
  | "suspending"
  | "suspended"
  | "resuming"
  | "terminated"
  | "error"
  /** It ran on a node of a cluster that stopped answering; it can only be deleted. */
  | "lost"
  | (string & {});

/** What a running sandbox consumes now. */
export interface Usage {
  cpuSeconds: number;
  memoryBytes: number;
  memoryPeakBytes: number;
  pids: number;
  diskUsedBytes: number;
  runningSeconds: number;
  suspendedSeconds: number;
}

/** A sandbox as the API describes it. */
export interface SandboxInfo {
  id: string;
  name?: string;
  state: SandboxState;
  stateReason?: string;
  image: string;
  snapshotId?: string;
  cpus: number;
  memoryMb: number;
  diskMb: number;
  pidsLimit: number;
  timeoutSecs: number;
  maxLifetimeSecs?: number;
  allowInternetAccess: boolean;
  /** The egress policy; absent: the default (the public internet only). */
  network?: NetworkPolicy;
  autoResume: boolean;
  /**
   * Suspended, not terminated, at its idle timeout though it has no name
   * (named sandboxes always are); absent: false.
   */
  suspendOnIdle?: boolean;
  env: Record<string, string>;
  labels: Record<string, string>;
  createdAt: Date;
  lastActiveAt: Date;
  terminatedAt?: Date;
  usage?: Usage;
  /**
   * The node of the cluster that runs the sandbox (or holds its suspend
   * image); absent on a single daemon.
   */
  node?: string;
}

/** The result of a command run with {@link Sandbox.run}. */
export interface CommandResult {
  stdout: string;
  stderr: string;
  /** The exit status; -1 when the process was killed by a signal. */
  exitCode: number;
  durationMs: number;
  /** The signal that killed the process, such as "SIGKILL". */
  signal?: string;
  /** The command ran past its timeoutSecs and was killed. */
  timedOut: boolean;
  /** The command was killed for running out of memory. */
  oomKilled: boolean;
  /** Why the process ended abnormally, in words. */
  error?: string;
}

/** Snapshot types. */
export type CheckpointKind = "filesystem" | "memory";

/** Snapshot types, named as in the Python SDK (`CheckpointType.MEMORY`). */
export const CheckpointType = {
  /** The writable layer only: a restore is a cold boot (limits may change). */
  FILESYSTEM: "filesystem",
  /** Also every process and its memory: a restore is a warm start. */
  MEMORY: "memory",
} as const satisfies Record<string, CheckpointKind>;

/** A saved state of a sandbox. */
export interface Snapshot {
  /** The snapshot's id (snap_…); pass it as `snapshotId` to Sandbox.create. */
  snapshotId: string;
  type: CheckpointKind;
  name?: string;
  sandboxId: string;
  parentId?: string;
  image: string;
  sizeBytes: number;
  /** How long the sandbox was paused to take it. */
  pausedMs: number;
  createdAt: Date;
}

/** An entry of a directory listing. */
export interface FileInfo {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other" | (string & {});
  size: number;
  /** Permission bits in octal, such as "0644". */
  mode: string;
  modifiedAt: Date;
}

/** The answer of a file write. */
export interface WriteInfo {
  path: string;
  size: number;
}

/**
 * One displayed value of a cell, keyed by format. A pandas DataFrame gives
 * `text` and `html`; a matplotlib figure gives `png` (base64) and `text`.
 */
export interface Result {
  text?: string;
  html?: string;
  markdown?: string;
  latex?: string;
  /** Base64-encoded PNG. */
  png?: string;
  /** Base64-encoded JPEG. */
  jpeg?: string;
  svg?: string;
  json?: unknown;
  javascript?: string;
  /** Base64-encoded PDF. */
  pdf?: string;
  /** Other MIME types, keyed by type. */
  extra?: Record<string, unknown>;
  /** The value of the cell's last expression. */
  isMainResult: boolean;
  [format: string]: unknown;
}

/** A cell that raised: NameError, SyntaxError, TimeoutError, KernelDied, … */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string[];
}

/** What a cell printed, in order. */
export interface Logs {
  stdout: string[];
  stderr: string[];
}

/** The result of running code in a context ({@link Sandbox.runCode}). */
export class Execution {
  /** Every displayed value, in order; the main result is marked. */
  results: Result[];
  /** What the code printed. */
  logs: Logs;
  /** The cell's error, or null when it ran through. */
  error: ExecutionError | null;
  /** How many cells the context has run, this one included. */
  executionCount: number;
  /** The context that ran the cell. */
  contextId?: string;
  durationMs: number;

  constructor(init: {
    results?: Result[];
    logs?: Logs;
    error?: ExecutionError | null;
    executionCount?: number;
    contextId?: string;
    durationMs?: number;
  }) {
    this.results = init.results ?? [];
    this.logs = init.logs ?? { stdout: [], stderr: [] };
    this.error = init.error ?? null;
    this.executionCount = init.executionCount ?? 0;
    if (init.contextId !== undefined) this.contextId = init.contextId;
    this.durationMs = init.durationMs ?? 0;
  }

  /** The text of the main result (like "215" for `sum([120, 95])`), if any. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  /** The whole stdout, joined. */
  get stdout(): string {
    return this.logs.stdout.join("");
  }

  /** The whole stderr, joined. */
  get stderr(): string {
    return this.logs.stderr.join("");
  }

  toJSON(): Record<string, unknown> {
    return {
      results: this.results,
      logs: this.logs,
      error: this.error,
      executionCount: this.executionCount,
      contextId: this.contextId,
      durationMs: this.durationMs,
    };
  }
}

/** A kernel-backed code context of a sandbox, with its own variables. */
export interface CodeContext {
  id: string;
  language: string;
  /** The kernelspec name. */
  kernel: string;
  cwd: string;
  /** The default context of its language. */
  default: boolean;
  /** "new" (no kernel yet), "idle", "busy" or "dead". */
  state: string;
  executionCount: number;
  createdAt: Date;
}

/** An image as the API shows it. */
export interface ImageInfo {
  name: string;
  /** A digest of the image's layers and defaults ("sha256:…"). */
  id: string;
  /** What it was built on: "debian:bookworm", an image's name, "oci", "host". */
  base?: string;
  layers: string[];
  env: string[];
  workdir: string;
  user?: string;
  uid: number;
  gid: number;
  sizeBytes: number;
  createdAt: Date;
}

/** One event of an image build: a step starts, a line of output, the end. */
export interface BuildEvent {
  type: "step" | "log" | "done" | (string & {});
  /** The 1-based step number (0 for the base). */
  step: number;
  total?: number;
  /** base, run, env, workdir, user, copy, layer. */
  kind?: string;
  /** The command, path or base. */
  detail?: string;
  /** The step's layer came from the cache. */
  cached?: boolean;
  line?: string;
  image?: ImageInfo;
}

/** A warm pool of ready sandboxes. */
export interface PoolInfo {
  name: string;
  snapshotId?: string;
  image: string;
  size: number;
  ready: number;
  createdAt: Date;
  /** The sandboxes it keeps ready (only from `listPools({ members: true })`). */
  members?: PoolMember[];
}

/** A sandbox a pool keeps ready; `Sandbox.connect(id)` or a delete by id works on it. */
export interface PoolMember {
  id: string;
  state: SandboxState;
  createdAt: Date;
  node?: string;
}

/**
 * The egress policy of a sandbox with internet access. By default it
 * reaches the public internet only (no LAN, link-local or cloud metadata
 * address, no host). `allowOut` takes IPv4 addresses, CIDRs and domain
 * names (`*.pypi.org`; a name makes the policy an allow-list) and wins over
 * the defaults and `denyOut` (addresses, CIDRs).
 */
export interface NetworkPolicy {
  allowOut?: string[];
  denyOut?: string[];
}

/** How to reach a port of a sandbox ({@link Sandbox.port}). */
export interface PortInfo {
  /** The sandbox's id. */
  sandbox: string;
  port: number;
  /** The proxy's URL on the daemon. */
  url: string;
  /** The proxy's path on the daemon, ending in "/". */
  path: string;
  /** With a ports domain on the daemon: the port at "/" of a host of its own. */
  hostUrl?: string;
  /** Lets a client through without the API key (header X-Forkbox-Token). */
  token: string;
  public: boolean;
}

// ---- wire types and conversions ----

/** @internal */
export type Wire = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * @internal A wire object as received, for the conversions below: only the
 * keys of its schema (wire.ts, generated from the API's document), so that
 * reading a field the API does not have fails to compile; their values are
 * taken as they come (absent or null included).
 */
export type Received<T> = { [K in keyof T]?: any }; // eslint-disable-line @typescript-eslint/no-explicit-any

/**
 * @internal Where a conversion puts each key of wire type W: the field of
 * the SDK's type P that carries it, or why it is left out. Each conversion
 * below has such a table, declared `satisfies WireKeys<wire.X, X>`, so that
 * a key the API adds, renames or drops fails to compile, naming the key
 * (missing from the table, or not a key of wire.X); test/wire.test.mjs
 * checks that the conversion does set the field the table names.
 */
export type WireKeys<W, P> = { readonly [K in NamedKeys<W>]-?: (keyof P & string) | NotExposed };

/** @internal A wire key the SDK leaves out on purpose, and why. */
export interface NotExposed {
  readonly notExposed: string;
}

/** The keys of T other than an index signature's (wire.Result has one). */
type NamedKeys<T> = keyof { [K in keyof T as string extends K ? never : K]: T[K] };

function date(v: unknown): Date {
  return typeof v === "string" ? new Date(v) : new Date(NaN);
}

function opt<T>(v: T | undefined | null | ""): T | undefined {
  return v === undefined || v === null || v === "" ? undefined : v;
}

const sandboxKeys = {
  id: "id",
  name: "name",
  state: "state",
  state_reason: "stateReason",
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
  auto_resume: "autoResume",
  suspend_on_idle: "suspendOnIdle",
  env: "env",
  labels: "labels",
  created_at: "createdAt",
  last_active_at: "lastActiveAt",
  terminated_at: "terminatedAt",
  usage: "usage",
  node: "node",
} satisfies WireKeys<wire.Sandbox, SandboxInfo>;

/** @internal */
export function toSandboxInfo(w: Received<wire.Sandbox>): SandboxInfo {
  const s: SandboxInfo = {
    id: w.id,
    state: w.state,
    image: w.image ?? "",
    cpus: w.cpus ?? 0,
    memoryMb: w.memory_mb ?? 0,
    diskMb: w.disk_mb ?? 0,
    pidsLimit: w.pids_limit ?? 0,
    timeoutSecs: w.timeout_secs ?? 0,
    allowInternetAccess: !!w.allow_internet_access,
    autoResume: !!w.auto_resume,
    env: w.env ?? {},
    labels: w.labels ?? {},
    createdAt: date(w.created_at),
    lastActiveAt: date(w.last_active_at),
  };
  if (opt(w.name)) s.name = w.name;
  if (opt(w.state_reason)) s.stateReason = w.state_reason;
  if (w.network) s.network = toNetworkPolicy(w.network);
  if (opt(w.snapshot_id)) s.snapshotId = w.snapshot_id;
  if (w.max_lifetime_secs) s.maxLifetimeSecs = w.max_lifetime_secs;
  if (w.suspend_on_idle) s.suspendOnIdle = true;
  if (w.terminated_at) s.terminatedAt = date(w.terminated_at);
  if (opt(w.node)) s.node = w.node;
  if (w.usage) s.usage = toUsage(w.usage);
  return s;
}

const usageKeys = {
  cpu_seconds: "cpuSeconds",
  memory_bytes: "memoryBytes",
  memory_peak_bytes: "memoryPeakBytes",
  pids: "pids",
  disk_used_bytes: "diskUsedBytes",
  running_seconds: "runningSeconds",
  suspended_seconds: "suspendedSeconds",
} satisfies WireKeys<wire.Usage, Usage>;

/** @internal */
export function toUsage(w: Received<wire.Usage>): Usage {
  return {
    cpuSeconds: w.cpu_seconds ?? 0,
    memoryBytes: w.memory_bytes ?? 0,
    memoryPeakBytes: w.memory_peak_bytes ?? 0,
    pids: w.pids ?? 0,
    diskUsedBytes: w.disk_used_bytes ?? 0,
    runningSeconds: w.running_seconds ?? 0,
    suspendedSeconds: w.suspended_seconds ?? 0,
  };
}

const networkPolicyKeys = {
  allow_out: "allowOut",
  deny_out: "denyOut",
} satisfies WireKeys<wire.NetworkPolicy, NetworkPolicy>;

/** @internal */
export function toNetworkPolicy(w: Received<wire.NetworkPolicy>): NetworkPolicy {
  return { allowOut: w.allow_out ?? [], denyOut: w.deny_out ?? [] };
}

/** @internal */
export function networkWire(n: NetworkPolicy): Wire {
  const w: Wire = {};
  if (n.allowOut?.length) w.allow_out = n.allowOut;
  if (n.denyOut?.length) w.deny_out = n.denyOut;
  return w;
}

const commandResultKeys = {
  stdout: "stdout",
  stderr: "stderr",
  exit_code: "exitCode",
  duration_ms: "durationMs",
  signal: "signal",
  timed_out: "timedOut",
  oom_killed: "oomKilled",
  error: "error",
} satisfies WireKeys<wire.ExecResult, CommandResult>;

/** @internal */
export function toCommandResult(w: Received<wire.ExecResult>): CommandResult {
  const r: CommandResult = {
    stdout: w.stdout ?? "",
    stderr: w.stderr ?? "",
    exitCode: w.exit_code ?? 0,
    durationMs: w.duration_ms ?? 0,
    timedOut: !!w.timed_out,
    oomKilled: !!w.oom_killed,
  };
  if (opt(w.signal)) r.signal = w.signal;
  if (opt(w.error)) r.error = w.error;
  return r;
}

const snapshotKeys = {
  // The name Sandbox.create and createPool take it by.
  id: "snapshotId",
  type: "type",
  name: "name",
  sandbox_id: "sandboxId",
  parent_id: "parentId",
  image: "image",
  size_bytes: "sizeBytes",
  paused_ms: "pausedMs",
  created_at: "createdAt",
} satisfies WireKeys<wire.Snapshot, Snapshot>;

/** @internal */
export function toSnapshot(w: Received<wire.Snapshot>): Snapshot {
  const s: Snapshot = {
    snapshotId: w.id,
    type: w.type,
    sandboxId: w.sandbox_id ?? "",
    image: w.image ?? "",
    sizeBytes: w.size_bytes ?? 0,
    pausedMs: w.paused_ms ?? 0,
    createdAt: date(w.created_at),
  };
  if (opt(w.name)) s.name = w.name;
  if (opt(w.parent_id)) s.parentId = w.parent_id;
  return s;
}

const fileInfoKeys = {
  name: "name",
  path: "path",
  type: "type",
  size: "size",
  mode: "mode",
  modified_at: "modifiedAt",
} satisfies WireKeys<wire.FileInfo, FileInfo>;

/** @internal */
export function toFileInfo(w: Received<wire.FileInfo>): FileInfo {
  return {
    name: w.name,
    path: w.path,
    type: w.type,
    size: w.size ?? 0,
    mode: w.mode ?? "",
    modifiedAt: date(w.modified_at),
  };
}

const writeInfoKeys = {
  path: "path",
  size: "size",
} satisfies WireKeys<wire.WriteFileResult, WriteInfo>;

/** @internal `path`: the path asked for, should the answer lack it. */
export function toWriteInfo(w: Received<wire.WriteFileResult>, path = ""): WriteInfo {
  return { path: w.path ?? path, size: w.size ?? 0 };
}

const resultKeys = {
  text: "text",
  html: "html",
  markdown: "markdown",
  latex: "latex",
  png: "png",
  jpeg: "jpeg",
  svg: "svg",
  json: "json",
  javascript: "javascript",
  pdf: "pdf",
  extra: "extra",
  is_main_result: "isMainResult",
} satisfies WireKeys<wire.Result, Result>;

/** @internal Formats a later daemon adds pass through under their own names. */
export function toResult(w: Received<wire.Result>): Result {
  const { is_main_result, ...formats } = w;
  return { ...formats, isMainResult: is_main_result === true };
}

const executionErrorKeys = {
  name: "name",
  value: "value",
  traceback: "traceback",
} satisfies WireKeys<wire.ExecutionError, ExecutionError>;

/** @internal */
export function toExecutionError(w: Received<wire.ExecutionError>): ExecutionError {
  return { name: w.name ?? "", value: w.value ?? "", traceback: w.traceback ?? [] };
}

const logsKeys = {
  stdout: "stdout",
  stderr: "stderr",
} satisfies WireKeys<wire.Logs, Logs>;

/** @internal */
export function toLogs(w: Received<wire.Logs> | undefined | null): Logs {
  return { stdout: w?.stdout ?? [], stderr: w?.stderr ?? [] };
}

const executionKeys = {
  logs: "logs",
  results: "results",
  error: "error",
  execution_count: "executionCount",
  context_id: "contextId",
  duration_ms: "durationMs",
} satisfies WireKeys<wire.Execution, Execution>;

/** @internal */
export function toExecution(w: Received<wire.Execution>): Execution {
  const init: ConstructorParameters<typeof Execution>[0] = {
    results: (w.results ?? []).filter((r: unknown) => r !== null).map(toResult),
    logs: toLogs(w.logs),
    error: w.error ? toExecutionError(w.error) : null,
    executionCount: w.execution_count ?? 0,
    durationMs: w.duration_ms ?? 0,
  };
  if (opt(w.context_id)) init.contextId = w.context_id;
  return new Execution(init);
}

const codeContextKeys = {
  id: "id",
  language: "language",
  kernel: "kernel",
  cwd: "cwd",
  default: "default",
  state: "state",
  execution_count: "executionCount",
  created_at: "createdAt",
} satisfies WireKeys<wire.Context, CodeContext>;

/** @internal */
export function toCodeContext(w: Received<wire.Context>): CodeContext {
  return {
    id: w.id,
    language: w.language ?? "",
    kernel: w.kernel ?? "",
    cwd: w.cwd ?? "",
    default: !!w.default,
    state: w.state ?? "",
    executionCount: w.execution_count ?? 0,
    createdAt: date(w.created_at),
  };
}

const imageInfoKeys = {
  name: "name",
  id: "id",
  base: "base",
  layers: "layers",
  env: "env",
  workdir: "workdir",
  user: "user",
  uid: "uid",
  gid: "gid",
  size_bytes: "sizeBytes",
  created_at: "createdAt",
} satisfies WireKeys<wire.Image, ImageInfo>;

/** @internal */
export function toImageInfo(w: Received<wire.Image>): ImageInfo {
  const i: ImageInfo = {
    name: w.name,
    id: w.id ?? "",
    layers: w.layers ?? [],
    env: w.env ?? [],
    workdir: w.workdir ?? "",
    uid: w.uid ?? 0,
    gid: w.gid ?? 0,
    sizeBytes: w.size_bytes ?? 0,
    createdAt: date(w.created_at),
  };
  if (opt(w.base)) i.base = w.base;
  if (opt(w.user)) i.user = w.user;
  return i;
}

const buildEventKeys = {
  type: "type",
  step: "step",
  total: "total",
  kind: "kind",
  detail: "detail",
  cached: "cached",
  line: "line",
  image: "image",
} satisfies WireKeys<wire.BuildEvent, BuildEvent>;

/** @internal `name`: the SSE event's name, the type when the data lacks one. */
export function toBuildEvent(w: Received<wire.BuildEvent>, name = ""): BuildEvent {
  const e: BuildEvent = { type: w.type || name, step: w.step ?? 0 };
  if (w.total) e.total = w.total;
  if (opt(w.kind)) e.kind = w.kind;
  if (opt(w.detail)) e.detail = w.detail;
  if (w.cached) e.cached = true;
  if (w.line !== undefined) e.line = w.line;
  if (w.image) e.image = toImageInfo(w.image);
  return e;
}

const poolInfoKeys = {
  name: "name",
  snapshot_id: "snapshotId",
  image: "image",
  size: "size",
  ready: "ready",
  created_at: "createdAt",
  members: "members",
} satisfies WireKeys<wire.Pool, PoolInfo>;

const poolMemberKeys = {
  id: "id",
  state: "state",
  created_at: "createdAt",
  node: "node",
} satisfies WireKeys<wire.PoolMember, PoolMember>;

/** @internal */
export function toPoolInfo(w: Received<wire.Pool>): PoolInfo {
  const p: PoolInfo = {
    name: w.name,
    image: w.image ?? "",
    size: w.size ?? 0,
    ready: w.ready ?? 0,
    createdAt: date(w.created_at),
  };
  if (opt(w.snapshot_id)) p.snapshotId = w.snapshot_id;
  if (Array.isArray(w.members)) p.members = w.members.map(toPoolMember);
  return p;
}

/** @internal */
export function toPoolMember(w: Received<wire.PoolMember>): PoolMember {
  const m: PoolMember = { id: w.id, state: w.state as SandboxState, createdAt: date(w.created_at) };
  if (opt(w.node)) m.node = w.node;
  return m;
}

const inListings = "set in listings of a sandbox's ports only (GET /ports), which the SDK does not make";

const portInfoKeys = {
  sandbox: "sandbox",
  port: "port",
  path: "path",
  url: "url",
  host_url: "hostUrl",
  token: "token",
  public: "public",
  listening: { notExposed: inListings },
  process: { notExposed: inListings },
} satisfies WireKeys<wire.Port, PortInfo>;

/** @internal */
export function toPortInfo(w: Received<wire.Port>): PortInfo {
  const p: PortInfo = { sandbox: w.sandbox ?? "", port: w.port, url: w.url, path: w.path, token: w.token, public: !!w.public };
  if (opt(w.host_url)) p.hostUrl = w.host_url;
  return p;
}

/**
 * @internal Every conversion with its wire type (by name in wire.ts) and its
 * key table, for test/wire.test.mjs.
 */
export const conversions: readonly { wire: string; type: string; convert: (w: Wire) => unknown; keys: Record<string, string | NotExposed> }[] = [
  { wire: "Sandbox", type: "SandboxInfo", convert: toSandboxInfo, keys: sandboxKeys },
  { wire: "Usage", type: "Usage", convert: toUsage, keys: usageKeys },
  { wire: "NetworkPolicy", type: "NetworkPolicy", convert: toNetworkPolicy, keys: networkPolicyKeys },
  { wire: "ExecResult", type: "CommandResult", convert: toCommandResult, keys: commandResultKeys },
  { wire: "Snapshot", type: "Snapshot", convert: toSnapshot, keys: snapshotKeys },
  { wire: "FileInfo", type: "FileInfo", convert: toFileInfo, keys: fileInfoKeys },
  { wire: "WriteFileResult", type: "WriteInfo", convert: toWriteInfo, keys: writeInfoKeys },
  { wire: "Result", type: "Result", convert: toResult, keys: resultKeys },
  { wire: "ExecutionError", type: "ExecutionError", convert: toExecutionError, keys: executionErrorKeys },
  { wire: "Logs", type: "Logs", convert: toLogs, keys: logsKeys },
  { wire: "Execution", type: "Execution", convert: toExecution, keys: executionKeys },
  { wire: "Context", type: "CodeContext", convert: toCodeContext, keys: codeContextKeys },
  { wire: "Image", type: "ImageInfo", convert: toImageInfo, keys: imageInfoKeys },
  { wire: "BuildEvent", type: "BuildEvent", convert: toBuildEvent, keys: buildEventKeys },
  { wire: "Pool", type: "PoolInfo", convert: toPoolInfo, keys: poolInfoKeys },
  { wire: "PoolMember", type: "PoolMember", convert: toPoolMember, keys: poolMemberKeys },
  { wire: "Port", type: "PortInfo", convert: toPortInfo, keys: portInfoKeys },
];
