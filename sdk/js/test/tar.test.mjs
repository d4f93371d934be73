// The build-context tar that Image.build sends, read back by the system's
// tar (GNU tar on our hosts): long names and link targets through pax
// headers, modes, links kept as links, non-ASCII names.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, mkdir, writeFile, symlink, readFile, readlink, stat, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { collect, tar } from "../dist/tar.js";

let hasTar = true;
try {
  execFileSync("tar", ["--version"], { stdio: "ignore" });
} catch {
  hasTar = false;
}

test("tar of a tree extracts with the system's tar", { skip: hasTar ? false : "no tar command" }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "fbjs-tar-"));
  try {
    const src = join(dir, "src");
    const deep = join(src, "a".repeat(60), "b".repeat(60));
    await mkdir(deep, { recursive: true });
    await writeFile(join(deep, "c".repeat(110) + ".txt"), "deep");
    await writeFile(join(src, "caf\u00e9 \u4e16\u754c.txt"), "unicode name");
    await writeFile(join(src, "run.sh"), "#!/bin/sh\necho hi\n", { mode: 0o750 });
    await writeFile(join(src, "empty"), "");
    await writeFile(join(src, "big.bin"), Buffer.alloc(70000, 7));
    await symlink("../" + "t".repeat(120), join(src, "longlink"));
    await symlink("run.sh", join(src, "link"));
    const archive = tar(await collect(src, "ctx"));
    assert.equal(archive.length % 512, 0);
    await writeFile(join(dir, "ctx.tar"), archive);
    const out = join(dir, "out");
    await mkdir(out);
    execFileSync("tar", ["-xf", join(dir, "ctx.tar"), "-C", out]);
    const x = join(out, "ctx");
    assert.equal(await readFile(join(x, "a".repeat(60), "b".repeat(60), "c".repeat(110) + ".txt"), "utf8"), "deep");
    assert.equal(await readFile(join(x, "caf\u00e9 \u4e16\u754c.txt"), "utf8"), "unicode name");
    assert.equal((await stat(join(x, "run.sh"))).mode & 0o777, 0o750);
    assert.equal((await readFile(join(x, "empty"))).length, 0);
    assert.deepEqual(await readFile(join(x, "big.bin")), Buffer.alloc(70000, 7));
    assert.equal(await readlink(join(x, "longlink")), "../" + "t".repeat(120));
    assert.equal(await readlink(join(x, "link")), "run.sh");
    // The same tree gives the same tar.
    assert.deepEqual(tar(await collect(src, "ctx")), archive);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
