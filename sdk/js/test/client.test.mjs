// Unit tests of the SDK's requests and answers against a local HTTP server
// that records what it is sent and answers as the daemon would: request
// shapes (paths, snake_case bodies, queries, headers), answer mapping,
// streaming (SSE cut in odd places), errors, and the image builder's
// multipart body with its tar.
import { test, describe, before, after, beforeEach } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { mkdtemp, mkdir, writeFile, symlink, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CheckpointType,
  ConnectionError,
  Execution,
  ForkboxClient,
  Image,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  PAGE_SIZE,
  Sandbox,
  UnavailableError,
  ConflictError,
} from "../dist/index.js";

// ---- the fake daemon ----

let server;
let url;
let requests = [];
let routes = new Map(); // "METHOD /path" → handler(req, body, res)

function route(key, fn) {
  routes.set(key, fn);
}

function json(res, status, v) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(v));
}

function apiError(res, status, code, message) {
  json(res, status, { error: { code, message } });
}

// sse writes events in deliberately awkward pieces: split inside lines, the
// CR of a CRLF apart from its LF.
async function sse(res, events, { crlf = false } = {}) {
  res.writeHead(200, { "Content-Type": "text/event-stream" });
  const nl = crlf ? "\r\n" : "\n";
  const text = events.map(([e, d]) => `event: ${e}${nl}data: ${JSON.stringify(d)}${nl}${nl}`).join("");
  for (let i = 0; i < text.length; i += 7) {
    res.write(text.slice(i, i + 7));
    await new Promise((r) => setImmediate(r));
  }
  res.end();
}

before(async () => {
  server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const u = new URL(req.url, "http://x");
      const rec = { method: req.method, path: u.pathname, query: u.searchParams, headers: req.headers, body };
      requests.push(rec);
      const fn = routes.get(`${req.method} ${u.pathname}`);
      if (!fn) return apiError(res, 404, "not_found", `no route ${req.method} ${u.pathname}`);
      Promise.resolve(fn(rec, res)).catch((err) => {
        res.destroy(err);
      });
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((r) => server.close(r)));

beforeEach(() => {
  requests = [];
  routes = new Map();
});

const SBX = {
  id: "sbx_1",
  name: "session-alice",
  state: "running",
  image: "python",
  cpus: 1,
  memory_mb: 2048,
  disk_mb: 4096,
  pids_limit: 512,
  timeout_secs: 600,
  allow_internet_access: false,
  auto_resume: true,
  created_at: "2026-01-02T03:04:05Z",
  last_active_at: "2026-01-02T03:04:06Z",
};

const SNAP = {
  id: "snap_1",
  type: "memory",
  name: "before",
  sandbox_id: "sbx_1",
  image: "python",
  size_bytes: 1234,
  paused_ms: 56,
  created_at: "2026-01-02T03:04:07Z",
};

function body(rec) {
  return JSON.parse(rec.body.toString());
}

async function sandbox() {
  route("GET /v1/sandboxes/sbx_1", (_, res) => json(res, 200, SBX));
  const sb = await Sandbox.connect("sbx_1", { apiUrl: url, apiKey: "k3y" });
  requests = [];
  return sb;
}

// ---- tests ----

describe("connection", () => {
  test("create sends the settings in snake_case, the key as a bearer token", async () => {
    route("POST /v1/sandboxes", (_, res) => json(res, 201, SBX));
    const sb = await Sandbox.create({
      apiUrl: url + "/",
      apiKey: "k3y",
      name: "session-alice",
      image: "python",
      snapshotId: "snap_0",
      cpus: 1.5,
      memoryMb: 2048,
      diskMb: 4096,
      pidsLimit: 256,
      timeoutSecs: 600,
      maxLifetimeSecs: 3600,
      allowInternetAccess: true,
      network: { allowOut: ["*.pypi.org"] },
      env: { A: "1" },
      labels: { user: "alice" },
      autoResume: false,
      suspendOnIdle: true,
      pool: "warm",
      node: "b",
    });
    const [r] = requests;
    assert.equal(r.method, "POST");
    assert.equal(r.path, "/v1/sandboxes");
    assert.equal(r.headers["authorization"], "Bearer k3y");
    assert.equal(r.headers["content-type"], "application/json");
    assert.match(r.headers["user-agent"], /^forkbox-js\//);
    assert.deepEqual(body(r), {
      name: "session-alice",
      image: "python",
      snapshot_id: "snap_0",
      cpus: 1.5,
      memory_mb: 2048,
      disk_mb: 4096,
      pids_limit: 256,
      timeout_secs: 600,
      max_lifetime_secs: 3600,
      allow_internet_access: true,
      network: { allow_out: ["*.pypi.org"] },
      env: { A: "1" },
      labels: { user: "alice" },
      auto_resume: false,
      suspend_on_idle: true,
      pool: "warm",
      node: "b",
    });
    // Every option was set: every key of the API's create request is sent
    // (the generated wire type, src/wire.ts).
    const wireSrc = readFileSync(join(import.meta.dirname, "..", "src", "wire.ts"), "utf8");
    const decl = wireSrc.slice(wireSrc.indexOf("export interface CreateSandboxRequest {"));
    const keys = [...decl.slice(0, decl.indexOf("\n}")).matchAll(/^  ([a-z_]+)\??:/gm)].map((m) => m[1]);
    assert.deepEqual(Object.keys(body(r)).sort(), keys.sort());
    assert.equal(sb.id, "sbx_1");
    assert.equal(sb.name, "session-alice");
    assert.equal(sb.state, "running");
    assert.equal(sb.info.memoryMb, 2048);
    assert.equal(sb.info.timeoutSecs, 600);
    assert.ok(sb.info.createdAt instanceof Date);
    assert.equal(sb.info.createdAt.toISOString(), "2026-01-02T03:04:05.000Z");
  });

  test("create with no options sends an empty object", async () => {
    route("POST /v1/sandboxes", (_, res) => json(res, 201, SBX));
    await Sandbox.create({ apiUrl: url });
    assert.deepEqual(body(requests[0]), {});
    assert.equal(requests[0].headers["authorization"], undefined);
  });

  test("egress policy: on create, and setNetwork as a PATCH", async () => {
    route("POST /v1/sandboxes", (_, res) => json(res, 201, SBX));
    const sb = await Sandbox.create({ apiUrl: url, allowInternetAccess: true, network: { allowOut: ["*.pypi.org"] } });
    assert.deepEqual(body(requests[0]), { allow_internet_access: true, network: { allow_out: ["*.pypi.org"] } });
    route("PATCH /v1/sandboxes/sbx_1", (_, res) => json(res, 200, { ...SBX, network: { deny_out: ["10.0.0.0/8"] } }));
    const info = await sb.setNetwork({ denyOut: ["10.0.0.0/8"] });
    assert.deepEqual(body(requests[1]), { network: { deny_out: ["10.0.0.0/8"] } });
    assert.deepEqual(info.network, { allowOut: [], denyOut: ["10.0.0.0/8"] });
  });

  test("ports: getHost and making one public", async () => {
    route("POST /v1/sandboxes", (_, res) => json(res, 201, SBX));
    const sb = await Sandbox.create({ apiUrl: url });
    const port = { sandbox: "sbx_1", port: 8000, path: "/v1/sandboxes/sbx_1/ports/8000/", url: "http://h/v1/sandboxes/sbx_1/ports/8000/", token: "fbxp_t", public: false };
    route("GET /v1/sandboxes/sbx_1/ports/8000", (_, res) => json(res, 200, port));
    assert.equal(await sb.getHost(8000), port.url);
    assert.deepEqual(await sb.port(8000), { sandbox: "sbx_1", port: 8000, path: port.path, url: port.url, token: "fbxp_t", public: false });
    route("PUT /v1/sandboxes/sbx_1/ports/8000", (_, res) => json(res, 200, { ...port, public: true }));
    assert.equal((await sb.port(8000, { public: true })).public, true);
    assert.deepEqual(body(requests[3]), { public: true });
  });

  test("address and key come from FORKBOX_URL and FORKBOX_API_KEY", async () => {
    route("GET /v1/sandboxes/session-alice", (_, res) => json(res, 200, SBX));
    const saved = [process.env.FORKBOX_URL, process.env.FORKBOX_API_KEY];
    process.env.FORKBOX_URL = url;
    process.env.FORKBOX_API_KEY = "from-env";
    try {
      const sb = await Sandbox.connect("session-alice");
      assert.equal(sb.id, "sbx_1");
      assert.equal(requests[0].headers["authorization"], "Bearer from-env");
      assert.equal(new ForkboxClient().apiUrl, url);
    } finally {
      for (const [k, v] of [["FORKBOX_URL", saved[0]], ["FORKBOX_API_KEY", saved[1]]]) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  test("names are escaped in paths", async () => {
    route("GET /v1/sandboxes/a%2Fb%20c", (_, res) => json(res, 200, SBX));
    await Sandbox.connect("a/b c", { apiUrl: url });
    assert.equal(requests[0].path, "/v1/sandboxes/a%2Fb%20c");
  });

  test("an unknown sandbox is a NotFoundError with the server's message", async () => {
    route("GET /v1/sandboxes/nope", (_, res) => apiError(res, 404, "not_found", 'sandbox "nope" not found'));
    await assert.rejects(Sandbox.connect("nope", { apiUrl: url }), (err) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.status, 404);
      assert.equal(err.code, "not_found");
      assert.equal(err.message, 'sandbox "nope" not found');
      return true;
    });
  });

  test("a daemon that is not there is a ConnectionError", async () => {
    const s = createServer();
    await new Promise((r) => s.listen(0, "127.0.0.1", r));
    const dead = `http://127.0.0.1:${s.address().port}`;
    await new Promise((r) => s.close(r));
    await assert.rejects(Sandbox.connect("x", { apiUrl: dead }), (err) => {
      assert.ok(err instanceof ConnectionError);
      assert.ok(err instanceof UnavailableError);
      assert.equal(err.status, 0);
      assert.match(err.message, /cannot reach the forkbox daemon at http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED/);
      return true;
    });
  });

  test("an aborted call rejects with the signal's reason", async () => {
    route("POST /v1/sandboxes/sbx_1/exec", () => {}); // never answers
    const sb = await sandbox();
    const ac = new AbortController();
    const p = sb.run("sleep", ["100"], { signal: ac.signal });
    setTimeout(() => ac.abort(new Error("user gave up")), 50);
    await assert.rejects(p, /user gave up/);
  });

  test("list sends filters as a query", async () => {
    route("GET /v1/sandboxes", (_, res) => json(res, 200, { sandboxes: [SBX] }));
    const list = await Sandbox.list({ apiUrl: url, state: "running", labels: { z: "1", a: "2" } });
    assert.equal(list.length, 1);
    assert.equal(list[0].name, "session-alice");
    assert.equal(requests[0].query.get("state"), "running");
    assert.deepEqual(requests[0].query.getAll("label"), ["a:2", "z:1"]);
  });

  test("a sandbox's node and suspendOnIdle come from the answer, absent when the daemon leaves them out", async () => {
    route("GET /v1/sandboxes", (_, res) =>
      json(res, 200, { sandboxes: [{ ...SBX, node: "n2", suspend_on_idle: true, state: "lost" }, SBX] }),
    );
    const [clustered, single] = await Sandbox.list({ apiUrl: url });
    assert.equal(clustered.node, "n2");
    assert.equal(clustered.suspendOnIdle, true);
    assert.equal(clustered.state, "lost");
    assert.equal("node" in single, false);
    assert.equal("suspendOnIdle" in single, false);
  });
});

// paged answers as the daemon pages: `size` items a page whatever the limit
// asked (a daemon may give fewer), after the cursor "at-<i>", with
// next_cursor while more follow; `extra` on the first page only.
function paged(key, items, size, extra = {}) {
  return (rec, res) => {
    const c = rec.query.get("cursor");
    const start = c ? Number(c.slice(3)) + 1 : 0;
    const end = Math.min(start + size, items.length);
    const doc = { [key]: items.slice(start, end), ...(start === 0 ? extra : {}) };
    if (end < items.length) doc.next_cursor = `at-${end - 1}`;
    json(res, 200, doc);
  };
}

describe("lists follow the daemon's pages", () => {
  test("Sandbox.list asks for every page, with its filters on each", async () => {
    const sbs = Array.from({ length: 7 }, (_, i) => ({ ...SBX, id: `sbx_${i}` }));
    route("GET /v1/sandboxes", paged("sandboxes", sbs, 3));
    const list = await Sandbox.list({ apiUrl: url, state: "running", includeTerminated: true, labels: { a: "1" } });
    assert.deepEqual(list.map((s) => s.id), sbs.map((s) => s.id));
    assert.deepEqual(requests.map((r) => r.query.get("cursor")), [null, "at-2", "at-5"]);
    for (const r of requests) {
      assert.equal(r.query.get("limit"), String(PAGE_SIZE));
      assert.equal(r.query.get("state"), "running");
      assert.equal(r.query.get("include_terminated"), "true");
      assert.deepEqual(r.query.getAll("label"), ["a:1"]);
    }
    requests = [];
    await Sandbox.list({ apiUrl: url });
    assert.equal(requests[0].query.has("include_terminated"), false);
  });

  test("snapshots and images walk every page; one page is one request", async () => {
    const snaps = Array.from({ length: 5 }, (_, i) => ({ ...SNAP, id: `snap_${i}` }));
    route("GET /v1/snapshots", paged("snapshots", snaps, 2));
    const c = new ForkboxClient({ apiUrl: url });
    assert.deepEqual((await c.listSnapshots()).map((s) => s.snapshotId), snaps.map((s) => s.id));
    assert.equal(requests.length, 3);
    const imgs = Array.from({ length: 4 }, (_, i) => ({ name: `img-${i}`, id: "sha256:x", layers: [], size_bytes: 1, created_at: "2026-01-01T00:00:00Z" }));
    route("GET /v1/images", paged("images", imgs, 2, { building: [{ name: "python", state: "building" }] }));
    assert.deepEqual((await Image.list({ apiUrl: url })).map((i) => i.name), imgs.map((i) => i.name));
    requests = [];
    route("GET /v1/images", paged("images", imgs, 10));
    assert.equal((await c.listImages()).length, 4);
    assert.equal(requests.length, 1);
    route("GET /v1/images", (_, res) => json(res, 200, { images: [] }));
    assert.deepEqual(await Image.list({ apiUrl: url }), []);
  });

  test("a cursor answered back is an error, a refused one the daemon's", async () => {
    route("GET /v1/sandboxes", (_, res) => json(res, 200, { sandboxes: [SBX], next_cursor: "same" }));
    await assert.rejects(Sandbox.list({ apiUrl: url }), (err) => err instanceof InternalError && /cursor/.test(err.message));
    assert.equal(requests.length, 2);
    let n = 0;
    route("GET /v1/sandboxes", (_, res) =>
      n++ === 0 ? json(res, 200, { sandboxes: [SBX], next_cursor: "x" }) : apiError(res, 400, "invalid_argument", "cursor: not a cursor this server made"),
    );
    await assert.rejects(Sandbox.list({ apiUrl: url }), InvalidArgumentError);
  });
});

describe("commands", () => {
  test("run sends cmd and args and maps the result", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) =>
      json(res, 200, { stdout: "42\n", stderr: "", exit_code: 0, duration_ms: 12 }),
    );
    const r = await sb.run("python3", ["-c", "print(6*7)"], { cwd: "/tmp", env: { X: "1" }, timeoutSecs: 5, stdin: "in" });
    assert.deepEqual(body(requests[0]), { cmd: "python3", args: ["-c", "print(6*7)"], cwd: "/tmp", env: { X: "1" }, timeout_secs: 5, stdin: "in" });
    assert.equal(requests[0].headers["accept"], "application/json");
    assert.deepEqual(r, { stdout: "42\n", stderr: "", exitCode: 0, durationMs: 12, timedOut: false, oomKilled: false });
  });

  test("run(cmd, opts) without args; a killed command", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) =>
      json(res, 200, { stdout: "", stderr: "", exit_code: -1, duration_ms: 1000, signal: "SIGKILL", timed_out: true, error: "killed after 1s" }),
    );
    const r = await sb.run("sleep", { timeoutSecs: 1 });
    assert.deepEqual(body(requests[0]), { cmd: "sleep", timeout_secs: 1 });
    assert.equal(r.exitCode, -1);
    assert.equal(r.signal, "SIGKILL");
    assert.equal(r.timedOut, true);
    assert.equal(r.error, "killed after 1s");
  });

  test("run streams output to callbacks and still returns all of it", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) =>
      sse(res, [
        ["stdout", { data: "one\n" }],
        ["stderr", { data: "warn\n" }],
        ["stdout", { data: "two \u00e9\n" }],
        ["exit", { stdout: "", stderr: "", exit_code: 3, duration_ms: 40 }],
      ], { crlf: true }),
    );
    const seen = [];
    const r = await sb.run("sh", ["-c", "x"], { onStdout: (d) => seen.push(["out", d]), onStderr: (d) => seen.push(["err", d]) });
    assert.equal(requests[0].headers["accept"], "text/event-stream");
    assert.deepEqual(seen, [["out", "one\n"], ["err", "warn\n"], ["out", "two \u00e9\n"]]);
    assert.equal(r.stdout, "one\ntwo \u00e9\n");
    assert.equal(r.stderr, "warn\n");
    assert.equal(r.exitCode, 3);
  });

  test("a streaming run that fails midway is a typed error", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) =>
      sse(res, [["stdout", { data: "x" }], ["error", { code: "unavailable", message: "the sandbox's agent went away" }]]),
    );
    await assert.rejects(sb.run("x", [], { onStdout: () => {} }), (err) => {
      assert.ok(err instanceof UnavailableError);
      assert.equal(err.status, 503);
      assert.equal(err.message, "the sandbox's agent went away");
      return true;
    });
  });

  test("a stream cut before its last event is an error", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) => sse(res, [["stdout", { data: "x" }]]));
    await assert.rejects(sb.run("x", [], { onStdout: () => {} }), (err) => err instanceof ConnectionError && /ended before its end/.test(err.message));
  });

  test("a callback that throws stops the call with its own error", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) => sse(res, [["stdout", { data: "x" }], ["exit", { exit_code: 0 }]]));
    await assert.rejects(sb.run("x", [], { onStdout: () => { throw new RangeError("mine"); } }), RangeError);
  });

  test("a daemon that ignores Accept: the plain answer goes to the callbacks", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/exec", (_, res) => json(res, 200, { stdout: "all\n", stderr: "", exit_code: 0, duration_ms: 1 }));
    const seen = [];
    const r = await sb.run("x", [], { onStdout: (d) => seen.push(d) });
    assert.deepEqual(seen, ["all\n"]);
    assert.equal(r.stdout, "all\n");
  });
});

describe("code", () => {
  const EXEC = {
    logs: { stdout: ["hi\n"], stderr: [] },
    results: [{ text: "215", is_main_result: true }, { png: "iVBOR", text: "<Figure>" }],
    error: null,
    execution_count: 2,
    context_id: "ctx_1",
    duration_ms: 30,
  };

  test("runCode sends the cell and maps the execution", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/code", (_, res) => json(res, 200, EXEC));
    const ex = await sb.runCode("sum(sales)", { context: "ctx_1", language: "python", timeoutMs: 5000, env: { K: "v" } });
    assert.deepEqual(body(requests[0]), { code: "sum(sales)", context: "ctx_1", language: "python", timeout_ms: 5000, env: { K: "v" } });
    assert.ok(ex instanceof Execution);
    assert.equal(ex.text, "215");
    assert.equal(ex.executionCount, 2);
    assert.equal(ex.contextId, "ctx_1");
    assert.deepEqual(ex.logs, { stdout: ["hi\n"], stderr: [] });
    assert.equal(ex.stdout, "hi\n");
    assert.equal(ex.error, null);
    assert.deepEqual(ex.results[1], { png: "iVBOR", text: "<Figure>", isMainResult: false });
    assert.equal(ex.results[0].isMainResult, true);
  });

  test("runCode streams stdout, results and the error through callbacks", async () => {
    const sb = await sandbox();
    const err = { name: "NameError", value: "name 'x' is not defined", traceback: ["tb"] };
    route("POST /v1/sandboxes/sbx_1/code", (_, res) =>
      sse(res, [
        ["stdout", { data: "a" }],
        ["stderr", { data: "b" }],
        ["result", { png: "iVBOR" }],
        ["error", err],
        ["done", { ...EXEC, results: [{ png: "iVBOR" }], error: err }],
      ]),
    );
    const seen = [];
    const ex = await sb.runCode("x", {
      onStdout: (d) => seen.push(["stdout", d]),
      onStderr: (d) => seen.push(["stderr", d]),
      onResult: (r) => seen.push(["result", r]),
      onError: (e) => seen.push(["error", e]),
    });
    assert.equal(requests[0].headers["accept"], "text/event-stream");
    assert.deepEqual(seen, [
      ["stdout", "a"],
      ["stderr", "b"],
      ["result", { png: "iVBOR", isMainResult: false }],
      ["error", err],
    ]);
    assert.deepEqual(ex.error, err);
    assert.equal(ex.text, undefined);
  });

  test("a failure event is a typed error with the server's message", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/code", (_, res) =>
      sse(res, [["stdout", { data: "a" }], ["failure", { code: "not_found", message: 'context "ctx_9" not found' }]]),
    );
    await assert.rejects(sb.runCode("1", { onStdout: () => {} }), (e) => e instanceof NotFoundError && e.message === 'context "ctx_9" not found' && e.status === 404);
  });

  test("a refused streaming call answers with its status", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/code", (_, res) => apiError(res, 400, "invalid_argument", 'language "cobol" has no kernel'));
    await assert.rejects(sb.runCode("1", { language: "cobol", onStdout: () => {} }), (e) => e instanceof InvalidArgumentError && e.message === 'language "cobol" has no kernel');
  });

  test("plain JSON answer to a streaming cell is replayed to the callbacks", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/code", (_, res) => json(res, 200, EXEC));
    const out = [];
    const results = [];
    const ex = await sb.runCode("x", { onStdout: (d) => out.push(d), onResult: (r) => results.push(r.text) });
    assert.deepEqual(out, ["hi\n"]);
    assert.deepEqual(results, ["215", "<Figure>"]);
    assert.equal(ex.text, "215");
  });

  test("contexts", async () => {
    const sb = await sandbox();
    const CTX = { id: "ctx_1", language: "python", kernel: "python3", cwd: "/tmp", default: false, state: "new", execution_count: 0, created_at: "2026-01-01T00:00:00Z" };
    route("POST /v1/sandboxes/sbx_1/contexts", (_, res) => json(res, 201, CTX));
    route("GET /v1/sandboxes/sbx_1/contexts", (_, res) => json(res, 200, { contexts: [CTX] }));
    route("POST /v1/sandboxes/sbx_1/contexts/ctx_1/restart", (_, res) => json(res, 200, { ...CTX, state: "idle" }));
    route("DELETE /v1/sandboxes/sbx_1/contexts/ctx_1", (_, res) => { res.writeHead(204); res.end(); });
    route("POST /v1/sandboxes/sbx_1/code", (_, res) => json(res, 200, EXEC));
    const c = await sb.createCodeContext({ cwd: "/tmp", env: { A: "b" } });
    assert.deepEqual(body(requests[0]), { cwd: "/tmp", env: { A: "b" } });
    assert.equal(c.id, "ctx_1");
    assert.equal(c.executionCount, 0);
    await sb.runCode("1", { context: c });
    assert.equal(body(requests[1]).context, "ctx_1");
    assert.equal((await sb.listCodeContexts())[0].kernel, "python3");
    assert.equal((await sb.restartCodeContext(c)).state, "idle");
    await sb.removeCodeContext("ctx_1");
    assert.equal(requests.at(-1).method, "DELETE");
  });
});

describe("files", () => {
  test("write, read, list, remove", async () => {
    const sb = await sandbox();
    route("PUT /v1/sandboxes/sbx_1/files", (rec, res) => json(res, 200, { path: "/workspace/" + rec.query.get("path"), size: rec.body.length }));
    route("GET /v1/sandboxes/sbx_1/files", (_, res) => {
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      res.end(Buffer.from([0, 1, 2, 255]));
    });
    route("GET /v1/sandboxes/sbx_1/files/list", (_, res) =>
      json(res, 200, { path: "/workspace", entries: [{ name: "a.txt", path: "/workspace/a.txt", type: "file", size: 4, mode: "0644", modified_at: "2026-01-01T00:00:00Z" }] }),
    );
    route("DELETE /v1/sandboxes/sbx_1/files", (_, res) => { res.writeHead(204); res.end(); });

    const w = await sb.files.write("a.txt", "h\u00e9", { mode: 0o755 });
    assert.equal(requests[0].query.get("path"), "a.txt");
    assert.equal(requests[0].query.get("mode"), "0755");
    assert.equal(requests[0].headers["content-type"], "application/octet-stream");
    assert.deepEqual([...requests[0].body], [0x68, 0xc3, 0xa9]);
    assert.deepEqual(w, { path: "/workspace/a.txt", size: 3 });

    await sb.files.write("b.bin", new Uint8Array([9, 8]));
    assert.deepEqual([...requests[1].body], [9, 8]);
    assert.equal(requests[1].query.get("mode"), null);
    await sb.files.write("c.bin", new Blob(["xyz"]), { mode: "0600" });
    assert.equal(requests[2].body.toString(), "xyz");
    assert.equal(requests[2].query.get("mode"), "0600");
    await sb.files.write("d.bin", new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode("streamed")); c.close(); } }));
    assert.equal(requests[3].body.toString(), "streamed");

    const data = await sb.files.read("a.txt");
    assert.ok(data instanceof Uint8Array);
    assert.deepEqual([...data], [0, 1, 2, 255]);
    assert.equal(requests[4].query.get("path"), "a.txt");

    const list = await sb.files.list();
    assert.equal(requests[5].query.get("path"), ".");
    assert.equal(list[0].name, "a.txt");
    assert.ok(list[0].modifiedAt instanceof Date);

    await sb.files.remove("dir", { recursive: true });
    assert.equal(requests[6].query.get("recursive"), "true");
    await sb.files.remove("file");
    assert.equal(requests[7].query.get("recursive"), null);
  });
});

describe("lifecycle", () => {
  test("checkpoint, fork, suspend, resume, terminate, dispose", async () => {
    const sb = await sandbox();
    route("POST /v1/sandboxes/sbx_1/checkpoint", (_, res) => json(res, 201, SNAP));
    route("POST /v1/sandboxes/sbx_1/fork", (_, res) =>
      json(res, 201, { snapshot: SNAP, sandboxes: [{ ...SBX, id: "sbx_2", name: "a" }, { ...SBX, id: "sbx_3", name: "b" }] }),
    );
    route("POST /v1/sandboxes/sbx_1/suspend", (_, res) => json(res, 200, { ...SBX, state: "suspended" }));
    route("POST /v1/sandboxes/sbx_1/resume", (_, res) => json(res, 200, SBX));
    route("DELETE /v1/sandboxes/sbx_1", (_, res) => json(res, 200, { ...SBX, state: "terminated", terminated_at: "2026-01-02T04:00:00Z" }));
    route("DELETE /v1/sandboxes/sbx_2", (_, res) => apiError(res, 404, "not_found", "gone"));

    const snap = await sb.checkpoint({ type: CheckpointType.MEMORY, name: "before" });
    assert.deepEqual(body(requests[0]), { type: "memory", name: "before" });
    assert.equal(snap.snapshotId, "snap_1");
    assert.equal(snap.type, "memory");
    assert.equal(snap.sandboxId, "sbx_1");
    assert.equal(snap.pausedMs, 56);
    await sb.checkpoint();
    assert.deepEqual(body(requests[1]), {});

    const branches = await sb.fork(2, { names: ["a", "b"] });
    assert.deepEqual(body(requests[2]), { count: 2, names: ["a", "b"] });
    assert.equal(branches.length, 2);
    assert.ok(branches[0] instanceof Sandbox);
    assert.deepEqual(branches.map((b) => b.name), ["a", "b"]);
    assert.equal(branches.snapshot.snapshotId, "snap_1");

    assert.equal((await sb.suspend()).state, "suspended");
    assert.equal(sb.state, "suspended");
    assert.equal((await sb.resume()).state, "running");
    const done = await sb.terminate();
    assert.equal(done.state, "terminated");
    assert.ok(done.terminatedAt instanceof Date);
    const n = requests.length;
    await sb[Symbol.asyncDispose](); // already terminated: no call
    assert.equal(requests.length, n);
    await branches[0].close(); // unknown to the daemon: no error
    assert.equal(requests.at(-1).path, "/v1/sandboxes/sbx_2");
  });

  test("close propagates errors other than not found", async () => {
    const sb = await sandbox();
    route("DELETE /v1/sandboxes/sbx_1", (_, res) => apiError(res, 409, "conflict", "busy"));
    await assert.rejects(sb.close(), ConflictError);
  });

  test("client: snapshots, pools, health", async () => {
    route("GET /healthz", (_, res) => json(res, 200, { status: "ok" }));
    route("GET /v1/snapshots", (_, res) => json(res, 200, { snapshots: [SNAP] }));
    route("DELETE /v1/snapshots/snap_1", (_, res) => { res.writeHead(204); res.end(); });
    route("POST /v1/pools", (_, res) => json(res, 201, { name: "warm", snapshot_id: "snap_1", image: "python", size: 2, ready: 0, created_at: "2026-01-01T00:00:00Z" }));
    route("POST /v1/sandboxes", (_, res) => json(res, 201, SBX));
    const c = new ForkboxClient({ apiUrl: url, apiKey: "k" });
    await c.health();
    const snaps = await c.listSnapshots({ sandbox: "sbx_1" });
    assert.equal(requests[1].query.get("sandbox"), "sbx_1");
    assert.equal(snaps[0].snapshotId, "snap_1");
    await c.deleteSnapshot("snap_1");
    const p = await c.createPool({ name: "warm", snapshotId: "snap_1", size: 2 });
    assert.deepEqual(body(requests[3]), { name: "warm", snapshot_id: "snap_1", size: 2 });
    assert.equal(p.snapshotId, "snap_1");
    const sb = await c.createSandbox({ pool: "warm" });
    assert.deepEqual(body(requests[4]), { pool: "warm" });
    assert.equal(requests[4].headers["authorization"], "Bearer k");
    assert.equal(sb.transport.apiUrl, url);
  });
});

// ---- image builds ----

// untar reads a ustar/pax archive into {name: {type, mode, data, linkname}}.
function untar(buf) {
  const out = {};
  let off = 0;
  let pax = {};
  const str = (b) => b.toString("utf8").replace(/\0.*$/s, "");
  while (off + 512 <= buf.length) {
    const h = buf.subarray(off, off + 512);
    if (h.every((b) => b === 0)) break;
    let sum = 0;
    for (let i = 0; i < 512; i++) sum += i >= 148 && i < 156 ? 32 : h[i];
    assert.equal(sum, parseInt(str(h.subarray(148, 156)), 8), "checksum");
    assert.equal(str(h.subarray(257, 263)), "ustar");
    const name = str(h.subarray(0, 100));
    const size = parseInt(str(h.subarray(124, 136)), 8);
    const flag = String.fromCharCode(h[156]);
    const data = buf.subarray(off + 512, off + 512 + size);
    off += 512 + Math.ceil(size / 512) * 512;
    if (flag === "x") {
      for (const rec of data.toString("utf8").split("\n").filter(Boolean)) {
        const [, kv] = rec.match(/^\d+ (.*)$/s);
        const i = kv.indexOf("=");
        pax[kv.slice(0, i)] = kv.slice(i + 1);
      }
      continue;
    }
    out[pax.path ?? name] = {
      type: { 0: "file", 5: "dir", 2: "symlink" }[flag],
      mode: parseInt(str(h.subarray(100, 108)), 8),
      data: data.toString(),
      linkname: pax.linkpath ?? str(h.subarray(157, 257)),
    };
    pax = {};
  }
  return out;
}

// multipart splits a multipart/form-data body into {name: {type, filename, data}}.
function multipart(rec) {
  const boundary = rec.headers["content-type"].match(/boundary=(.+)$/)[1].replace(/^"|"$/g, "");
  const parts = {};
  const raw = rec.body.toString("latin1");
  for (const chunk of raw.split("--" + boundary).slice(1, -1)) {
    const [head, ...rest] = chunk.replace(/^\r\n/, "").split("\r\n\r\n");
    const data = Buffer.from(rest.join("\r\n\r\n").replace(/\r\n$/, ""), "latin1");
    const name = head.match(/name="([^"]+)"/)[1];
    parts[name] = { type: head.match(/Content-Type: (.+)/i)?.[1].trim(), data };
  }
  return parts;
}

describe("images", () => {
  const IMG = { name: "ci", id: "sha256:ab", base: "python", layers: ["l1"], env: ["A=1"], workdir: "/workspace", uid: 1000, gid: 1000, size_bytes: 10, created_at: "2026-01-01T00:00:00Z" };

  test("a recipe without copy steps goes as JSON; events reach onEvent", async () => {
    route("POST /v1/images", (_, res) =>
      sse(res, [
        ["step", { type: "step", step: 1, total: 3, kind: "run", detail: "pip install x" }],
        ["log", { type: "log", step: 1, line: "installing" }],
        ["step", { type: "step", step: 2, total: 3, kind: "env", cached: true }],
        ["done", { type: "done", step: 3, image: IMG }],
      ]),
    );
    const events = [];
    const img = await new Image("code-interpreter", "python")
      .run("pip install x")
      .env({ A: "1" })
      .workdir("/workspace")
      .user("user")
      .build({ apiUrl: url, registeredName: "ci", onEvent: (e) => events.push(e) });
    const r = requests[0];
    assert.equal(r.headers["content-type"], "application/json");
    assert.equal(r.headers["accept"], "text/event-stream");
    assert.deepEqual(body(r), {
      name: "ci",
      base: "python",
      steps: [{ run: "pip install x" }, { env: { A: "1" } }, { workdir: "/workspace" }, { user: "user" }],
    });
    assert.deepEqual(events.map((e) => e.type), ["step", "log", "step", "done"]);
    assert.equal(events[1].line, "installing");
    assert.equal(events[2].cached, true);
    assert.equal(img.name, "ci");
    assert.equal(img.workdir, "/workspace");
    assert.equal(img.sizeBytes, 10);
  });

  test("copy steps send the files as a tar in a multipart body", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fbjs-"));
    try {
      await mkdir(join(dir, "app", "sub"), { recursive: true });
      await writeFile(join(dir, "app", "main.py"), "print('hi')\n");
      await writeFile(join(dir, "app", "run.sh"), "#!/bin/sh\n", { mode: 0o755 });
      const long = "x".repeat(120) + ".txt";
      await writeFile(join(dir, "app", "sub", long), "long");
      await symlink("main.py", join(dir, "app", "link"));
      await writeFile(join(dir, "one.csv"), "a,b\n1,2\n");
      route("POST /v1/images", (_, res) => sse(res, [["done", { type: "done", image: IMG }]]));
      await new Image("ci", "python")
        .copy(join(dir, "app"), "/opt/app")
        .run("ls /opt/app")
        .copy(join(dir, "one.csv"), "/workspace/")
        .build({ apiUrl: url });
      const r = requests[0];
      assert.match(r.headers["content-type"], /^multipart\/form-data; boundary=/);
      const parts = multipart(r);
      assert.equal(parts.recipe.type, "application/json");
      assert.deepEqual(JSON.parse(parts.recipe.data.toString()), {
        name: "ci",
        base: "python",
        steps: [{ copy: { src: "c0/app", dest: "/opt/app" } }, { run: "ls /opt/app" }, { copy: { src: "c1/one.csv", dest: "/workspace/one.csv" } }],
      });
      assert.equal(parts.context.type, "application/x-tar");
      const files = untar(parts.context.data);
      assert.deepEqual(Object.keys(files).sort(), [
        "c0/",
        "c0/app/",
        "c0/app/link",
        "c0/app/main.py",
        "c0/app/run.sh",
        "c0/app/sub/",
        `c0/app/sub/${long}`,
        "c1/",
        "c1/one.csv",
      ]);
      assert.equal(files["c0/app/main.py"].data, "print('hi')\n");
      assert.equal(files["c0/app/run.sh"].mode & 0o777, 0o755);
      assert.equal(files[`c0/app/sub/${long}`].data, "long");
      assert.equal(files["c0/app/link"].type, "symlink");
      assert.equal(files["c0/app/link"].linkname, "main.py");
      assert.equal(files["c1/one.csv"].data, "a,b\n1,2\n");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("a failing build is a typed error with the server's message", async () => {
    route("POST /v1/images", (_, res) =>
      sse(res, [["step", { type: "step", step: 1 }], ["error", { code: "invalid_argument", message: "step 1 (run false) exited with status 1" }]]),
    );
    await assert.rejects(new Image("bad", "python").run("false").build({ apiUrl: url }), (e) => e instanceof InvalidArgumentError && e.message === "step 1 (run false) exited with status 1");
  });

  test("a missing copy source is an InvalidArgumentError before anything is sent", async () => {
    await assert.rejects(new Image("x").copy("/nonexistent/fbjs", "/x").build({ apiUrl: url }), InvalidArgumentError);
    assert.equal(requests.length, 0);
  });

  test("recipe() shows the recipe; the default base is the python image", () => {
    assert.deepEqual(new Image("n").run("true").recipe(), { name: "n", base: "python", steps: [{ run: "true" }] });
  });
});
