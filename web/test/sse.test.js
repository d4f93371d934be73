// The UI's event-stream parser (static/sse.js, a copy of the TypeScript
// SDK's sdk/js/dist/sse.js that TestSSEIsTheSDKs keeps identical) and the
// SDK's own, fed the same streams, whole, split at every position and one
// character at a time: both must give the events the standard gives (on a
// stream cut in an event, CRLF, comments, multi-line data, a byte order
// mark). Both are run so that a stale copy fails here too.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SSEParser, readSSE } from '../static/sse.js';
import { SSEParser as SDKParser, readSSE as sdkReadSSE } from '../../sdk/js/dist/sse.js';

const PARSERS = [['web', SSEParser], ['sdk', SDKParser]];
const READERS = [['web', readSSE], ['sdk', sdkReadSSE]];

/** parse feeds text to a new parser in pieces cut at cuts, then ends it. */
function parse(Parser, text, cuts = []) {
  const p = new Parser();
  const out = [];
  let prev = 0;
  for (const c of [...cuts, text.length]) {
    out.push(...p.push(text.slice(prev, c)));
    prev = c;
  }
  out.push(...p.end());
  return out;
}

const ev = (event, data) => ({ event, data });

const CASES = [
  {
    name: 'named events, a comment first',
    stream: ': a comment\nevent: stdout\ndata: {"data":"hi\\n"}\n\n',
    want: [ev('stdout', '{"data":"hi\\n"}')],
  },
  {
    name: 'CRLF line ends and data on two lines',
    stream: 'event: result\r\ndata: {"text":"215",\r\ndata: "is_main_result":true}\r\n\r\n',
    want: [ev('result', '{"text":"215",\n"is_main_result":true}')],
  },
  { name: 'lone CR line ends', stream: 'data: no name\r\rdata: two\r\r', want: [ev('message', 'no name'), ev('message', 'two')] },
  { name: 'mixed line ends', stream: 'data: a\r\ndata: b\rdata: c\n\r\n', want: [ev('message', 'a\nb\nc')] },
  { name: 'an event without data is not dispatched, and its name does not carry over', stream: 'event: nodata\n\ndata: x\n\n', want: [ev('message', 'x')] },
  { name: 'the name resets after each event', stream: 'event: a\ndata: 1\n\ndata: 2\n\n', want: [ev('a', '1'), ev('message', '2')] },
  { name: 'an empty name is "message"', stream: 'event:\ndata: x\n\n', want: [ev('message', 'x')] },
  { name: 'id, retry and unknown fields are ignored; no space after the colon', stream: 'id: 7\nretry: 100\nfoo: bar\nevent: done\ndata:{"x":1}\n\n', want: [ev('done', '{"x":1}')] },
  {
    name: 'a field without a colon; only one leading space is dropped',
    stream: 'data\n\nevent:e\ndata:  two spaces\n\n',
    want: [ev('message', ''), ev('e', ' two spaces')],
  },
  { name: 'comments between data lines', stream: 'data: a\n: keep-alive\ndata: b\n\n', want: [ev('message', 'a\nb')] },
  { name: 'data with colons and empty data lines', stream: 'data: a: b\ndata:\ndata: c\n\n', want: [ev('message', 'a: b\n\nc')] },
  { name: 'a leading byte order mark', stream: '\uFEFFevent: e\ndata: x\n\n', want: [ev('e', 'x')] },
  { name: 'only one byte order mark is dropped', stream: '\uFEFF\uFEFFdata: x\n\ndata: y\n\n', want: [ev('message', 'y')] },
  { name: 'a BOM after the start is data', stream: 'data: \uFEFFx\n\n', want: [ev('message', '\uFEFFx')] },
  {
    name: 'a stream cut in an event gives only the whole events',
    stream: 'event: done\ndata: {}\n\nevent: x\ndata: {"half',
    want: [ev('done', '{}')],
  },
  { name: 'a stream cut before the blank line drops the event', stream: 'event: done\ndata: {}\n', want: [] },
  { name: 'a CR last ends the stream\'s last line', stream: 'data: x\n\r', want: [ev('message', 'x')] },
  { name: 'blank lines alone', stream: '\n\n\r\n\r', want: [] },
  { name: 'UTF-8 text', stream: 'data: h\u00e9llo \u{1F600} \u4e16\u754c\n\n', want: [ev('message', 'h\u00e9llo \u{1F600} \u4e16\u754c')] },
];

for (const [who, Parser] of PARSERS) {
  test(`${who} SSEParser: each stream whole`, () => {
    for (const c of CASES) assert.deepEqual(parse(Parser, c.stream), c.want, c.name);
  });

  test(`${who} SSEParser: each stream split at every position`, () => {
    for (const c of CASES) {
      for (let i = 0; i <= c.stream.length; i++) {
        assert.deepEqual(parse(Parser, c.stream, [i]), c.want, `${c.name}: split at ${i} ${JSON.stringify(c.stream.slice(0, i))}`);
      }
    }
  });

  test(`${who} SSEParser: each stream one character at a time`, () => {
    for (const c of CASES) {
      const cuts = Array.from({ length: Math.max(0, c.stream.length - 1) }, (_, i) => i + 1);
      assert.deepEqual(parse(Parser, c.stream, cuts), c.want, c.name);
    }
  });

  test(`${who} SSEParser: all the streams in a row, split in three everywhere`, () => {
    // Each case but the cut ones ends with its events closed, so they chain.
    const whole = CASES.filter((c) => !/cut|BOM|byte order|CR last/.test(c.name));
    const text = whole.map((c) => c.stream).join('');
    const want = whole.flatMap((c) => c.want);
    for (let i = 0; i <= text.length; i += 3) {
      for (let j = i; j <= text.length; j += 7) {
        assert.deepEqual(parse(Parser, text, [i, j]), want, `cut at ${i} and ${j}`);
      }
    }
  });

  test(`${who} SSEParser: the CR and LF of one line end in different chunks`, () => {
    // "a\r" then "\n" is one line end, not a line end and a blank line.
    const p = new Parser();
    assert.deepEqual(p.push('data: a\r'), []);
    assert.deepEqual(p.push('\ndata: b\r'), []);
    assert.deepEqual(p.push('\n\r'), []);
    assert.deepEqual(p.push('\n'), [ev('message', 'a\nb')]);
    assert.deepEqual(p.end(), []);
  });

  test(`${who} SSEParser: events are given as soon as their blank line arrives`, () => {
    const p = new Parser();
    assert.deepEqual(p.push('event: stdout\ndata: 1\n'), []);
    assert.deepEqual(p.push('\nevent: stdout\n'), [ev('stdout', '1')]);
    assert.deepEqual(p.push('data: 2\n\ndata: 3'), [ev('stdout', '2')]);
    assert.deepEqual(p.end(), []);
  });

  test(`${who} SSEParser: a long line in many small chunks`, () => {
    // A chart's base64 in one data line, arriving 1 KiB at a time.
    const data = 'x'.repeat(1 << 20);
    const text = `event: result\ndata: {"png":"${data}"}\n\n`;
    const p = new Parser();
    const out = [];
    for (let i = 0; i < text.length; i += 1024) out.push(...p.push(text.slice(i, i + 1024)));
    out.push(...p.end());
    assert.equal(out.length, 1);
    assert.equal(out[0].event, 'result');
    assert.equal(out[0].data, `{"png":"${data}"}`);
  });

  test(`${who} SSEParser: reusable after end`, () => {
    const p = new Parser();
    assert.deepEqual(p.push('event: a\ndata: half'), []);
    assert.deepEqual(p.end(), []);
    assert.deepEqual(p.push('\uFEFFdata: again\n\n'), [ev('message', 'again')]);
  });
}

test('the web and SDK parsers agree on random streams cut anywhere', () => {
  // Streams built from the pieces a stream is made of, cut at random
  // places: whatever the standard says of each, both must say the same.
  const pieces = ['data: ', 'data:', 'event: ', 'event:', 'id: 1', ': c', 'x', '{"a":1}', '\uFEFF', 'é', ' ', ':', '\n', '\r', '\r\n', '\n\n'];
  let seed = 42;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  for (let round = 0; round < 500; round++) {
    let text = '';
    const n = 1 + rand(40);
    for (let i = 0; i < n; i++) text += pieces[rand(pieces.length)];
    const cuts = [];
    for (let i = rand(4); i > 0; i--) cuts.push(rand(text.length + 1));
    cuts.sort((a, b) => a - b);
    const web = parse(SSEParser, text, cuts);
    assert.deepEqual(web, parse(SDKParser, text, cuts), `stream ${JSON.stringify(text)} cut at ${cuts}`);
    assert.deepEqual(web, parse(SSEParser, text), `stream ${JSON.stringify(text)}: the cuts change the events`);
  }
});

function bytesStream(chunks, { onCancel } = {}) {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
    cancel: onCancel,
  });
}

async function readAll(read, body) {
  const out = [];
  for await (const e of read(body)) out.push(e);
  return out;
}

for (const [who, read] of READERS) {
  test(`${who} readSSE: UTF-8 and a BOM split between chunks at every byte`, async () => {
    const text = '\uFEFFevent: stdout\ndata: {"data":"h\u00e9llo \u{1F600} \u4e16\u754c"}\n\n';
    const bytes = new TextEncoder().encode(text);
    for (let i = 0; i <= bytes.length; i++) {
      const got = await readAll(read, bytesStream([bytes.slice(0, i), bytes.slice(i)]));
      assert.deepEqual(got, [ev('stdout', '{"data":"h\u00e9llo \u{1F600} \u4e16\u754c"}')], `split at byte ${i}`);
    }
  });

  test(`${who} readSSE: a body cut in an event yields the whole events only`, async () => {
    const enc = new TextEncoder();
    const got = await readAll(read, bytesStream([enc.encode('event: stdout\ndata: {"data":"1"}\n\nevent: done\n'), enc.encode('data: {"exit_code"')]));
    assert.deepEqual(got, [ev('stdout', '{"data":"1"}')]);
  });

  test(`${who} readSSE: leaving the loop cancels the body`, async () => {
    let cancelled = false;
    const body = new ReadableStream({
      pull(c) { c.enqueue(new TextEncoder().encode('data: tick\n\n')); },
      cancel() { cancelled = true; },
    });
    let n = 0;
    for await (const e of read(body)) {
      assert.equal(e.data, 'tick');
      if (++n === 3) break;
    }
    assert.equal(cancelled, true);
  });

  test(`${who} readSSE: a body that fails passes its error on`, async () => {
    let sent = false;
    const body = new ReadableStream({
      pull(c) {
        if (!sent) { sent = true; c.enqueue(new TextEncoder().encode('data: 1\n\ndata: 2')); return; }
        c.error(new TypeError('network error'));
      },
    });
    const got = [];
    await assert.rejects(async () => { for await (const e of read(body)) got.push(e); }, /network error/);
    assert.deepEqual(got, [ev('message', '1')]);
  });
}
