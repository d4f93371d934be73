// Browser tests of forkbox's web UI: Playwright (playwright-core) drives
// Debian's Chromium headless against a running daemon.
//
//   FORKBOX_URL         the daemon, e.g. http://127.0.0.1:8080 (required;
//                       without it every test skips)
//   SALES_CSV           a sales CSV (date, product, region, units_sold,
//                       revenue, cost); generated when unset
//   EXPECT_ANSWER_TEXT  text the (scripted) model's answer must contain
//   ARTIFACTS_DIR       where screenshots go (default ./artifacts)
//   FORKBOX_API_KEY     sent as a bearer token when the daemon needs one
//   CHROMIUM_PATH       the browser (default /usr/bin/chromium)
//
// Run: FORKBOX_URL=http://127.0.0.1:8080 node --test test/browser/

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (err) {
  throw new Error(`playwright-core is not installed in test/browser: run make setup (it runs npm ci there). ${err.message}`);
}

const here = path.dirname(fileURLToPath(import.meta.url));
const BASE = (process.env.FORKBOX_URL || '').replace(/\/+$/, '');
const ARTIFACTS = path.resolve(process.env.ARTIFACTS_DIR || path.join(here, 'artifacts'));
const EXPECT = process.env.EXPECT_ANSWER_TEXT || '';
const API_KEY = process.env.FORKBOX_API_KEY || '';
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
const QUESTION = 'What is the profit by region? Plot monthly revenue.';
const LAPTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };

const skip = BASE ? false : 'FORKBOX_URL is not set: these tests need a running forkbox daemon';

let browser;
let chatConversation = ''; // the conversation scenario (a) made, shown again at phone width
const forks = new Set();    // sandboxes the tests forked, terminated at the end

// ---------------------------------------------------------------- helpers

/** salesCSV returns the CSV to upload: SALES_CSV, or a year of generated sales. */
function salesCSV() {
  if (process.env.SALES_CSV) {
    return { name: path.basename(process.env.SALES_CSV), text: fs.readFileSync(process.env.SALES_CSV, 'utf8') };
  }
  let seed = 7;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const price = { Widget: 12.5, Gadget: 30, Gizmo: 7.25 };
  const rows = ['date,product,region,units_sold,revenue,cost'];
  const day0 = Date.UTC(2024, 0, 1);
  for (let d = 0; d < 366; d++) {
    const date = new Date(day0 + d * 86400000).toISOString().slice(0, 10);
    for (const region of ['North', 'South', 'East', 'West']) {
      const product = Object.keys(price)[Math.floor(rand() * 3)];
      const units = 1 + Math.floor(rand() * 40);
      const revenue = +(units * price[product]).toFixed(2);
      const cost = +(revenue * (0.5 + rand() * 0.3)).toFixed(2);
      rows.push(`${date},${product},${region},${units},${revenue},${cost}`);
    }
  }
  return { name: 'sales.csv', text: rows.join('\n') + '\n' };
}

async function waitFor(what, fn, timeout = 60000, every = 200) {
  const end = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (err) {
      last = err;
    }
    if (Date.now() > end) throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** open starts a fresh browser context at a viewport and loads the UI. */
async function open(t, viewport, { mobile = false, hash = '' } = {}) {
  const context = await browser.newContext({
    viewport,
    deviceScaleFactor: mobile ? 2 : 1,
    isMobile: mobile,
    hasTouch: mobile,
    colorScheme: 'light',
    extraHTTPHeaders: API_KEY ? { Authorization: `Bearer ${API_KEY}` } : undefined,
  });
  if (API_KEY) await context.addInitScript((k) => localStorage.setItem('forkbox.apiKey', k), API_KEY);
  // Generous: CI machines may be busy running other tests.
  context.setDefaultTimeout(60000);
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy|Uncaught|SyntaxError|TypeError/.test(msg.text())) problems.push(`console: ${msg.text()}`);
  });
  t.after(async () => {
    // The page as the test left it, to see what a failure looked like.
    const slug = t.name.replace(/\s*\(\d+x\d+\)\s*$/, '').replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase();
    await shot(page, `last-${slug}-${viewport.width}`).catch(() => {});
    await context.close();
    assert.deepEqual(problems, [], 'the page logged errors');
  });
  const res = await page.goto(`${BASE}/${hash}`);
  assert.equal(res.status(), 200, 'GET / answers 200');
  await page.locator('body[data-ready="true"]').waitFor();
  return page;
}

async function shot(page, name) {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

/** runCell runs code in the code view and returns the finished cell. */
async function runCell(page, code) {
  const tab = page.getByTestId('tab-code');
  if ((await tab.getAttribute('aria-selected')) !== 'true') await tab.click();
  const before = await page.getByTestId('code-cell').count();
  await page.getByTestId('code-input').fill(code);
  await page.getByTestId('code-input').press('Control+Enter');
  const cell = page.getByTestId('code-cell').nth(before);
  await cell.waitFor();
  await waitFor(`the cell ${JSON.stringify(code)} to finish`, async () => (await cell.getAttribute('data-state')) !== 'running', 120000);
  return cell;
}

async function graphCount(page, kind) {
  return page.locator(`[data-testid="snapshot-graph"] [data-testid="graph-node"][data-kind="${kind}"]`).count();
}

async function noHorizontalScroll(page) {
  const { sw, w } = await page.evaluate(() => ({ sw: document.documentElement.scrollWidth, w: window.innerWidth }));
  assert.ok(sw <= w, `the page scrolls sideways: scrollWidth ${sw} > ${w}`);
}

// ---------------------------------------------------------------- setup

before(async () => {
  if (skip) return;
  assert.ok(fs.existsSync(CHROMIUM), `no browser at ${CHROMIUM}: install Debian's chromium (make setup does)`);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
      '--no-first-run', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  if (browser) await browser.close();
  // Free what the tests forked; conversations keep their own sandboxes.
  for (const id of forks) {
    await fetch(`${BASE}/v1/sandboxes/${id}`, { method: 'DELETE', headers: API_KEY ? { Authorization: `Bearer ${API_KEY}` } : {} })
      .then((res) => res.arrayBuffer()).catch(() => {});
  }
});

// ---------------------------------------------------------------- scenarios

test('the UI and its assets are served with types and cache headers', { skip }, async () => {
  // Bodies are read whole so that no connection is left open (it would keep
  // the test process alive).
  const get = async (p, h = {}) => {
    const res = await fetch(`${BASE}${p}`, { headers: { ...h, ...(API_KEY ? { Authorization: `Bearer ${API_KEY}` } : {}) } });
    const body = await res.text();
    return { status: res.status, headers: res.headers, text: async () => body };
  };
  const index = await get('/');
  assert.equal(index.status, 200);
  assert.match(index.headers.get('content-type'), /^text\/html/);
  const html = await index.text();
  assert.match(html, /\/ui\/app\.js/);
  const js = await get('/ui/app.js');
  assert.equal(js.status, 200);
  assert.match(js.headers.get('content-type'), /javascript/);
  const etag = js.headers.get('etag');
  assert.ok(etag, 'assets carry an ETag');
  const again = await get('/ui/app.js', { 'If-None-Match': etag });
  assert.equal(again.status, 304, 'a matching ETag answers 304');
  assert.match((await get('/ui/app.css')).headers.get('content-type'), /^text\/css/);
  assert.equal((await get('/ui/no-such-file.js')).status, 404);
});

test('chat: drop a CSV, ask, see the streamed answer and the chart (1280x800)', { skip, timeout: 300000 }, async (t) => {
  const page = await open(t, LAPTOP);
  const csv = salesCSV();

  // Drag the CSV over the chat (the drop zone shows), then drop it.
  const dt = await page.evaluateHandle(({ name, text }) => {
    const d = new DataTransfer();
    d.items.add(new File([text], name, { type: 'text/csv' }));
    return d;
  }, csv);
  await page.dispatchEvent('[data-testid="chat-view"]', 'dragenter', { dataTransfer: dt });
  await page.getByTestId('drop-overlay').waitFor({ state: 'visible' });
  await shot(page, 'chat-drop-1280');
  await page.dispatchEvent('[data-testid="chat-view"]', 'drop', { dataTransfer: dt });
  await page.getByTestId('drop-overlay').waitFor({ state: 'hidden' });

  const chip = page.locator('[data-testid="attachments"] [data-testid="file-chip"]');
  await waitFor('the upload to finish', async () => (await chip.getAttribute('data-status')) !== 'uploading', 60000);
  assert.equal(await chip.getAttribute('data-status'), 'ready', `upload failed: ${await chip.textContent()}`);
  const chipText = await chip.textContent();
  assert.ok(chipText.includes(csv.name), `the chip names the file: ${chipText}`);
  assert.match(chipText, /rows/);
  assert.match(chipText, /revenue/, 'the chip lists the columns');

  await page.getByTestId('question-input').fill(QUESTION);
  await page.getByTestId('question-input').press('Enter');

  const msg = page.getByTestId('assistant-message').last();
  await msg.waitFor();
  assert.equal(await page.getByTestId('user-message').last().locator('.bubble').textContent(), QUESTION);
  await waitFor('the answer to finish', async () => (await msg.getAttribute('data-state')) !== 'streaming', 240000, 250);
  const failed = await msg.getAttribute('data-state');
  assert.equal(failed, 'done', `the answer failed: ${await msg.textContent()}`);
  assert.equal(await msg.getAttribute('data-streamed'), 'true', 'the answer arrived as streamed text deltas');

  const answer = await msg.getByTestId('answer').textContent();
  assert.ok(answer.trim().length > 0, 'the answer has text');
  if (EXPECT) assert.ok(answer.includes(EXPECT), `the answer ${JSON.stringify(answer)} contains ${JSON.stringify(EXPECT)}`);

  const chart = msg.locator('img[data-testid="chart-image"]').first();
  await chart.waitFor({ state: 'visible' });
  assert.match(await chart.getAttribute('src'), /^data:image\/png;base64,/);
  const size = await chart.evaluate(async (img) => { await img.decode(); return { w: img.naturalWidth, h: img.naturalHeight }; });
  assert.ok(size.w > 50 && size.h > 50, `the chart is a real image: ${JSON.stringify(size)}`);

  const steps = msg.getByTestId('step');
  assert.ok((await steps.count()) >= 1, 'the steps are shown');
  // Steps are folded; opening one shows its code and its output.
  assert.equal(await steps.first().evaluate((d) => d.open), false);
  await steps.first().locator('summary').click();
  await steps.first().getByTestId('step-code').waitFor({ state: 'visible' });
  assert.ok((await steps.first().getByTestId('step-code').textContent()).trim().length > 0);
  assert.equal(await page.locator('[data-testid="attachments"] [data-testid="file-chip"]').count(), 0, 'sent files leave the composer');

  // The new conversation is listed and selected.
  const id = decodeURIComponent((new URL(page.url()).hash.match(/^#c=(.+)$/) || [])[1] || '');
  assert.ok(id, 'the URL names the conversation');
  chatConversation = id;
  await page.locator(`[data-testid="conversation-item"][data-id="${id}"]`).waitFor();
  assert.match(await page.locator(`[data-testid="conversation-item"][data-id="${id}"]`).getAttribute('class'), /active/);
  await waitFor('the sandbox panel to show the sandbox', async () => (await page.getByTestId('sandbox-state').textContent()) !== 'loading');

  await chart.scrollIntoViewIfNeeded();
  await shot(page, 'chat-1280');
  await steps.first().scrollIntoViewIfNeeded();
  await shot(page, 'chat-steps-1280');

  // Reloading shows the stored turn.
  await page.reload();
  await page.locator('body[data-ready="true"]').waitFor();
  const stored = page.getByTestId('assistant-message').last();
  await stored.getByTestId('answer').waitFor();
  if (EXPECT) assert.ok((await stored.getByTestId('answer').textContent()).includes(EXPECT), 'the stored answer has the number');
  assert.ok((await stored.locator('img[data-testid="chart-image"]').count()) >= 1, 'the stored answer has the chart');
});

test('code cell: print(6*7) shows 42 (1280x800)', { skip, timeout: 180000 }, async (t) => {
  const page = await open(t, LAPTOP);
  const cell = await runCell(page, 'print(6*7)');
  assert.equal(await cell.getAttribute('data-state'), 'done', `the cell failed: ${await cell.textContent()}`);
  assert.equal((await cell.getByTestId('output-stdout').textContent()).trim(), '42');

  // Variables persist between cells; errors show with their name.
  const c2 = await runCell(page, 'answer = 6*7\nanswer / 2');
  assert.equal((await c2.getByTestId('result-text').textContent()).trim(), '21.0');
  const c3 = await runCell(page, 'undefined_name');
  assert.equal(await c3.getAttribute('data-state'), 'error');
  assert.match(await c3.getByTestId('output-error').textContent(), /NameError/);

  await waitFor('the sandbox to be running', async () => (await page.getByTestId('sandbox-state').textContent()) === 'running');
  await shot(page, 'code-1280');
});

test('fork: the snapshot graph gains the two branches (1280x800)', { skip, timeout: 240000 }, async (t) => {
  const page = await open(t, LAPTOP);
  const cell = await runCell(page, 'x = 41\nprint("ready")');
  assert.equal(await cell.getAttribute('data-state'), 'done', `the cell failed: ${await cell.textContent()}`);

  const graph = page.getByTestId('snapshot-graph');
  await waitFor('the graph to show the sandbox', async () => (await graphCount(page, 'sandbox')) === 1);
  const home = await graph.locator('[data-testid="graph-node"][data-current="true"]').getAttribute('data-id');
  assert.equal(home, (await page.getByTestId('sandbox-id').textContent()).trim());
  const snapsBefore = await graphCount(page, 'snapshot');

  const fork = page.getByTestId('action-fork');
  await waitFor('fork to be enabled', () => fork.isEnabled());
  await fork.click();
  await waitFor('two forked sandboxes in the graph', async () => (await graphCount(page, 'sandbox')) === 3, 120000);
  assert.equal(await graphCount(page, 'snapshot'), snapsBefore + 1, 'the fork snapshot is a node');
  assert.ok((await graph.locator('[data-testid="graph-edge"]').count()) >= 3, 'edges link sandbox → snapshot → forks');
  const branchIds = await graph.locator('[data-testid="graph-node"][data-kind="sandbox"]:not([data-current="true"])')
    .evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-id')));
  assert.equal(branchIds.length, 2);
  branchIds.forEach((id) => forks.add(id));
  assert.equal(await graph.locator('[data-testid="graph-node"][data-current="true"]').getAttribute('data-id'), home, 'the current sandbox stays highlighted');
  await shot(page, 'fork-1280');

  // Choosing a branch runs code cells there: the fork has the parent's memory.
  await graph.locator(`[data-testid="graph-node"][data-id="${branchIds[0]}"]`).click();
  await waitFor('the panel to show the fork', async () => (await page.getByTestId('sandbox-id').textContent()).trim() === branchIds[0]);
  const inFork = await runCell(page, 'print(x + 1)');
  assert.equal(await inFork.getAttribute('data-sandbox'), branchIds[0]);
  assert.equal((await inFork.getByTestId('output-stdout').textContent()).trim(), '42');
  await shot(page, 'fork-branch-1280');
});

test('ports: a server started in the sandbox shows in the panel and opens in a new tab (1280x800)', { skip, timeout: 180000 }, async (t) => {
  const page = await open(t, LAPTOP);
  const cell = await runCell(page, [
    'import subprocess, socket, time',
    "open('/workspace/hello-port.txt', 'w').write('hello from the port')",
    "srv = subprocess.Popen(['python3', '-m', 'http.server', '8000', '--bind', '127.0.0.1'], cwd='/workspace', stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)",
    'for _ in range(100):',
    '    try:',
    "        socket.create_connection(('127.0.0.1', 8000), 1).close(); break",
    '    except OSError:',
    '        time.sleep(0.1)',
    "print('serving')",
  ].join('\n'));
  assert.equal((await cell.getByTestId('output-stdout').textContent()).trim(), 'serving', `the cell: ${await cell.textContent()}`);
  const item = page.locator('[data-testid="sandbox-port"][data-port="8000"]');
  await waitFor('port 8000 in the panel', () => item.isVisible(), 30000);
  assert.match(await item.textContent(), /python3/);
  // The kernel's own ports are not listed.
  assert.equal(await page.getByTestId('sandbox-port').count(), 1, 'only the server the code started');
  await shot(page, 'ports-1280');

  const [tab] = await Promise.all([page.context().waitForEvent('page'), page.getByTestId('port-open-8000').click()]);
  await waitFor('the listing in the new tab', async () => /hello-port\.txt/.test(await tab.content().catch(() => '')), 30000);
  assert.match(tab.url(), /\/ports\/8000\/\?forkbox_token=/);
  // The listing's links work: the token went into a cookie of the port's path.
  await tab.locator('a[href="hello-port.txt"]').click();
  await waitFor('the file through the link', async () => /hello from the port/.test(await tab.content().catch(() => '')), 30000);
  await tab.close();
});

test('lifecycle: suspend, resume, checkpoint and terminate from the panel (1280x800)', { skip, timeout: 240000 }, async (t) => {
  const page = await open(t, LAPTOP);
  await runCell(page, 'y = 5');
  const badge = page.getByTestId('sandbox-state');
  await waitFor('running', async () => (await badge.textContent()) === 'running');

  await page.getByTestId('action-suspend').click();
  await waitFor('suspended', async () => (await badge.textContent()) === 'suspended', 60000);
  assert.equal(await page.getByTestId('action-suspend').isDisabled(), true);
  await page.getByTestId('action-resume').click();
  await waitFor('running again', async () => (await badge.textContent()) === 'running', 60000);
  const cell = await runCell(page, 'print(y)');
  assert.equal((await cell.getByTestId('output-stdout').textContent()).trim(), '5', 'memory survives suspend and resume');

  const snaps = await graphCount(page, 'snapshot');
  await page.getByTestId('action-checkpoint').click();
  await waitFor('the checkpoint in the graph', async () => (await graphCount(page, 'snapshot')) === snaps + 1, 60000);
  assert.equal(await page.locator('[data-testid="graph-node"][data-kind="snapshot"].memory').count(), snaps + 1);
  await shot(page, 'lifecycle-1280');

  // Terminate asks for a second click.
  const term = page.getByTestId('action-terminate');
  await term.click();
  assert.match(await term.textContent(), /confirm/i);
  assert.equal(await badge.textContent(), 'running');
  await term.click();
  await waitFor('terminated', async () => (await badge.textContent()) === 'terminated', 60000);
});

test('phone width: drawers, a code cell and the chart (390x844)', { skip, timeout: 240000 }, async (t) => {
  const page = await open(t, PHONE, { mobile: true });
  await noHorizontalScroll(page);
  // The side panels are drawers, closed at first.
  const inView = (loc) => loc.evaluate((e) => { const r = e.getBoundingClientRect(); return r.right > 1 && r.left < window.innerWidth - 1 && getComputedStyle(e).visibility !== 'hidden'; });
  assert.equal(await inView(page.getByTestId('sidebar')), false, 'the conversation list is a closed drawer');
  assert.equal(await inView(page.getByTestId('sandbox-panel')), false, 'the sandbox panel is a closed drawer');
  await shot(page, 'empty-390');

  const cell = await runCell(page, 'print(6*7)');
  assert.equal((await cell.getByTestId('output-stdout').textContent()).trim(), '42');
  await noHorizontalScroll(page);
  await shot(page, 'code-390');

  await page.getByTestId('toggle-panel').click();
  await waitFor('the sandbox drawer to open', () => inView(page.getByTestId('sandbox-panel')));
  await waitFor('the sandbox state', async () => (await page.getByTestId('sandbox-state').textContent()) === 'running');
  await page.waitForTimeout(300); // the slide-in transition
  await shot(page, 'sandbox-390');
  await page.keyboard.press('Escape');
  await waitFor('the sandbox drawer to close', async () => !(await inView(page.getByTestId('sandbox-panel'))));

  await page.getByTestId('toggle-sidebar').click();
  await waitFor('the conversation drawer to open', () => inView(page.getByTestId('sidebar')));
  await page.waitForTimeout(300);
  assert.ok((await page.getByTestId('conversation-item').count()) >= 1, 'conversations are listed');
  await shot(page, 'conversations-390');

  if (chatConversation) {
    await page.getByTestId('sidebar').locator(`[data-testid="conversation-item"][data-id="${chatConversation}"] .conv-link`).click();
    await waitFor('the conversation drawer to close', async () => !(await inView(page.getByTestId('sidebar'))));
    await page.getByTestId('tab-chat').click();
    const chart = page.locator('[data-testid="assistant-message"] img[data-testid="chart-image"]').last();
    await chart.waitFor({ state: 'visible' });
    const box = await chart.boundingBox();
    assert.ok(box && box.width <= PHONE.width, `the chart fits the phone: ${JSON.stringify(box)}`);
    await noHorizontalScroll(page);
    await page.getByTestId('answer').last().scrollIntoViewIfNeeded();
    await shot(page, 'chat-390');
  }
});
