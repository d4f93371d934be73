// The committed dist/ must be what tsc makes of src/ (so that the tests,
// which import dist/, test the sources), and the examples must type-check
// against its declarations. Both need TypeScript (npm ci in sdk/js); without
// it they skip.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const skip = existsSync(tsc) ? false : "TypeScript is not installed (npm ci in sdk/js)";

async function files(dir, prefix = "") {
  const out = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const rel = prefix + e.name;
    if (e.isDirectory()) out.push(...(await files(join(dir, e.name), rel + "/")));
    else out.push(rel);
  }
  return out.sort();
}

test("dist/ is up to date with src/ (npm run build)", { skip, timeout: 120_000 }, async () => {
  const out = await mkdtemp(join(tmpdir(), "fbjs-dist-"));
  try {
    execFileSync(process.execPath, [tsc, "-p", "tsconfig.json", "--outDir", out], { cwd: root, stdio: "pipe" });
    const want = await files(out);
    assert.deepEqual(await files(join(root, "dist")), want, "dist/ has other files than tsc makes");
    for (const f of want) {
      const [a, b] = await Promise.all([readFile(join(out, f), "utf8"), readFile(join(root, "dist", f), "utf8")]);
      assert.equal(b, a, `dist/${f} differs from what tsc makes of src/: run npm run build in sdk/js`);
    }
  } finally {
    await rm(out, { recursive: true, force: true });
  }
});

test("the examples type-check against dist/", { skip, timeout: 120_000 }, () => {
  try {
    execFileSync(process.execPath, [tsc, "-p", "examples/tsconfig.json"], { cwd: root, stdio: "pipe" });
  } catch (err) {
    assert.fail(`tsc -p examples/tsconfig.json:\n${err.stdout}${err.stderr}`);
  }
});
