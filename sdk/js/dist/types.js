/**
 * The SDK's data types (camelCase, with dates as Date) and their conversion
 * from the API's JSON wire types (snake_case), which /v1/openapi.json
 * documents.
 *
 * @module
 */
/** Snapshot types, named as in the Python SDK (`CheckpointType.MEMORY`). */
export const CheckpointType = {
    /** The writable layer only: a restore is a cold boot (limits may change). */
    FILESYSTEM: "filesystem",
    /** Also every process and its memory: a restore is a warm start. */
    MEMORY: "memory",
};
/** The result of running code in a context ({@link Sandbox.runCode}). */
export class Execution {
    /** Every displayed value, in order; the main result is marked. */
    results;
    /** What the code printed. */
    logs;
    /** The cell's error, or null when it ran through. */
    error;
    /** How many cells the context has run, this one included. */
    executionCount;
    /** The context that ran the cell. */
    contextId;
    durationMs;
    constructor(init) {
        this.results = init.results ?? [];
        this.logs = init.logs ?? { stdout: [], stderr: [] };
        this.error = init.error ?? null;
        this.executionCount = init.executionCount ?? 0;
        if (init.contextId !== undefined)
            this.contextId = init.contextId;
        this.durationMs = init.durationMs ?? 0;
    }
    /** The text of the main result (like "215" for `sum([120, 95])`), if any. */
    get text() {
        return this.results.find((r) => r.isMainResult)?.text;
    }
    /** The whole stdout, joined. */
    get stdout() {
        return this.logs.stdout.join("");
    }
    /** The whole stderr, joined. */
    get stderr() {
        return this.logs.stderr.join("");
    }
    toJSON() {
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
function date(v) {
    return typeof v === "string" ? new Date(v) : new Date(NaN);
}
function opt(v) {
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
};
/** @internal */
export function toSandboxInfo(w) {
    const s = {
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
    if (opt(w.name))
        s.name = w.name;
    if (opt(w.state_reason))
        s.stateReason = w.state_reason;
    if (w.network)
        s.network = toNetworkPolicy(w.network);
    if (opt(w.snapshot_id))
        s.snapshotId = w.snapshot_id;
    if (w.max_lifetime_secs)
        s.maxLifetimeSecs = w.max_lifetime_secs;
    if (w.suspend_on_idle)
        s.suspendOnIdle = true;
    if (w.terminated_at)
        s.terminatedAt = date(w.terminated_at);
    if (opt(w.node))
        s.node = w.node;
    if (w.usage)
        s.usage = toUsage(w.usage);
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
};
/** @internal */
export function toUsage(w) {
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
};
/** @internal */
export function toNetworkPolicy(w) {
    return { allowOut: w.allow_out ?? [], denyOut: w.deny_out ?? [] };
}
/** @internal */
export function networkWire(n) {
    const w = {};
    if (n.allowOut?.length)
        w.allow_out = n.allowOut;
    if (n.denyOut?.length)
        w.deny_out = n.denyOut;
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
};
/** @internal */
export function toCommandResult(w) {
    const r = {
        stdout: w.stdout ?? "",
        stderr: w.stderr ?? "",
        exitCode: w.exit_code ?? 0,
        durationMs: w.duration_ms ?? 0,
        timedOut: !!w.timed_out,
        oomKilled: !!w.oom_killed,
    };
    if (opt(w.signal))
        r.signal = w.signal;
    if (opt(w.error))
        r.error = w.error;
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
};
/** @internal */
export function toSnapshot(w) {
    const s = {
        snapshotId: w.id,
        type: w.type,
        sandboxId: w.sandbox_id ?? "",
        image: w.image ?? "",
        sizeBytes: w.size_bytes ?? 0,
        pausedMs: w.paused_ms ?? 0,
        createdAt: date(w.created_at),
    };
    if (opt(w.name))
        s.name = w.name;
    if (opt(w.parent_id))
        s.parentId = w.parent_id;
    return s;
}
const fileInfoKeys = {
    name: "name",
    path: "path",
    type: "type",
    size: "size",
    mode: "mode",
    modified_at: "modifiedAt",
};
/** @internal */
export function toFileInfo(w) {
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
};
/** @internal `path`: the path asked for, should the answer lack it. */
export function toWriteInfo(w, path = "") {
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
};
/** @internal Formats a later daemon adds pass through under their own names. */
export function toResult(w) {
    const { is_main_result, ...formats } = w;
    return { ...formats, isMainResult: is_main_result === true };
}
const executionErrorKeys = {
    name: "name",
    value: "value",
    traceback: "traceback",
};
/** @internal */
export function toExecutionError(w) {
    return { name: w.name ?? "", value: w.value ?? "", traceback: w.traceback ?? [] };
}
const logsKeys = {
    stdout: "stdout",
    stderr: "stderr",
};
/** @internal */
export function toLogs(w) {
    return { stdout: w?.stdout ?? [], stderr: w?.stderr ?? [] };
}
const executionKeys = {
    logs: "logs",
    results: "results",
    error: "error",
    execution_count: "executionCount",
    context_id: "contextId",
    duration_ms: "durationMs",
};
/** @internal */
export function toExecution(w) {
    const init = {
        results: (w.results ?? []).filter((r) => r !== null).map(toResult),
        logs: toLogs(w.logs),
        error: w.error ? toExecutionError(w.error) : null,
        executionCount: w.execution_count ?? 0,
        durationMs: w.duration_ms ?? 0,
    };
    if (opt(w.context_id))
        init.contextId = w.context_id;
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
};
/** @internal */
export function toCodeContext(w) {
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
};
/** @internal */
export function toImageInfo(w) {
    const i = {
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
    if (opt(w.base))
        i.base = w.base;
    if (opt(w.user))
        i.user = w.user;
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
};
/** @internal `name`: the SSE event's name, the type when the data lacks one. */
export function toBuildEvent(w, name = "") {
    const e = { type: w.type || name, step: w.step ?? 0 };
    if (w.total)
        e.total = w.total;
    if (opt(w.kind))
        e.kind = w.kind;
    if (opt(w.detail))
        e.detail = w.detail;
    if (w.cached)
        e.cached = true;
    if (w.line !== undefined)
        e.line = w.line;
    if (w.image)
        e.image = toImageInfo(w.image);
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
};
const poolMemberKeys = {
    id: "id",
    state: "state",
    created_at: "createdAt",
    node: "node",
};
/** @internal */
export function toPoolInfo(w) {
    const p = {
        name: w.name,
        image: w.image ?? "",
        size: w.size ?? 0,
        ready: w.ready ?? 0,
        createdAt: date(w.created_at),
    };
    if (opt(w.snapshot_id))
        p.snapshotId = w.snapshot_id;
    if (Array.isArray(w.members))
        p.members = w.members.map(toPoolMember);
    return p;
}
/** @internal */
export function toPoolMember(w) {
    const m = { id: w.id, state: w.state, createdAt: date(w.created_at) };
    if (opt(w.node))
        m.node = w.node;
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
};
/** @internal */
export function toPortInfo(w) {
    const p = { sandbox: w.sandbox ?? "", port: w.port, url: w.url, path: w.path, token: w.token, public: !!w.public };
    if (opt(w.host_url))
        p.hostUrl = w.host_url;
    return p;
}
/**
 * @internal Every conversion with its wire type (by name in wire.ts) and its
 * key table, for test/wire.test.mjs.
 */
export const conversions = [
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
