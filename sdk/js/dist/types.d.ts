/**
 * The SDK's data types (camelCase, with dates as Date) and their conversion
 * from the API's JSON wire types (snake_case), which /v1/openapi.json
 * documents.
 *
 * @module
 */
import type * as wire from "./wire.js";
/** Sandbox lifecycle states. */
export type SandboxState = "creating" | "running" | "suspending" | "suspended" | "resuming" | "terminated" | "error"
/** It ran on a node of a cluster that stopped answering; it can only be deleted. */
 | "lost" | (string & {});
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
export declare const CheckpointType: {
    /** The writable layer only: a restore is a cold boot (limits may change). */
    readonly FILESYSTEM: "filesystem";
    /** Also every process and its memory: a restore is a warm start. */
    readonly MEMORY: "memory";
};
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
export declare class Execution {
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
    });
    /** The text of the main result (like "215" for `sum([120, 95])`), if any. */
    get text(): string | undefined;
    /** The whole stdout, joined. */
    get stdout(): string;
    /** The whole stderr, joined. */
    get stderr(): string;
    toJSON(): Record<string, unknown>;
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
/** @internal */
export type Wire = Record<string, any>;
/**
 * @internal A wire object as received, for the conversions below: only the
 * keys of its schema (wire.ts, generated from the API's document), so that
 * reading a field the API does not have fails to compile; their values are
 * taken as they come (absent or null included).
 */
export type Received<T> = {
    [K in keyof T]?: any;
};
/**
 * @internal Where a conversion puts each key of wire type W: the field of
 * the SDK's type P that carries it, or why it is left out. Each conversion
 * below has such a table, declared `satisfies WireKeys<wire.X, X>`, so that
 * a key the API adds, renames or drops fails to compile, naming the key
 * (missing from the table, or not a key of wire.X); test/wire.test.mjs
 * checks that the conversion does set the field the table names.
 */
export type WireKeys<W, P> = {
    readonly [K in NamedKeys<W>]-?: (keyof P & string) | NotExposed;
};
/** @internal A wire key the SDK leaves out on purpose, and why. */
export interface NotExposed {
    readonly notExposed: string;
}
/** The keys of T other than an index signature's (wire.Result has one). */
type NamedKeys<T> = keyof {
    [K in keyof T as string extends K ? never : K]: T[K];
};
/** @internal */
export declare function toSandboxInfo(w: Received<wire.Sandbox>): SandboxInfo;
/** @internal */
export declare function toUsage(w: Received<wire.Usage>): Usage;
/** @internal */
export declare function toNetworkPolicy(w: Received<wire.NetworkPolicy>): NetworkPolicy;
/** @internal */
export declare function networkWire(n: NetworkPolicy): Wire;
/** @internal */
export declare function toCommandResult(w: Received<wire.ExecResult>): CommandResult;
/** @internal */
export declare function toSnapshot(w: Received<wire.Snapshot>): Snapshot;
/** @internal */
export declare function toFileInfo(w: Received<wire.FileInfo>): FileInfo;
/** @internal `path`: the path asked for, should the answer lack it. */
export declare function toWriteInfo(w: Received<wire.WriteFileResult>, path?: string): WriteInfo;
/** @internal Formats a later daemon adds pass through under their own names. */
export declare function toResult(w: Received<wire.Result>): Result;
/** @internal */
export declare function toExecutionError(w: Received<wire.ExecutionError>): ExecutionError;
/** @internal */
export declare function toLogs(w: Received<wire.Logs> | undefined | null): Logs;
/** @internal */
export declare function toExecution(w: Received<wire.Execution>): Execution;
/** @internal */
export declare function toCodeContext(w: Received<wire.Context>): CodeContext;
/** @internal */
export declare function toImageInfo(w: Received<wire.Image>): ImageInfo;
/** @internal `name`: the SSE event's name, the type when the data lacks one. */
export declare function toBuildEvent(w: Received<wire.BuildEvent>, name?: string): BuildEvent;
/** @internal */
export declare function toPoolInfo(w: Received<wire.Pool>): PoolInfo;
/** @internal */
export declare function toPoolMember(w: Received<wire.PoolMember>): PoolMember;
/** @internal */
export declare function toPortInfo(w: Received<wire.Port>): PortInfo;
/**
 * @internal Every conversion with its wire type (by name in wire.ts) and its
 * key table, for test/wire.test.mjs.
 */
export declare const conversions: readonly {
    wire: string;
    type: string;
    convert: (w: Wire) => unknown;
    keys: Record<string, string | NotExposed>;
}[];
export {};
