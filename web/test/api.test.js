// The UI's API client (static/api.js) against a fetch that answers like the
// daemon: event streams cut anywhere, a stream cut in an event, a daemon
// that answers JSON instead of a stream, error answers and an unreachable
// daemon. Only fetch is replaced; the client's own code runs.
import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { stream, request, ApiError, setApiKey, api, listAll } from '../static/api.js';

const realFetch = globalThis.fetch;
let calls;

/** answer makes fetch answer every call with status, headers and a body sent in chunks. */
function answer(status, headers, chunks) {
  globalThis.fetch = async (url, init) => {
    calls.push({ url, init });
    if (init && init.signal && init.signal.aborted) throw new DOMException('aborted', 'AbortError');
    const enc = new TextEncoder();
    const body = new ReadableStream({
      start(c) {
        for (const ch of chunks) c.enqueue(typeof ch === 'string' ? enc.encode(ch) : ch);
        c.close();
      },
    });
    return new Response(status === 204 ? null : body, { status, headers });
  };
}

beforeEach(() => { calls = []; setApiKey(''); });
afterEach(() => { globalThis.fetch = realFetch; setApiKey(''); });

const SSE = { 'Content-Type': 'text/event-stream' };

async function events(chunks, headers = SSE) {
  answer(200, headers, chunks);
  const got = [];
  await stream('/v1/chat', { question: 'q' }, (name, data) => got.push([name, data]));
  return got;
}

test('stream: events decoded from JSON, whatever the chunks', async () => {
  const text = 'event: conversation\ndata: {"conversation_id":"c1"}\n\n' +
    ': keep-alive\r\n\r\n' +
    'event: text\r\ndata: {"text":"North made"}\r\n\r\n' +
    'event: done\ndata: {"answer":"North made a profit"}\n\n';
  const want = [
    ['conversation', { conversation_id: 'c1' }],
    ['text', { text: 'North made' }],
    ['done', { answer: 'North made a profit' }],
  ];
  for (let i = 0; i <= text.length; i += 5) {
    assert.deepEqual(await events([text.slice(0, i), text.slice(i)]), want, `split at ${i}`);
  }
  const bytes = new TextEncoder().encode(text);
  assert.deepEqual(await events(Array.from(bytes, (b) => new Uint8Array([b]))), want, 'one byte at a time');
});

test('stream: a stream cut in an event does not pass the half event on', async () => {
  // Before, the rest of the stream was dispatched as an event: a "done"
  // whose data was cut finished the answer with nothing in it.
  assert.deepEqual(await events(['event: stdout\ndata: {"data":"1"}\n\nevent: done\ndata: {"exec']), [['stdout', { data: '1' }]]);
  assert.deepEqual(await events(['event: done\ndata: {"execution_count":1}\n']), []);
});

test('stream: data that is not JSON is passed as text, empty data as null', async () => {
  assert.deepEqual(await events(['data: plain text\n\nevent: e\ndata:\n\n']), [['message', 'plain text'], ['e', null]]);
});

test('stream: asks for an event stream, sends JSON or a raw body, and the API key', async () => {
  answer(200, SSE, ['data: {}\n\n']);
  setApiKey('k-123');
  await stream('/v1/sandboxes/s/code', { code: '1' }, () => {});
  let h = calls[0].init.headers;
  assert.equal(calls[0].init.method, 'POST');
  assert.equal(h.Accept, 'text/event-stream');
  assert.equal(h['Content-Type'], 'application/json');
  assert.equal(h.Authorization, 'Bearer k-123');
  assert.equal(calls[0].init.body, '{"code":"1"}');
  await stream('/v1/sandboxes/s/notebook', '{"cells":[]}', () => {}, { raw: true, contentType: 'application/x-ipynb+json' });
  h = calls[1].init.headers;
  assert.equal(h['Content-Type'], 'application/x-ipynb+json');
  assert.equal(calls[1].init.body, '{"cells":[]}');
});

test('stream: a daemon that answers JSON gives one "json" event', async () => {
  assert.deepEqual(await events(['{"answer":"42"}'], { 'Content-Type': 'application/json' }), [['json', { answer: '42' }]]);
});

test('stream and request: an error answer is an ApiError with its status, code and message', async () => {
  answer(503, { 'Content-Type': 'application/json' }, ['{"error":{"code":"unavailable","message":"no model is configured"}}']);
  const got = [];
  await assert.rejects(stream('/v1/chat', {}, (n) => got.push(n)), (err) => {
    assert.ok(err instanceof ApiError);
    assert.equal(err.status, 503);
    assert.equal(err.code, 'unavailable');
    assert.equal(err.message, 'no model is configured');
    return true;
  });
  assert.deepEqual(got, []);
  answer(404, { 'Content-Type': 'text/plain' }, ['404 page not found\n']);
  await assert.rejects(request('GET', '/v1/nope'), { name: 'ApiError', status: 404, message: '404 page not found' });
  answer(500, {}, ['{"error":"boom"}']);
  await assert.rejects(request('GET', '/v1/x'), { status: 500, message: 'boom' });
});

test('request: JSON in and out, 204 is null', async () => {
  answer(200, { 'Content-Type': 'application/json' }, ['{"conversations":[]}']);
  assert.deepEqual(await request('POST', '/v1/conversations', { title: 't' }), { conversations: [] });
  assert.equal(calls[0].init.headers['Content-Type'], 'application/json');
  assert.equal(calls[0].init.body, '{"title":"t"}');
  answer(204, {}, []);
  assert.equal(await request('DELETE', '/v1/sandboxes/s'), null);
});

test('an unreachable daemon is an ApiError with status 0; an abort stays an AbortError', async () => {
  globalThis.fetch = async () => { throw new TypeError('fetch failed'); };
  await assert.rejects(request('GET', '/v1/sandboxes'), (err) => err instanceof ApiError && err.status === 0 && err.code === 'unreachable' && /Cannot reach/.test(err.message));
  answer(200, SSE, []);
  const abort = new AbortController();
  abort.abort();
  await assert.rejects(stream('/v1/chat', {}, () => {}, { signal: abort.signal }), { name: 'AbortError' });
});

/** paged makes fetch answer a list as the daemon pages it: size items a page
 * after the cursor "at-<i>", next_cursor while more follow. */
function paged(key, items, size) {
  globalThis.fetch = async (url, init) => {
    calls.push({ url, init });
    const q = new URL(url, 'http://x').searchParams;
    const c = q.get('cursor');
    const start = c ? Number(c.slice(3)) + 1 : 0;
    const end = Math.min(start + size, items.length);
    const doc = { [key]: items.slice(start, end) };
    if (end < items.length) doc.next_cursor = `at-${end - 1}`;
    return new Response(JSON.stringify(doc), { status: 200, headers: { 'Content-Type': 'application/json' } });
  };
}

test('lists: every page, the terminated sandboxes included (the graph draws them)', async () => {
  const sbs = Array.from({ length: 5 }, (_, i) => ({ id: `sbx_${i}`, state: i % 2 ? 'terminated' : 'running' }));
  paged('sandboxes', sbs, 2);
  const list = await api.listSandboxes();
  assert.deepEqual(list.sandboxes.map((s) => s.id), sbs.map((s) => s.id));
  assert.equal(list.next_cursor, undefined);
  const qs = calls.map((c) => new URL(c.url, 'http://x').searchParams);
  assert.deepEqual(qs.map((q) => q.get('cursor')), [null, 'at-1', 'at-3']);
  for (const q of qs) {
    assert.equal(q.get('include_terminated'), 'true');
    assert.equal(q.get('limit'), '1000');
  }
  calls = [];
  const convs = Array.from({ length: 3 }, (_, i) => ({ id: `conv_${i}` }));
  paged('conversations', convs, 1);
  assert.deepEqual((await api.listConversations()).conversations.map((c) => c.id), ['conv_0', 'conv_1', 'conv_2']);
  assert.equal(calls.length, 3);
  calls = [];
  paged('snapshots', [], 10);
  assert.deepEqual((await api.listSnapshots()).snapshots, []);
  assert.equal(calls.length, 1);
});

test('lists: a cursor answered back stops the walk with an error', async () => {
  globalThis.fetch = async (url, init) => {
    calls.push({ url, init });
    return new Response(JSON.stringify({ sandboxes: [{ id: 'a' }], next_cursor: 'same' }), { status: 200, headers: { 'Content-Type': 'application/json' } });
  };
  await assert.rejects(listAll('/v1/sandboxes', 'sandboxes'), (err) => err instanceof ApiError && /cursor/.test(err.message));
  assert.equal(calls.length, 2);
});
