// Integration tests against a real forkbox daemon, run when FORKBOX_URL is
// set (test/e2e/sdk_js_test.go sets it to its daemon): the seed's lifecycle
// through the SDK only (create, run, runCode keeping variables, files, a
// memory checkpoint restored into a new sandbox, fork into two branches,
// suspend, connect by name, resume, terminate), the image builder with copy
// steps, and bad input as typed errors carrying the server's message.
import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, writeFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  CheckpointType,
  ConflictError,
  ForkboxClient,
  Image,
  InvalidArgumentError,
  NotFoundError,
  Sandbox,
} from "../dist/index.js";

const URL_ = process.env.FORKBOX_URL;
const skip = URL_ ? false : "FORKBOX_URL is not set: no daemon to test against";
const T = { timeout: 300_000 };
const tag = `sdkjs-${process.pid}-${Date.now().toString(36)}`;

// Everything a test creates is terminated at the end, whatever happened.
const created = [];
function track(...sbs) {
  created.push(...sbs);
  return sbs[0];
}
after(async () => {
  for (const sb of created) await sb.close().catch(() => {});
});

describe("lifecycle through the SDK", { skip, ...T }, () => {
  const name = `${tag}-session`;
  let sb;
  let snap;

  test("create a named sandbox", T, async () => {
    sb = track(await Sandbox.create({ name, cpus: 1, memoryMb: 1024, timeoutSecs: 600, labels: { suite: "sdkjs" } }));
    assert.match(sb.id, /^sbx_/);
    assert.equal(sb.name, name);
    assert.equal(sb.state, "running");
    assert.equal(sb.info.memoryMb, 1024);
    assert.equal(sb.info.labels.suite, "sdkjs");
    const listed = await Sandbox.list({ labels: { suite: "sdkjs" }, state: "running" });
    assert.ok(listed.some((s) => s.id === sb.id));
  });

  test("run commands", T, async () => {
    const r = await sb.run("python3", ["-c", "print(6 * 7)"]);
    assert.equal(r.stdout, "42\n");
    assert.equal(r.exitCode, 0);
    assert.ok(r.durationMs >= 0);
    const fail = await sb.run("sh", ["-c", "echo oops >&2; exit 3"]);
    assert.equal(fail.exitCode, 3);
    assert.equal(fail.stderr, "oops\n");
    const chunks = [];
    const streamed = await sb.run("sh", ["-c", "for i in 1 2 3; do echo line $i; sleep 0.1; done"], { onStdout: (d) => chunks.push(d) });
    assert.equal(chunks.join(""), "line 1\nline 2\nline 3\n");
    assert.ok(chunks.length >= 2, `output came in ${chunks.length} chunk(s)`);
    assert.equal(streamed.stdout, "line 1\nline 2\nline 3\n");
    assert.equal(streamed.exitCode, 0);
    const timed = await sb.run("sleep", ["30"], { timeoutSecs: 0.5 });
    assert.equal(timed.timedOut, true);
    assert.notEqual(timed.exitCode, 0);
  });

  test("runCode keeps variables; streams output, results and errors", T, async () => {
    const first = await sb.runCode("sales = [120, 95]");
    assert.equal(first.error, null);
    const ex = await sb.runCode("sum(sales)");
    assert.equal(ex.text, "215");
    assert.equal(ex.executionCount, first.executionCount + 1);

    const out = [];
    const results = [];
    const streamed = await sb.runCode(
      "import matplotlib.pyplot as plt\nprint('plotting')\nplt.plot(sales)\nlen(sales)",
      { onStdout: (d) => out.push(d), onResult: (r) => results.push(r) },
    );
    assert.equal(streamed.error, null);
    assert.equal(out.join(""), "plotting\n");
    assert.equal(streamed.text, "2");
    assert.ok(results.some((r) => r.isMainResult && r.text === "2"));
    assert.ok(results.some((r) => typeof r.png === "string" && r.png.length > 100), "a png result");
    assert.equal(streamed.results.length, results.length);

    const errors = [];
    const bad = await sb.runCode("undefined_name + 1", { onError: (e) => errors.push(e) });
    assert.equal(bad.error?.name, "NameError");
    assert.match(bad.error.value, /undefined_name/);
    assert.deepEqual(errors, [bad.error]);

    const slow = await sb.runCode("import time\nwhile True: time.sleep(0.05)", { timeoutMs: 500 });
    assert.equal(slow.error?.name, "TimeoutError");
    assert.equal((await sb.runCode("sum(sales)")).text, "215", "variables survive the timeout");

    const ctx = await sb.createCodeContext();
    await sb.runCode("sales = [1]", { context: ctx });
    assert.equal((await sb.runCode("sum(sales)", { context: ctx })).text, "1");
    assert.equal((await sb.runCode("sum(sales)")).text, "215");
    await sb.removeCodeContext(ctx);
  });

  test("files", T, async () => {
    const w = await sb.files.write("data/hello.txt", "hello \u00e9\n");
    assert.equal(w.path, "/workspace/data/hello.txt");
    assert.equal(w.size, 9);
    assert.equal(await sb.files.readText("data/hello.txt"), "hello \u00e9\n");
    const bytes = new Uint8Array(256).map((_, i) => i);
    await sb.files.write("/workspace/data/all.bin", bytes, { mode: 0o600 });
    assert.deepEqual(await sb.files.read("data/all.bin"), bytes);
    const list = await sb.files.list("data");
    const byName = Object.fromEntries(list.map((e) => [e.name, e]));
    assert.equal(byName["hello.txt"].type, "file");
    assert.equal(byName["all.bin"].size, 256);
    assert.equal(byName["all.bin"].mode, "0600");
    assert.ok(await sb.files.exists("data/all.bin"));
    await sb.files.remove("data/all.bin");
    assert.equal(await sb.files.exists("data/all.bin"), false);
    // Code sees what the files API wrote.
    assert.equal((await sb.runCode("open('data/hello.txt').read().strip()")).text, "'hello \u00e9'");
    await assert.rejects(sb.files.read("data/none.txt"), NotFoundError);
  });

  test("memory checkpoint, then a new sandbox from it", T, async () => {
    snap = await sb.checkpoint({ type: CheckpointType.MEMORY, name: `${tag}-warm` });
    assert.match(snap.snapshotId, /^snap_/);
    assert.equal(snap.type, "memory");
    assert.equal(snap.sandboxId, sb.id);
    const snaps = await new ForkboxClient().listSnapshots({ sandbox: sb.id });
    assert.ok(snaps.some((s) => s.snapshotId === snap.snapshotId));

    const restored = track(await Sandbox.create({ snapshotId: snap.snapshotId }));
    assert.notEqual(restored.id, sb.id);
    assert.equal(restored.info.snapshotId, snap.snapshotId);
    assert.equal((await restored.runCode("sum(sales)")).text, "215");
    assert.equal(await restored.files.readText("data/hello.txt"), "hello \u00e9\n");
    await restored.terminate();
    assert.equal(restored.state, "terminated");
  });

  test("fork into two branches with different values", T, async () => {
    await sb.runCode("x = 'original'");
    const branches = await sb.fork(2, { names: [`${tag}-linear`, `${tag}-boost`] });
    track(...branches);
    assert.equal(branches.length, 2);
    assert.equal(branches.snapshot.type, "memory");
    const [a, b] = branches;
    assert.equal(a.name, `${tag}-linear`);
    await a.runCode("x = 'linear'");
    await b.runCode("x = 'boost'");
    assert.equal((await a.runCode("x")).text, "'linear'");
    assert.equal((await b.runCode("x")).text, "'boost'");
    assert.equal((await sb.runCode("x")).text, "'original'");
    assert.equal((await b.runCode("sum(sales)")).text, "215", "branches start from the source's state");
    // The seed's two models on the same data print two R² values.
    const setup = "import numpy as np\nrng = np.random.default_rng(0)\nX = rng.uniform(-3, 3, size=(500, 2))\ny = 2 * X[:, 0] + np.sin(2 * X[:, 1])\n";
    const r2 = [];
    for (const [branch, model] of [
      [a, "from sklearn.linear_model import LinearRegression as M"],
      [b, "from sklearn.ensemble import GradientBoostingRegressor as M"],
    ]) {
      const ex = await branch.runCode(`${setup}${model}\nprint(round(M().fit(X, y).score(X, y), 4))`);
      assert.equal(ex.error, null, JSON.stringify(ex.error));
      r2.push(Number(ex.stdout));
    }
    assert.ok(r2.every((v) => v > 0 && v <= 1), `R² ${r2}`);
    assert.notEqual(r2[0], r2[1]);
    for (const br of branches) await br[Symbol.asyncDispose]();
    assert.equal(a.state, "terminated");
    await new ForkboxClient().deleteSnapshot(branches.snapshot.snapshotId);
  });

  test("suspend, connect by name, resume", T, async () => {
    const s = await sb.suspend();
    assert.equal(s.state, "suspended");
    const again = await Sandbox.connect(name);
    assert.equal(again.id, sb.id);
    assert.equal(again.state, "suspended");
    const r = await again.resume();
    assert.equal(r.state, "running");
    assert.equal((await again.runCode("sum(sales)")).text, "215");
    assert.equal((await again.runCode("x")).text, "'original'");
    assert.equal(await again.files.readText("data/hello.txt"), "hello \u00e9\n");
  });

  test("terminate", T, async () => {
    const info = await sb.terminate();
    assert.equal(info.state, "terminated");
    await assert.rejects(sb.run("true"), (err) => err instanceof ConflictError && err.message.includes(sb.id));
    await sb.close(); // a no-op now
    await new ForkboxClient().deleteSnapshot(snap.snapshotId);
  });
});

describe("bad input as typed errors", { skip, ...T }, () => {
  test("unknown sandbox → NotFoundError with the server's message", T, async () => {
    const ref = `${tag}-nope`;
    await assert.rejects(Sandbox.connect(ref), (err) => {
      assert.ok(err instanceof NotFoundError, err.constructor.name);
      assert.equal(err.status, 404);
      assert.equal(err.code, "not_found");
      assert.equal(err.message, `sandbox "${ref}" not found`);
      return true;
    });
  });

  test("invalid create → InvalidArgumentError with the server's message", T, async () => {
    await assert.rejects(Sandbox.create({ cpus: -1 }), (err) => {
      assert.ok(err instanceof InvalidArgumentError, err.constructor.name);
      assert.equal(err.status, 400);
      assert.match(err.message, /cpus/);
      return true;
    });
    await assert.rejects(Sandbox.create({ image: `${tag}-no-image` }), (err) => err instanceof NotFoundError && err.message.includes(`${tag}-no-image`));
    await assert.rejects(Sandbox.create({ snapshotId: "snap_nope" }), NotFoundError);
  });

  test("unknown context and language", T, async () => {
    const sb = track(await Sandbox.create({ memoryMb: 512 }));
    await assert.rejects(sb.runCode("1", { context: "ctx_nope" }), (err) => err instanceof NotFoundError && /ctx_nope/.test(err.message));
    await assert.rejects(sb.runCode("1", { language: "cobol", onStdout: () => {} }), InvalidArgumentError);
    await assert.rejects(sb.fork(0), InvalidArgumentError);
    await sb.close();
  });
});

describe("image builder", { skip, ...T }, () => {
  test("run, env, workdir and copy steps; a sandbox from the image", T, async () => {
    const dir = await mkdtemp(join(tmpdir(), "fbjs-img-"));
    const imgName = `${tag}-img`;
    let sb;
    try {
      await mkdir(join(dir, "app", "pkg"), { recursive: true });
      await writeFile(join(dir, "app", "pkg", "answer.py"), "ANSWER = 42\n");
      await writeFile(join(dir, "sales.csv"), "region,amount\nnorth,120\nsouth,95\n");
      const events = [];
      const img = await new Image(imgName, "python")
        .run("mkdir -p /srv/work && echo built > /srv/work/marker")
        .copy(join(dir, "app"), "/opt/app")
        .copy(join(dir, "sales.csv"), "/srv/work/")
        .env({ PYTHONPATH: "/opt/app", FB_SDK: "js" })
        .workdir("/srv/work")
        .build({ onEvent: (e) => events.push(e) });
      assert.equal(img.name, imgName);
      assert.equal(img.workdir, "/srv/work");
      assert.ok(events.some((e) => e.type === "step" && e.kind === "copy"));
      assert.equal(events.at(-1).type, "done");

      sb = track(await Sandbox.create({ image: imgName, memoryMb: 512 }));
      const r = await sb.run("sh", ["-c", "pwd; cat marker; echo $FB_SDK; python3 -c 'from pkg.answer import ANSWER; print(ANSWER)'; cat sales.csv"]);
      assert.equal(r.stdout, "/srv/work\nbuilt\njs\n42\nregion,amount\nnorth,120\nsouth,95\n", r.stderr);
      assert.equal((await sb.runCode("import pandas as pd\nint(pd.read_csv('sales.csv').amount.sum())")).text, "215");
      await sb.close();

      const failing = new Image(`${tag}-bad`, "python").run("echo about to fail; exit 7").build();
      await assert.rejects(failing, (err) => err instanceof InvalidArgumentError && /7/.test(err.message));
      await assert.rejects(new Image(`${tag}-nobase`, `${tag}-missing-base`).run("true").build(), NotFoundError);
    } finally {
      // The image is in use until its sandbox is gone; images are shared by
      // every daemon of the host, so leave none behind.
      await sb?.close().catch(() => {});
      await Image.delete(imgName).catch(() => {});
      await rm(dir, { recursive: true, force: true });
    }
  });
});
