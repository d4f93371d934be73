// E2B's files.watchDir through its own SDK against forkbox (the sandbox's
// agent watches with inotify). Run by test/e2e/e2b_test.go like flow.mjs.
import { Sandbox } from '@e2b/code-interpreter';
import { FilesystemEventType } from 'e2b';

let ok = true;
function report(step, pass, detail) {
  ok &&= pass;
  console.log(JSON.stringify({ step, ok: pass, detail: String(detail ?? '') }));
}
const sbx = await Sandbox.create({ timeoutMs: 300_000 });
try {
  await sbx.files.makeDir('/home/user/watched');
  const events = [];
  const handle = await sbx.files.watchDir('/home/user/watched', (e) => events.push(e), { recursive: true, timeoutMs: 0 });
  await sbx.files.write('/home/user/watched/a.txt', 'hello');
  await sbx.files.makeDir('/home/user/watched/sub');
  await new Promise((r) => setTimeout(r, 300)); // the new directory is watched once the agent sees it
  await sbx.files.write('/home/user/watched/sub/b.txt', 'deeper');
  await sbx.files.remove('/home/user/watched/a.txt');
  const want = [['a.txt', FilesystemEventType.CREATE], ['a.txt', FilesystemEventType.WRITE], ['sub', FilesystemEventType.CREATE],
    ['sub/b.txt', FilesystemEventType.WRITE], ['a.txt', FilesystemEventType.REMOVE]];
  const deadline = Date.now() + 10_000;
  const missing = () => want.filter(([n, t]) => !events.some((e) => e.name === n && e.type === t));
  while (missing().length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  await handle.stop();
  const m = missing();
  report('watchDir', m.length === 0, m.length ? `missing ${JSON.stringify(m)} among ${JSON.stringify(events.map((e) => [e.name, e.type]))}` : `${events.length} events`);
} catch (err) {
  report('watchDir', false, `${err && err.name}: ${err && err.message}`);
} finally {
  await sbx.kill().catch(() => {});
}
process.exit(ok ? 0 : 1);
