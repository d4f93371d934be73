// The seed article's flows with the TypeScript SDK: a code interpreter's
// run_code tool, a golden snapshot for fast sessions, a named session
// suspended and resumed, a checkpoint before a risky step, and a fork into
// two models. Run with a daemon up (FORKBOX_URL, default
// http://127.0.0.1:8080), after `npm run build`:
//
//	npx tsc -p examples/tsconfig.json --noEmit   # type-check only
//
// This file is type-checked by the SDK's tests; it is an example, not a test.
import { CheckpointType, Image, NotFoundError, Sandbox, type Execution } from "@forkbox/sdk";

/** The run_code tool of a code interpreter: what the model sees back. */
export async function runCodeTool(sandbox: Sandbox, code: string): Promise<string> {
  const result = await sandbox.run("python3", ["-c", code]);
  let output = result.stdout;
  if (result.stderr) output += `\n[stderr]\n${result.stderr}`;
  return output || "(no output)";
}

/** An image with the packages, built once. */
export async function buildImage(): Promise<void> {
  const image = new Image("code-interpreter", "python")
    .run("mkdir -p /workspace/data")
    .env({ MPLBACKEND: "Agg" })
    .workdir("/workspace");
  const info = await image.build({ onEvent: (e) => e.type === "log" && console.log(e.line) });
  console.log(`built ${info.name} (${info.sizeBytes} bytes)`);
}

/** A golden snapshot, then sessions that start from it. */
export async function goldenSnapshot(): Promise<string> {
  await using setup = await Sandbox.create({ image: "python" });
  await setup.run("python3", [
    "-c",
    "import pandas as pd, numpy as np\n" +
      "df = pd.DataFrame(np.random.randn(1000, 4), columns=list('abcd'))\n" +
      "df.to_csv('/workspace/sample.csv', index=False)\nprint('warm')",
  ]);
  const snapshot = await setup.checkpoint();
  console.log(`snapshot ${snapshot.snapshotId}`);
  return snapshot.snapshotId;
}

/** A named session: suspended over lunch, resumed with its state. */
export async function namedSession(user: string): Promise<void> {
  const name = `session-${user}`;
  let sandbox: Sandbox;
  try {
    sandbox = await Sandbox.connect(name);
    if (sandbox.state === "suspended") await sandbox.resume();
  } catch (err) {
    if (!(err instanceof NotFoundError)) throw err;
    sandbox = await Sandbox.create({ name, cpus: 2, memoryMb: 4096, timeoutSecs: 1800 });
  }
  await sandbox.runCode("rows = 42", { onStdout: (s) => process.stdout.write(s) });
  await sandbox.suspend();
  const again = await Sandbox.connect(name);
  await again.resume();
  const ex: Execution = await again.runCode("rows");
  console.log(ex.text); // "42"
}

/** A checkpoint before a risky filter, and the rollback. */
export async function rollback(sandbox: Sandbox): Promise<Sandbox> {
  const checkpoint = await sandbox.checkpoint({ type: CheckpointType.FILESYSTEM, name: "before-filter" });
  const r = await sandbox.run("python3", ["-c", "print('filtered to 3 rows')"]);
  console.log(r.stdout);
  return Sandbox.create({ snapshotId: checkpoint.snapshotId });
}

/** Fork a live session into two models; print both R². */
export async function fork(sandbox: Sandbox): Promise<void> {
  await sandbox.runCode(
    "import numpy as np\nrng = np.random.default_rng(0)\nX = rng.uniform(-3, 3, (500, 2))\ny = 2 * X[:, 0] + np.sin(2 * X[:, 1])",
  );
  const [linear, boost] = await sandbox.fork(2, { names: ["experiment-linear", "experiment-boost"] });
  const models = [
    [linear!, "from sklearn.linear_model import LinearRegression as M"],
    [boost!, "from sklearn.ensemble import GradientBoostingRegressor as M"],
  ] as const;
  for (const [branch, model] of models) {
    const ex = await branch.runCode(`${model}\nprint(f"R²: {M().fit(X, y).score(X, y):.4f}")`);
    console.log(branch.name, ex.stdout.trim());
    await branch.terminate();
  }
}
