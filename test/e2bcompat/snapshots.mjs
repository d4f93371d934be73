// E2B's snapshots and forks through its own SDK against forkbox (forkbox's
// memory snapshots and forks underneath). Run by test/e2e/e2b_test.go like
// flow.mjs: one JSON line per step.
import { Sandbox } from '@e2b/code-interpreter';

const results = [];
async function step(name, fn) {
  try {
    const detail = await fn();
    results.push(true);
    console.log(JSON.stringify({ step: name, ok: true, detail: String(detail ?? '') }));
  } catch (err) {
    results.push(false);
    console.log(JSON.stringify({ step: name, ok: false, detail: `${err && err.name}: ${err && err.message}` }));
  }
}
function check(cond, what) {
  if (!cond) throw new Error(`expected ${what}`);
}

const made = [];
let sbx, snap;
await step('snapshot', async () => {
  sbx = await Sandbox.create({ timeoutMs: 300_000 });
  made.push(sbx);
  await sbx.runCode('x = 7');
  snap = await sbx.createSnapshot({ name: 'seven' });
  check(snap.snapshotId.startsWith('snap_'), `a snapshot id, got ${snap.snapshotId}`);
  check(snap.names.includes('seven'), `its name, got ${snap.names}`);
  const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems();
  check(listed.some((s) => s.snapshotId === snap.snapshotId), `listed: ${JSON.stringify(listed)}`);
  return snap.snapshotId;
});

await step('restore a snapshot', async () => {
  const r = await Sandbox.create(snap.snapshotId, { timeoutMs: 300_000 });
  made.push(r);
  const e = await r.runCode('x')
  check(e.text === '7', `the variable from the snapshot, got ${JSON.stringify(e.text)}`);
  return r.sandboxId;
});

await step('fork', async () => {
  const forks = await sbx.fork({ count: 2 });
  check(forks.length === 2 && forks.every((f) => !(f instanceof Error)), `two forks: ${forks}`);
  made.push(...forks);
  await forks[0].runCode('x = x * 2');
  const a = await forks[0].runCode('x');
  const b = await forks[1].runCode('x');
  const src = await sbx.runCode('x');
  check(a.text === '14' && b.text === '7' && src.text === '7', `independent copies: ${a.text} ${b.text} ${src.text}`);
  return forks.map((f) => f.sandboxId).join(',');
});

await step('delete a snapshot', async () => {
  check((await Sandbox.deleteSnapshot(snap.snapshotId)) === true, 'deleted');
  check((await Sandbox.deleteSnapshot(snap.snapshotId)) === false, 'a second delete is false');
  return 'deleted';
});

for (const s of made) await s.kill().catch(() => {});
process.exit(results.every(Boolean) ? 0 : 1);
