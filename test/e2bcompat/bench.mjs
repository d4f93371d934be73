// The cost of the E2B layer per call: the same calls through E2B's own SDK
// (@e2b/code-interpreter) and through forkbox's TypeScript SDK (sdk/js),
// against one daemon, interleaved round by round so that both see the same
// machine. bench/e2b_linux_test.go runs it; it prints one JSON line with,
// per call and SDK, the p50 and p95 in milliseconds.
import { Sandbox as E2BSandbox } from '@e2b/code-interpreter';
import { Sandbox as FBSandbox } from '../../sdk/js/dist/index.js';

const rounds = Number(process.argv[2] || 200);
const creates = Number(process.argv[3] || 5);
const samples = {};
function add(op, sdk, ms) {
  ((samples[op] ??= {})[sdk] ??= []).push(ms);
}
async function time(op, sdk, fn) {
  const t0 = performance.now();
  const v = await fn();
  add(op, sdk, performance.now() - t0);
  return v;
}

const e2b = {
  create: () => E2BSandbox.create({ timeoutMs: 600_000 }),
  code: (s) => s.runCode('1+1'),
  write: (s, i) => s.files.write(`/home/user/b${i % 8}.txt`, 'x'.repeat(1024)),
  read: (s, i) => s.files.read(`/home/user/b${i % 8}.txt`),
  cmd: (s) => s.commands.run('true'),
  // E2B's SDK runs every command as /bin/bash -l -c <cmd>: the same argv
  // through forkbox's SDK separates the shell's cost from the layer's.
  cmdBash: (s) => s.commands.run('true'),
  kill: (s) => s.kill(),
};
const fb = {
  create: () => FBSandbox.create({}),
  code: (s) => s.runCode('1+1'),
  write: (s, i) => s.files.write(`/home/user/b${i % 8}.txt`, 'x'.repeat(1024)),
  read: (s, i) => s.files.read(`/home/user/b${i % 8}.txt`),
  cmd: (s) => s.run('true'),
  cmdBash: (s) => s.run('/bin/bash', ['-l', '-c', 'true']),
  kill: (s) => s.terminate(),
};
const sdks = { e2b, forkbox: fb };

// Create → first cell → kill, a few times each, alternating.
for (let i = 0; i < creates; i++) {
  for (const [name, sdk] of Object.entries(sdks)) {
    const s = await time('create', name, sdk.create);
    await time('first_code', name, () => sdk.code(s));
    await time('kill', name, () => sdk.kill(s));
  }
}
// Per-call overhead on one warm sandbox each.
const live = {};
for (const [name, sdk] of Object.entries(sdks)) {
  live[name] = await sdk.create();
  await sdk.code(live[name]);
  await sdk.write(live[name], 0);
}
for (let i = 0; i < rounds; i++) {
  for (const [name, sdk] of (i % 2 ? Object.entries(sdks).reverse() : Object.entries(sdks))) {
    const s = live[name];
    await time('code', name, () => sdk.code(s));
    await time('write_1k', name, () => sdk.write(s, i));
    await time('read_1k', name, () => sdk.read(s, i));
    await time('command', name, () => sdk.cmd(s));
    await time('command_bash_l', name, () => sdk.cmdBash(s));
  }
}
for (const [name, sdk] of Object.entries(sdks)) await sdk.kill(live[name]);

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const out = {};
for (const [op, bySdk] of Object.entries(samples)) {
  out[op] = {};
  for (const [sdk, xs] of Object.entries(bySdk)) {
    out[op][sdk] = { n: xs.length, p50: +pct(xs, 50).toFixed(2), p95: +pct(xs, 95).toFixed(2) };
  }
}
console.log(JSON.stringify(out));
