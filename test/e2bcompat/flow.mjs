// E2B's own SDKs, unchanged, against a forkbox daemon. Configured only by
// E2B's environment variables: E2B_API_URL and E2B_SANDBOX_URL (the
// daemon), E2B_API_KEY (a forkbox key). test/e2e/e2b_test.go runs this and
// reads the JSON lines it prints: one per step, {"step", "ok", "detail"}.
import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as BaseSandbox, NotFoundError, AuthenticationError, CommandExitError, TimeoutError } from 'e2b';

const results = [];
function report(step, ok, detail) {
  results.push({ step, ok });
  console.log(JSON.stringify({ step, ok, detail: detail === undefined ? '' : String(detail) }));
}
async function step(name, fn) {
  try {
    const detail = await fn();
    report(name, true, detail);
  } catch (err) {
    report(name, false, `${err && err.name}: ${err && err.message}`);
  }
}
function check(cond, what) {
  if (!cond) throw new Error(`expected ${what}`);
}

const who = `flow-${process.pid}-${Date.now()}`;
let sbx;
await step('create', async () => {
  sbx = await Sandbox.create({ metadata: { who }, timeoutMs: 300_000 });
  check(sbx.sandboxId, 'a sandbox id');
  return sbx.sandboxId;
});
if (!sbx) {
  process.exit(1);
}

await step('runCode state', async () => {
  const a = await sbx.runCode('x = 1');
  check(!a.error, `no error: ${a.error && a.error.value}`);
  const b = await sbx.runCode('x + 1');
  check(b.text === '2', `text "2", got ${JSON.stringify(b.text)}`);
  check(b.executionCount === 2, `execution count 2, got ${b.executionCount}`);
  return `${b.text} #${b.executionCount}`;
});

await step('runCode streams and errors', async () => {
  const out = [];
  const e = await sbx.runCode('print("hello")\nraise ValueError("bad")', { onStdout: (m) => out.push(m.line) });
  check(e.logs.stdout.join('').includes('hello'), `stdout hello: ${JSON.stringify(e.logs)}`);
  check(out.join('').includes('hello'), 'the onStdout callback');
  check(e.error && e.error.name === 'ValueError' && e.error.value === 'bad', `a ValueError: ${JSON.stringify(e.error)}`);
  check(typeof e.error.traceback === 'string' && e.error.traceback.length > 0, 'a traceback');
  return e.error.name;
});

await step('chart', async () => {
  const e = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 1])\nplt.show()');
  check(!e.error, `no error: ${e.error && e.error.value}`);
  const png = e.results.find((r) => r.png);
  check(png, `a png result among ${e.results.map((r) => r.formats().join('+')).join(', ')}`);
  check(Buffer.from(png.png, 'base64').subarray(0, 4).toString('latin1') === '\x89PNG', 'PNG bytes');
  return `${png.png.length} base64 bytes`;
});

await step('files', async () => {
  await sbx.files.write('/home/user/flow.txt', 'hello from e2b');
  const back = await sbx.files.read('/home/user/flow.txt');
  check(back === 'hello from e2b', `read back, got ${JSON.stringify(back)}`);
  const list = await sbx.files.list('/home/user');
  check(list.some((e) => e.name === 'flow.txt' && e.type === 'file'), `flow.txt listed: ${list.map((e) => e.name)}`);
  check(await sbx.files.exists('/home/user/flow.txt'), 'exists');
  await sbx.files.remove('/home/user/flow.txt');
  check(!(await sbx.files.exists('/home/user/flow.txt')), 'gone after remove');
  let missing = false;
  try {
    await sbx.files.read('/home/user/nope.txt');
  } catch (err) {
    missing = err instanceof NotFoundError;
  }
  check(missing, 'reading a missing file is a NotFoundError');
  check(await sbx.files.makeDir('/home/user/newdir'), 'makeDir');
  check((await sbx.files.makeDir('/home/user/newdir')) === false, 'makeDir of an existing dir is false');
  return list.length;
});

await step('commands', async () => {
  await sbx.files.write('/home/user/listed.txt', 'x');
  const r = await sbx.commands.run('ls /home/user');
  check(r.exitCode === 0, `exit 0, got ${r.exitCode}`);
  check(r.stdout.includes('listed.txt'), `stdout lists listed.txt: ${JSON.stringify(r.stdout)}`);
  const env = await sbx.commands.run('echo "$GREETING from $(pwd)"', { envs: { GREETING: 'hi' }, cwd: '/tmp' });
  check(env.stdout.trim() === 'hi from /tmp', `envs and cwd: ${JSON.stringify(env.stdout)}`);
  let exit = -1;
  try {
    await sbx.commands.run('echo oops >&2; exit 3');
  } catch (err) {
    if (err instanceof CommandExitError) exit = err.exitCode;
    else throw err;
  }
  check(exit === 3, `CommandExitError with exit code 3, got ${exit}`);
  return r.stdout.trim().split('\n').length;
});

await step('timeout keeps variables', async () => {
  let timedOut = false;
  try {
    await sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 2000 });
  } catch (err) {
    timedOut = err instanceof TimeoutError || /timeout|timed out|abort/i.test(String(err && err.message));
  }
  check(timedOut, 'the long cell timed out');
  // The cell was interrupted when the client went away: the kernel is
  // free again, and x is still there.
  const e = await sbx.runCode('x', { timeoutMs: 60_000 });
  check(e.text === '1', `x kept, got ${JSON.stringify(e.text)} ${e.error && e.error.value}`);
  return 'interrupted';
});

await step('contexts', async () => {
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' });
  check(ctx.id && ctx.cwd === '/tmp', `a context: ${JSON.stringify(ctx)}`);
  const e = await sbx.runCode('import os\nos.getcwd()', { context: ctx });
  check(e.text === '/tmp', `cwd /tmp, got ${JSON.stringify(e.text)}`);
  const y = await sbx.runCode('x = 100', { context: ctx });
  check(!y.error, 'set x in the context');
  const main = await sbx.runCode('x');
  check(main.text === '1', 'contexts keep their own variables');
  const list = await sbx.listCodeContexts();
  check(list.some((c) => c.id === ctx.id), 'the context listed');
  await sbx.removeCodeContext(ctx);
  const after = await sbx.listCodeContexts();
  check(!after.some((c) => c.id === ctx.id), 'removed');
  return ctx.id;
});

await step('background commands', async () => {
  // stdin kept open: the command reads what sendStdin sends.
  const h = await sbx.commands.run('read line; echo got:$line', { background: true, stdin: true });
  await sbx.commands.sendStdin(h.pid, 'hello\n');
  const r = await h.wait();
  check(r.stdout.includes('got:hello'), `got:hello, got ${JSON.stringify(r.stdout)}`);
  // A command that outlives its call: listed, followed again, killed.
  const s = await sbx.commands.run('sleep 100', { background: true });
  const listed = await sbx.commands.list();
  check(listed.some((p) => p.pid === s.pid), `pid ${s.pid} listed: ${JSON.stringify(listed.map((p) => p.pid))}`);
  const c = await sbx.commands.connect(s.pid);
  check(c.pid === s.pid, `connect to pid ${s.pid}, got ${c.pid}`);
  check((await sbx.commands.kill(s.pid)) === true, 'kill answers true');
  let ended = '';
  try {
    await c.wait();
    ended = 'exit 0';
  } catch (err) {
    if (!(err instanceof CommandExitError)) throw err;
    ended = err.error || `exit ${err.exitCode}`;
  }
  await s.wait().catch(() => {});
  check((await sbx.commands.kill(s.pid)) === false, 'a second kill answers false');
  const after = await sbx.commands.list();
  check(!after.some((p) => p.pid === s.pid), 'gone from the list');
  return `${h.pid} ${s.pid} ${ended}`;
});

await step('pty', async () => {
  // A terminal: bash -i -l on a pty of 80x24, typed into, resized, left.
  const dec = new TextDecoder();
  let out = '';
  const enc = new TextEncoder();
  const t = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }); } });
  const waitFor = async (want) => {
    for (const end = Date.now() + 20_000; !out.includes(want); ) {
      if (Date.now() > end) throw new Error(`expected ${JSON.stringify(want)} in the terminal, got ${JSON.stringify(out)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  await sbx.pty.sendInput(t.pid, enc.encode('stty size\n'));
  await waitFor('24 80');
  await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
  await sbx.pty.sendInput(t.pid, enc.encode('stty size; exit\n'));
  const r = await t.wait();
  check(out.includes('30 100'), `'30 100' after the resize, got ${JSON.stringify(out)}`);
  check(r.exitCode === 0, `exit 0, got ${r.exitCode}`);
  return `${t.pid}`;
});

await step('pause and connect', async () => {
  await sbx.pause();
  const info = await BaseSandbox.getInfo(sbx.sandboxId);
  check(info.state === 'paused', `paused, got ${info.state}`);
  const again = await Sandbox.connect(sbx.sandboxId);
  const e = await again.runCode('x + 41');
  check(e.text === '42', `x survived the pause, got ${JSON.stringify(e.text)}`);
  sbx = again;
  return 'resumed';
});

await step('getInfo', async () => {
  const info = await sbx.getInfo();
  check(info.sandboxId === sbx.sandboxId, 'its id');
  check(info.state === 'running', `running, got ${info.state}`);
  check(info.metadata && info.metadata.who === who, `metadata who, got ${JSON.stringify(info.metadata)}`);
  check(info.cpuCount >= 1 && info.memoryMB > 0, 'resources');
  return `${info.templateId} ${info.state}`;
});

await step('list', async () => {
  const p = Sandbox.list({ query: { metadata: { who } } });
  const items = await p.nextItems();
  check(items.length === 1 && items[0].sandboxId === sbx.sandboxId, `one sandbox with who=${who}: ${JSON.stringify(items.map((i) => i.sandboxId))}`);
  const none = await Sandbox.list({ query: { metadata: { who: `${who}-nobody` } } }).nextItems();
  check(none.length === 0, 'nothing for another value');
  return items.length;
});

await step('setTimeout', async () => {
  await sbx.setTimeout(600_000);
  const info = await sbx.getInfo();
  const left = info.endAt.getTime() - Date.now();
  check(left > 590_000 && left < 610_000, `endAt about 10 minutes from now, got ${left} ms`);
  return Math.round(left / 1000);
});

await step('errors', async () => {
  let nf = false;
  try {
    await Sandbox.connect('sbx_doesnotexist0000000');
  } catch (err) {
    nf = err instanceof NotFoundError || /not found/i.test(String(err && err.message));
  }
  check(nf, 'connecting to an unknown sandbox is not found');
  let bad = '';
  try {
    await Sandbox.create('no-such-template', { timeoutMs: 60_000 });
  } catch (err) {
    bad = String(err && err.message);
  }
  check(/template/i.test(bad), `an unknown template fails naming it: ${bad}`);
  let auth = false;
  try {
    await Sandbox.create({ apiKey: 'e2b_0000000000000000000000000000000000000000' });
  } catch (err) {
    auth = err instanceof AuthenticationError;
  }
  check(auth, 'a wrong key is an AuthenticationError');
  return 'typed';
});

await step('kill', async () => {
  check((await sbx.kill()) === undefined || true, 'kill');
  const second = await BaseSandbox.kill(sbx.sandboxId);
  check(second === false, `a second kill is false, got ${second}`);
  return 'killed';
});

process.exit(results.every((r) => r.ok) ? 0 : 1);
