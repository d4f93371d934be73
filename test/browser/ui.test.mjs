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
//   NO_MODEL_URL        a second daemon without a model (optional: its test
//                       skips without it)
//
// Run: FORKBOX_URL=http://127.0.0.1:8080 node --test test/browser/

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';

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
async function open(t, viewport, { mobile = false, hash = '', setup, base = BASE } = {}) {
  const context = await browser.newContext({
    viewport,
    deviceScaleFactor: mobile ? 2 : 1,
    isMobile: mobile,
    hasTouch: mobile,
    colorScheme: 'light',
    acceptDownloads: true,
    extraHTTPHeaders: API_KEY ? { Authorization: `Bearer ${API_KEY}` } : undefined,
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  if (setup) await setup(context);
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
  const res = await page.goto(`${base}/${hash}`);
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

/** startCell submits code in the code view without waiting for it to finish. */
async function startCell(page, code) {
  const tab = page.getByTestId('tab-code');
  if ((await tab.getAttribute('aria-selected')) !== 'true') await tab.click();
  const before = await page.getByTestId('code-cell').count();
  await page.getByTestId('code-input').fill(code);
  await page.getByTestId('code-input').press('Control+Enter');
  const cell = page.getByTestId('code-cell').nth(before);
  await cell.waitFor();
  return cell;
}

async function finished(cell, timeout = 120000) {
  await waitFor('the cell to finish', async () => (await cell.getAttribute('data-state')) !== 'running', timeout);
  return cell;
}

/** download clicks what starts a download and returns its name and bytes. */
async function download(page, locator) {
  const [dl] = await Promise.all([page.waitForEvent('download'), locator.click()]);
  const file = path.join(ARTIFACTS, 'downloads', `${Date.now()}-${dl.suggestedFilename()}`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  await dl.saveAs(file);
  return { name: dl.suggestedFilename(), file, bytes: fs.readFileSync(file) };
}

/** api calls the daemon's API from the test process, reading the whole body. */
async function apiCall(method, p, body) {
  const res = await fetch(`${BASE}${p}`, {
    method,
    headers: { ...(API_KEY ? { Authorization: `Bearer ${API_KEY}` } : {}), ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  return { status: res.status, json, text };
}

const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const PLOT = 'import matplotlib.pyplot as plt\nplt.figure(figsize=(4, 3))\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title("three points")\nplt.show()';

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
  // The question shows the CSV's first rows and the column types read in the browser.
  const preview = page.getByTestId('user-message').last().getByTestId('chat-csv-preview');
  await preview.waitFor();
  const dtypes = await preview.getByTestId('csv-dtype').allTextContents();
  assert.deepEqual(dtypes, ['datetime', 'string', 'string', 'int', 'float', 'float'], `the inferred column types: ${dtypes}`);
  assert.ok((await preview.locator('tbody tr').count()) >= 1, 'the preview shows rows');
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

  // The model's steps are cells of the conversation's notebook, marked as the model's.
  await page.getByTestId('tab-code').click();
  const modelCells = page.locator('[data-testid="code-cell"][data-source="model"]');
  await waitFor('the model\'s steps in the code view', async () => (await modelCells.count()) >= 1, 30000);
  assert.equal(await modelCells.first().getByTestId('cell-source').textContent(), 'model');
  const stepCode = await modelCells.first().getByTestId('cell-code').textContent();
  assert.match(stepCode, /read_csv/, 'the first step read the CSV');
  assert.ok((await page.locator('[data-testid="code-cell"][data-source="model"] img[data-testid="result-image"]').count()) >= 1, 'the chart is in the notebook too');
  await shot(page, 'chat-steps-as-cells-1280');
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
  // The dialog asks how many forks (2 by default) and their names.
  await page.getByTestId('fork-dialog').waitFor({ state: 'visible' });
  assert.equal(await page.getByTestId('fork-count').inputValue(), '2');
  assert.equal(await page.getByTestId('fork-name').count(), 2, 'one optional name per fork');
  await page.getByTestId('fork-confirm').click();
  await waitFor('two forked sandboxes in the graph', async () => (await graphCount(page, 'sandbox')) === 3, 120000);
  assert.equal(await graphCount(page, 'snapshot'), snapsBefore + 1, 'the fork snapshot is a node');
  assert.ok((await graph.locator('[data-testid="graph-edge"]').count()) >= 3, 'edges link sandbox → snapshot → forks');
  const branchIds = await graph.locator('[data-testid="graph-node"][data-kind="sandbox"]:not([data-current="true"])')
    .evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-id')));
  assert.equal(branchIds.length, 2);
  branchIds.forEach((id) => forks.add(id));
  const labels = await graph.locator('[data-testid="graph-node"][data-kind="sandbox"]:not([data-current="true"])')
    .evaluateAll((nodes) => nodes.map((n) => n.getAttribute('data-label')));
  assert.deepEqual(labels, ['fork-1', 'fork-2'], 'unnamed forks are numbered in order');
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

test('notebook: cells survive a reload, edit and run again, copy, stop a running cell (1280x800)', { skip, timeout: 300000 }, async (t) => {
  const page = await open(t, LAPTOP);
  const c1 = await runCell(page, "v = 6  # kept by the kernel\nprint('first', v)");
  assert.equal((await c1.getByTestId('output-stdout').textContent()).trim(), 'first 6');
  const c2 = await runCell(page, "print('second', v * 7)");
  assert.equal((await c2.getByTestId('output-stdout').textContent()).trim(), 'second 42');
  // Python is highlighted: strings, comments, numbers are tokens of their own.
  assert.equal(await c1.locator('[data-testid="cell-code"] .tk-str').first().textContent(), "'first'");
  assert.equal(await c1.locator('[data-testid="cell-code"] .tk-comment').textContent(), '# kept by the kernel');
  assert.equal(await c1.locator('[data-testid="cell-code"] .tk-num').textContent(), '6');
  assert.equal(await c1.getByTestId('cell-code').textContent(), "v = 6  # kept by the kernel\nprint('first', v)", 'highlighting keeps the code as it is');

  // Copy puts the cell's code on the clipboard.
  await c2.getByTestId('cell-copy').click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), "print('second', v * 7)");

  // A reload shows both cells, in order, with their outputs.
  await page.reload();
  await page.locator('body[data-ready="true"]').waitFor();
  await page.getByTestId('tab-code').click();
  const cells = page.getByTestId('code-cell');
  await waitFor('the stored cells', async () => (await cells.count()) === 2, 30000);
  assert.equal((await cells.nth(0).getByTestId('output-stdout').textContent()).trim(), 'first 6');
  assert.equal((await cells.nth(1).getByTestId('output-stdout').textContent()).trim(), 'second 42');
  assert.equal(await cells.nth(0).getAttribute('data-source'), 'user');
  await shot(page, 'notebook-reloaded-1280');

  // Edit the second cell and run it: a new cell with the new output; the old one stays.
  await cells.nth(1).getByTestId('cell-edit').click();
  await cells.nth(1).getByTestId('cell-editor').fill("print('edited', v * 100)");
  await cells.nth(1).getByTestId('cell-edit-run').click();
  await waitFor('the edited cell', async () => (await cells.count()) === 3);
  await finished(cells.nth(2));
  assert.equal((await cells.nth(2).getByTestId('output-stdout').textContent()).trim(), 'edited 600');
  assert.equal((await cells.nth(1).getByTestId('output-stdout').textContent()).trim(), 'second 42', 'the edited cell is unchanged');
  // Run again: the same code as a new cell.
  await cells.nth(0).getByTestId('cell-rerun').click();
  await waitFor('the re-run cell', async () => (await cells.count()) === 4);
  await finished(cells.nth(3));
  assert.equal((await cells.nth(3).getByTestId('output-stdout').textContent()).trim(), 'first 6');

  // Stop: a cell sleeping a minute is interrupted; the kernel keeps v.
  const sleeper = await startCell(page, "import time\nv = v + 1\nprint('sleeping', flush=True)\ntime.sleep(60)\nv = -1");
  const stop = sleeper.getByTestId('cell-stop');
  await stop.waitFor({ state: 'visible' });
  // Interrupt once the kernel is running the cell (it has printed).
  await waitFor('the cell to be sleeping', async () => (await sleeper.getByTestId('output-stdout').textContent().catch(() => '')).includes('sleeping'), 30000, 100);
  await shot(page, 'cell-running-1280');
  await stop.click();
  await finished(sleeper, 30000);
  assert.equal(await sleeper.getAttribute('data-state'), 'error');
  assert.match(await sleeper.getByTestId('output-error').textContent(), /KeyboardInterrupt/);
  const after = await runCell(page, 'print(v)');
  assert.equal((await after.getByTestId('output-stdout').textContent()).trim(), '7', 'the variable set before the interrupt is still there');
  // Esc stops a running cell too.
  const again = await startCell(page, "v = v * 2\nprint('sleeping', flush=True)\ntime.sleep(60)");
  await waitFor('the cell to be sleeping', async () => (await again.getByTestId('output-stdout').textContent().catch(() => '')).includes('sleeping'), 30000, 100);
  await page.keyboard.press('Escape');
  await finished(again, 30000);
  assert.match(await again.getByTestId('output-error').textContent(), /KeyboardInterrupt/);
  const last = await runCell(page, 'print(v)');
  assert.equal((await last.getByTestId('output-stdout').textContent()).trim(), '14');
  await shot(page, 'notebook-1280');
});

test('charts: open full size and download as PNG (1280x800)', { skip, timeout: 180000 }, async (t) => {
  const page = await open(t, LAPTOP);
  const cell = await runCell(page, PLOT);
  assert.equal(await cell.getAttribute('data-state'), 'done', `the cell failed: ${await cell.textContent()}`);
  await cell.getByTestId('result-image').waitFor({ state: 'visible' });

  await cell.getByTestId('chart-open').click();
  const box = page.getByTestId('lightbox');
  await box.waitFor({ state: 'visible' });
  const big = await page.getByTestId('lightbox-image').evaluate(async (img) => { await img.decode(); return { w: img.naturalWidth, h: img.naturalHeight }; });
  assert.ok(big.w > 100 && big.h > 100, `the full-size chart: ${JSON.stringify(big)}`);
  await shot(page, 'chart-lightbox-1280');
  await page.getByTestId('lightbox-close').click();
  await box.waitFor({ state: 'hidden' });

  const dl = await download(page, cell.getByTestId('chart-download'));
  assert.match(dl.name, /^chart-\d+\.png$/);
  assert.deepEqual(dl.bytes.subarray(0, 8), PNG_MAGIC, 'the download is a PNG');
});

test('files: upload a CSV, preview it with column types, download the same bytes, browse, delete (1280x800)', { skip, timeout: 180000 }, async (t) => {
  const page = await open(t, LAPTOP);
  await runCell(page, "import os\nos.makedirs('/workspace/notes', exist_ok=True)\nopen('/workspace/notes/hello.txt', 'w').write('hello from a folder')\nprint('ok')");
  const files = page.getByTestId('files-card');
  await page.getByTestId('files-refresh').click();
  await files.locator('[data-testid="file-item"][data-name="notes"]').waitFor();

  const csv = 'id,name,score,passed,when\n1,Ada,91.5,true,2024-03-01\n2,Linus,78,false,2024-03-02\n3,"Grace, H.",88.25,true,2024-03-03\n';
  await page.getByTestId('files-input').setInputFiles({ name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from(csv) });
  const item = files.locator('[data-testid="file-item"][data-name="people.csv"]');
  await item.waitFor();
  const preview = page.getByTestId('file-csv-preview');
  await preview.waitFor();
  assert.deepEqual(await preview.getByTestId('csv-dtype').allTextContents(), ['int', 'string', 'float', 'bool', 'datetime']);
  assert.equal(await preview.locator('tbody tr').count(), 3);
  assert.equal(await preview.locator('tbody tr').nth(2).locator('td').nth(1).textContent(), 'Grace, H.');
  await files.scrollIntoViewIfNeeded();
  await shot(page, 'files-csv-1280');

  const dl = await download(page, item.getByTestId('file-download'));
  assert.equal(dl.name, 'people.csv');
  assert.equal(dl.bytes.toString(), csv, 'the download has the uploaded bytes');

  // Into a folder, preview a text file, and back.
  await files.locator('[data-testid="file-item"][data-name="notes"] [data-testid="file-open"]').click();
  await waitFor('the folder', async () => (await page.getByTestId('files-path').textContent()) === '/workspace/notes');
  await files.locator('[data-testid="file-item"][data-name="hello.txt"] [data-testid="file-open"]').click();
  await waitFor('the text preview', async () => (await page.getByTestId('file-preview-text').textContent().catch(() => '')) === 'hello from a folder');
  await page.getByTestId('files-up').click();
  await waitFor('back in /workspace', async () => (await page.getByTestId('files-path').textContent()) === '/workspace');

  // Delete asks for a second click.
  await item.getByTestId('file-delete').click();
  await item.getByTestId('file-delete').click();
  await item.waitFor({ state: 'detached' });
  const left = await apiCall('GET', `/v1/sandboxes/${await page.getByTestId('sandbox-id').textContent()}/files/list?path=/workspace`);
  assert.ok(!(left.json.entries || []).some((e) => e.name === 'people.csv'), 'the file is gone from the sandbox');
});

test('notebooks: export as .ipynb (valid, with outputs) and import one that runs (1280x800)', { skip, timeout: 240000 }, async (t) => {
  const page = await open(t, LAPTOP);
  await runCell(page, "print('hello notebook')");
  const plot = await runCell(page, PLOT);
  assert.equal(await plot.getAttribute('data-state'), 'done');

  // Debian's python3 has python3-nbformat (another python3 may come first on PATH).
  const python = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
  const validate = (file) => execFileSync(python, ['-c', 'import nbformat,sys; nbformat.validate(nbformat.read(sys.argv[1], as_version=4))', file], { encoding: 'utf8' });
  for (const which of ['export-conversation', 'export-sandbox']) {
    const dl = await download(page, page.getByTestId(which));
    assert.match(dl.name, /\.ipynb$/);
    validate(dl.file);
    const nb = JSON.parse(dl.bytes.toString());
    assert.equal(nb.nbformat, 4);
    const outputs = nb.cells.filter((c) => c.cell_type === 'code').flatMap((c) => c.outputs || []);
    const text = (o) => (Array.isArray(o.text) ? o.text.join('') : o.text || '');
    assert.ok(outputs.some((o) => o.output_type === 'stream' && text(o).includes('hello notebook')), `${which}: a stdout output`);
    assert.ok(outputs.some((o) => o.data && o.data['image/png']), `${which}: a png output`);
  }

  // Import: a notebook of two code cells (and a markdown one) runs, its cells show.
  const nb = {
    nbformat: 4, nbformat_minor: 5, metadata: { kernelspec: { name: 'python3', display_name: 'Python 3', language: 'python' } },
    cells: [
      { cell_type: 'markdown', id: 'md1', metadata: {}, source: ['# imported'] },
      { cell_type: 'code', id: 'c1', metadata: {}, execution_count: null, outputs: [], source: ['z = 5\n', "print('imported', z)"] },
      { cell_type: 'code', id: 'c2', metadata: {}, execution_count: null, outputs: [], source: ["print('second', z * 2)"] },
    ],
  };
  const before = await page.getByTestId('code-cell').count();
  await page.getByTestId('notebook-input').setInputFiles({ name: 'two-cells.ipynb', mimeType: 'application/x-ipynb+json', buffer: Buffer.from(JSON.stringify(nb)) });
  const status = page.getByTestId('import-status');
  await waitFor('the import to finish', async () => (await status.getAttribute('data-state')) !== null, 120000);
  assert.equal(await status.getAttribute('data-state'), 'done', await status.textContent());
  const cells = page.getByTestId('code-cell');
  assert.equal(await cells.count(), before + 2);
  assert.equal((await cells.nth(before).getByTestId('output-stdout').textContent()).trim(), 'imported 5');
  assert.equal((await cells.nth(before + 1).getByTestId('output-stdout').textContent()).trim(), 'second 10');
  await shot(page, 'notebook-import-1280');
});

test('snapshot tree: three forks, names, fits the panel at laptop and phone width, restore a snapshot (1280x800, 390x844)', { skip, timeout: 300000 }, async (t) => {
  const page = await open(t, LAPTOP);
  await runCell(page, 'w = 1');
  const graph = page.getByTestId('snapshot-graph');
  await waitFor('the graph', async () => (await graphCount(page, 'sandbox')) === 1);
  const fork = async (name) => {
    const n = await graphCount(page, 'sandbox');
    await waitFor('fork to be enabled', () => page.getByTestId('action-fork').isEnabled());
    await page.getByTestId('action-fork').click();
    await page.getByTestId('fork-count').fill('1');
    if (name) await page.getByTestId('fork-name').first().fill(name);
    await page.getByTestId('fork-confirm').click();
    await waitFor('the fork in the graph', async () => (await graphCount(page, 'sandbox')) === n + 1, 120000);
  };
  await fork('alpha');
  await fork('');
  await fork('');
  const ids = await graph.locator('[data-testid="graph-node"][data-kind="sandbox"]:not([data-current="true"])').evaluateAll((ns) => ns.map((n) => n.getAttribute('data-id')));
  ids.forEach((id) => forks.add(id));
  const labels = await graph.locator('[data-testid="graph-node"][data-kind="sandbox"]').evaluateAll((ns) => ns.map((n) => n.getAttribute('data-label')));
  // The conversation's sandbox has a name of its own; a named fork shows its name; the others are numbered.
  assert.deepEqual(labels, [(await page.getByTestId('sandbox-name').textContent()).trim(), 'alpha', 'fork-2', 'fork-3']);

  // Toasts sit in the bottom-right corner.
  const toast = page.getByTestId('toast').last();
  if (await toast.count()) {
    const tb = await toast.boundingBox();
    if (tb) assert.ok(tb.x + tb.width > LAPTOP.width - 40 && tb.y + tb.height > LAPTOP.height - 60, `a toast at the bottom right: ${JSON.stringify(tb)}`);
  }

  const fits = async (label) => {
    // The tree is redrawn at the panel's width (after a resize or a scrollbar).
    await waitFor(`${label}: the tree drawn at its box's width`, () => page.evaluate(() => {
      const wrap = document.querySelector('[data-testid="snapshot-graph"]');
      const svg = wrap.querySelector('svg');
      return svg && Math.abs(svg.viewBox.baseVal.width - wrap.clientWidth) <= 1;
    }), 10000);
    const r = await page.evaluate(() => {
      const box = (e) => { const b = e.getBoundingClientRect(); return { l: b.left, r: b.right, t: b.top, b: b.bottom, w: b.width }; };
      const wrap = document.querySelector('[data-testid="snapshot-graph"]');
      const svg = wrap.querySelector('svg');
      const vb = svg.viewBox.baseVal;
      const fonts = [...svg.querySelectorAll('text')].map((x) => parseFloat(getComputedStyle(x).fontSize) * (svg.getBoundingClientRect().width / vb.width));
      return {
        wrap: box(wrap), panel: box(document.querySelector('[data-testid="sandbox-panel"]')), svg: box(svg),
        nodes: [...svg.querySelectorAll('[data-testid="graph-node"]')].map(box), minFont: Math.min(...fonts),
        scrollW: wrap.scrollWidth, clientW: wrap.clientWidth,
      };
    });
    const inside = (a, b) => a.l >= b.l - 0.5 && a.r <= b.r + 0.5;
    assert.ok(inside(r.svg, r.wrap), `${label}: the svg ${JSON.stringify(r.svg)} inside its box ${JSON.stringify(r.wrap)}`);
    assert.ok(inside(r.wrap, r.panel), `${label}: the tree inside the panel`);
    r.nodes.forEach((n, i) => assert.ok(inside(n, r.wrap), `${label}: node ${i} ${JSON.stringify(n)} inside ${JSON.stringify(r.wrap)}`));
    assert.ok(r.scrollW <= r.clientW + 1, `${label}: no sideways scrolling in the tree`);
    assert.ok(r.minFont >= 11, `${label}: labels are at least 11px (${r.minFont})`);
    const panelBody = await page.evaluate(() => { const b = document.querySelector('[data-testid="sandbox-panel"] .panel-body'); return { sw: b.scrollWidth, cw: b.clientWidth }; });
    assert.ok(panelBody.sw <= panelBody.cw + 1, `${label}: nothing in the panel overflows sideways: ${JSON.stringify(panelBody)}`);
  };
  await fits('laptop');
  await graph.scrollIntoViewIfNeeded();
  await shot(page, 'tree-3-forks-1280');

  await page.setViewportSize(PHONE);
  await page.getByTestId('toggle-panel').click();
  await page.waitForTimeout(400); // the drawer's slide-in
  await fits('phone');
  await graph.scrollIntoViewIfNeeded();
  await shot(page, 'tree-3-forks-390');
  await page.keyboard.press('Escape');
  await page.setViewportSize(LAPTOP);

  // A snapshot node offers to start a sandbox from it.
  const snap = graph.locator('[data-testid="graph-node"][data-kind="snapshot"]').first();
  await snap.click();
  await page.getByTestId('restore-dialog').waitFor({ state: 'visible' });
  await page.getByTestId('restore-confirm').click();
  await waitFor('the restored sandbox in the panel', async () => {
    const id = (await page.getByTestId('sandbox-id').textContent()).trim();
    return id && !ids.includes(id) && (await graph.locator(`[data-testid="graph-node"][data-id="${id}"]`).count()) === 1 ? id : '';
  }, 120000).then((id) => forks.add(id));
  const inRestored = await runCell(page, 'print(w + 1)');
  assert.equal((await inRestored.getByTestId('output-stdout').textContent()).trim(), '2', 'the restore has the memory of the snapshot');
});

test('health: an image being built and no model, as /healthz says (1280x800, 390x844)', { skip, timeout: 120000 }, async (t) => {
  // /healthz is answered here: building step 3 then 4 of 7, then ready; chat without a model.
  let calls = 0;
  const why = 'no model: set FORKBOX_MODEL and a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY or OPENAI_BASE_URL) before starting the daemon';
  const setup = async (context) => {
    await context.route('**/healthz', (route) => {
      calls++;
      const image = calls <= 2 ? { name: 'python', state: 'building', step: 3, steps: 7 }
        : calls <= 4 ? { name: 'python', state: 'building', step: 4, steps: 7 } : { name: 'python', state: 'ready' };
      route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ status: 'ok', images: [image], chat: { ready: false, why } }) });
    });
    // A create while the image builds answers 503.
    await context.route('**/v1/conversations', (route) => {
      if (route.request().method() !== 'POST') return route.continue();
      return route.fulfill({
        status: 503, contentType: 'application/json', headers: { 'Retry-After': '5' },
        body: JSON.stringify({ error: { code: 'unavailable', message: 'image "python" is being built (step 3 of 7); try again in a few seconds' } }),
      });
    });
  };
  for (const [viewport, mobile] of [[LAPTOP, false], [PHONE, true]]) {
    calls = 0;
    const page = await open(t, viewport, { mobile, setup });
    const text = page.getByTestId('image-banner-text');
    await waitFor('the build banner', async () => /Building image python: step 3 of 7…/.test(await text.textContent().catch(() => '')), 10000);
    const off = page.getByTestId('chat-unavailable');
    await off.waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('chat-unavailable').count(), 1);
    assert.equal(await page.getByTestId('question-input').isDisabled(), true, 'the question box is disabled');
    assert.equal(await page.getByTestId('send-button').isDisabled(), true);
    assert.equal(await off.getByTestId('chat-off-why').textContent(), why);
    const lines = await off.getByTestId('model-env').allTextContents();
    assert.equal(lines.length, 3);
    assert.ok(lines.some((l) => l.startsWith('OPENAI_API_KEY=') && l.includes('FORKBOX_MODEL=')));
    assert.ok(lines.some((l) => l.startsWith('ANTHROPIC_API_KEY=')));
    assert.ok(lines.some((l) => l.startsWith('OPENAI_BASE_URL=http://localhost:11434/v1')));
    await off.getByTestId('model-env-copy').nth(1).click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), lines[1]);
    // The "Copied" toast: in the bottom-right corner, above the question box on a phone
    // (measured once it has slid in: its entry animation starts it 8 px lower).
    const toast = page.getByTestId('toast').last();
    await toast.evaluate((el) => Promise.all(el.getAnimations().map((a) => a.finished)));
    const toastBox = await toast.boundingBox();
    const composer = await page.getByTestId('composer').boundingBox();
    assert.ok(toastBox.x + toastBox.width >= viewport.width - 24 && toastBox.y + toastBox.height <= viewport.height, `the toast in the corner: ${JSON.stringify(toastBox)}`);
    if (mobile) assert.ok(toastBox.y + toastBox.height <= composer.y + 1, `the toast ${JSON.stringify(toastBox)} is above the question box ${JSON.stringify(composer)}`);
    await shot(page, `health-building-${viewport.width}`);
    if (mobile) await noHorizontalScroll(page);

    // A cell while the image builds: the 503's message, not a generic failure.
    await page.getByTestId('tab-code').click();
    await page.getByTestId('code-input').fill('print(1)');
    await page.getByTestId('code-input').press('Control+Enter');
    const msg = page.getByTestId('error-message').filter({ hasText: 'is being built (step 3 of 7)' });
    await msg.first().waitFor();
    // The banner follows the build, then goes once the image is ready.
    await waitFor('step 4', async () => /step 4 of 7/.test(await text.textContent().catch(() => '')), 15000);
    await waitFor('the banner to go', async () => (await page.getByTestId('image-banner').count()) === 0, 15000);
    // The no-model notice is said once: still one, and no banner repeats it.
    assert.equal(await page.getByTestId('chat-unavailable').count(), 1);
    assert.equal(await page.getByTestId('error-banner').filter({ hasText: 'no model' }).count(), 0);
  }
});

test('chat: stop a streaming answer (1280x800)', { skip, timeout: 180000 }, async (t) => {
  const page = await open(t, LAPTOP);
  // A cell keeps the kernel busy, so the model's first step waits behind it
  // and the answer is still streaming when it is stopped.
  const busy = await startCell(page, "import time\nprint('busy', flush=True)\ntime.sleep(60)");
  await waitFor('the kernel to be busy', async () => (await busy.getByTestId('output-stdout').textContent().catch(() => '')).includes('busy'), 30000, 100);
  await page.getByTestId('tab-chat').click();
  await page.getByTestId('question-input').fill(QUESTION);
  await page.getByTestId('question-input').press('Enter');
  const msg = page.getByTestId('assistant-message').last();
  await msg.getByTestId('step').first().waitFor();
  assert.equal(await msg.getAttribute('data-state'), 'streaming');
  const stop = page.getByTestId('stop-answer');
  assert.equal(await stop.isVisible(), true, 'a stop button while the answer streams');
  assert.equal(await page.getByTestId('send-button').isVisible(), false);
  await shot(page, 'chat-streaming-1280');
  await stop.click();
  await waitFor('the answer to stop', async () => (await msg.getAttribute('data-state')) === 'stopped', 30000);
  await msg.getByTestId('assistant-stopped').waitFor();
  assert.equal(await stop.isVisible(), false);
  assert.equal(await page.getByTestId('send-button').isVisible(), true, 'the send button is back');
  await shot(page, 'chat-stopped-1280');
  // Free the kernel.
  await page.getByTestId('tab-code').click();
  if ((await busy.getAttribute('data-state')) === 'running') await busy.getByTestId('cell-stop').click();
  await finished(busy, 30000);
  const after = await runCell(page, "print('free')");
  assert.equal((await after.getByTestId('output-stdout').textContent()).trim(), 'free');
});

const NO_MODEL = (process.env.NO_MODEL_URL || '').replace(/\/+$/, '');

test('chat without a model: said once on load, with the settings to copy (1280x800, 390x844)', { skip: skip || (NO_MODEL ? false : 'NO_MODEL_URL is not set'), timeout: 180000 }, async (t) => {
  const hz = await (await fetch(`${NO_MODEL}/healthz`)).json();
  assert.equal(hz.chat && hz.chat.ready, false, `the daemon says chat is not ready: ${JSON.stringify(hz)}`);
  for (const [viewport, mobile] of [[LAPTOP, false], [PHONE, true]]) {
    const page = await open(t, viewport, { mobile, base: NO_MODEL });
    const off = page.getByTestId('chat-unavailable');
    await off.waitFor({ state: 'visible' });
    assert.equal(await page.getByTestId('chat-unavailable').count(), 1);
    assert.equal((await off.getByTestId('chat-off-why').textContent()).trim(), hz.chat.why.trim(), 'the daemon\'s reason, once');
    assert.equal(await page.getByTestId('question-input').isDisabled(), true, 'the question box is disabled');
    assert.equal(await page.getByTestId('send-button').isDisabled(), true);
    assert.equal(await page.getByTestId('error-banner').count(), 0, 'no banner repeats it');
    const lines = await off.getByTestId('model-env').allTextContents();
    assert.deepEqual(lines.map((l) => l.split('=')[0]), ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OPENAI_BASE_URL']);
    await off.getByTestId('model-env-copy-all').click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), lines.join('\n'));
    if (mobile) await noHorizontalScroll(page);
    await shot(page, `no-model-${viewport.width}`);
    if (!mobile) {
      // Code cells work without a model.
      const cell = await runCell(page, 'print(6*7)');
      assert.equal((await cell.getByTestId('output-stdout').textContent()).trim(), '42');
      await page.getByTestId('tab-chat').click();
      assert.equal(await page.getByTestId('chat-unavailable').count(), 1, 'still said once');
    }
  }
});
