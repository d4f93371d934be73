// Unit tests of the event-stream parser: events split anywhere across
// chunks, every line-end style, comments, multi-line data, UTF-8 split
// between chunks, and a cut stream. The web UI's tests
// (web/test/sse.test.js) also feed this parser and the UI's the same
// streams and want the same events.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SSEParser, readSSE } from "../dist/index.js";

const STREAM =
  ": a comment first\n" +
  "event: stdout\ndata: {\"data\":\"hi\\n\"}\n\n" +
  "event: result\r\ndata: {\"text\":\"215\",\r\ndata: \"is_main_result\":true}\r\n\r\n" +
  "data: no name\r\r" +
  "event: nodata\n\n" +
  "id: 7\nretry: 100\nevent: done\ndata:{\"x\":1}\n\n";

const WANT = [
  { event: "stdout", data: '{"data":"hi\\n"}' },
  { event: "result", data: '{"text":"215",\n"is_main_result":true}' },
  { event: "message", data: "no name" },
  { event: "done", data: '{"x":1}' },
];

function parseInChunks(text, cuts) {
  const p = new SSEParser();
  const out = [];
  let prev = 0;
  for (const c of [...cuts, text.length]) {
    out.push(...p.push(text.slice(prev, c)));
    prev = c;
  }
  out.push(...p.end());
  return out;
}

test("SSEParser: whole stream at once", () => {
  assert.deepEqual(parseInChunks(STREAM, []), WANT);
});

test("SSEParser: split at every position", () => {
  for (let i = 0; i <= STREAM.length; i++) {
    assert.deepEqual(parseInChunks(STREAM, [i]), WANT, `split at ${i}: ${JSON.stringify(STREAM.slice(0, i))}`);
  }
});

test("SSEParser: one character at a time", () => {
  const cuts = [];
  for (let i = 1; i < STREAM.length; i++) cuts.push(i);
  assert.deepEqual(parseInChunks(STREAM, cuts), WANT);
});

test("SSEParser: CR and LF of one line end in different chunks", () => {
  // "a\r" then "\n" must be one line end, not a line end and a blank line.
  const p = new SSEParser();
  assert.deepEqual(p.push("data: a\r"), []);
  assert.deepEqual(p.push("\ndata: b\r"), []);
  assert.deepEqual(p.push("\n\r\n"), [{ event: "message", data: "a\nb" }]);
});

test("SSEParser: a final event without its blank line is dropped", () => {
  const p = new SSEParser();
  assert.deepEqual(p.push("event: done\ndata: {}\n"), []);
  assert.deepEqual(p.end(), []);
  const q = new SSEParser();
  assert.deepEqual(q.push("event: done\ndata: {}\n\nevent: x\ndata: half"), [{ event: "done", data: "{}" }]);
  assert.deepEqual(q.end(), []);
});

test("SSEParser: one leading byte order mark is dropped, by the parser itself", () => {
  const p = new SSEParser();
  assert.deepEqual(p.push(""), []);
  assert.deepEqual(p.push("\uFEFFdata: x\n\n"), [{ event: "message", data: "x" }]);
  const q = new SSEParser();
  assert.deepEqual(q.push("\uFEFF\uFEFFdata: x\n\ndata: y\n\n"), [{ event: "message", data: "y" }]);
});

test("SSEParser: a long line in many small chunks", () => {
  // A chart's base64 in one data line, arriving 1 KiB at a time.
  const data = "x".repeat(1 << 20);
  const text = `event: result\ndata: {"png":"${data}"}\n\n`;
  const p = new SSEParser();
  const out = [];
  for (let i = 0; i < text.length; i += 1024) out.push(...p.push(text.slice(i, i + 1024)));
  out.push(...p.end());
  assert.deepEqual(out, [{ event: "result", data: `{"png":"${data}"}` }]);
});

test("SSEParser: field without colon, value without space, empty data", () => {
  const p = new SSEParser();
  assert.deepEqual(p.push("data\n\ndata:x\n\nevent:e\ndata:  two spaces\n\n"), [
    { event: "message", data: "" },
    { event: "message", data: "x" },
    { event: "e", data: " two spaces" },
  ]);
});

function bytesStream(chunks) {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
}

test("readSSE: UTF-8 split between chunks and a BOM", async () => {
  const text = '\uFEFFevent: stdout\ndata: {"data":"h\u00e9llo \u{1F600} \u4e16\u754c"}\n\n';
  const bytes = new TextEncoder().encode(text);
  for (let i = 0; i <= bytes.length; i++) {
    const got = [];
    for await (const ev of readSSE(bytesStream([bytes.slice(0, i), bytes.slice(i)]))) got.push(ev);
    assert.deepEqual(got, [{ event: "stdout", data: '{"data":"h\u00e9llo \u{1F600} \u4e16\u754c"}' }], `split at byte ${i}`);
  }
});

test("readSSE: breaking out cancels the body", async () => {
  let cancelled = false;
  const body = new ReadableStream({
    pull(c) {
      c.enqueue(new TextEncoder().encode("data: tick\n\n"));
    },
    cancel() {
      cancelled = true;
    },
  });
  let n = 0;
  for await (const ev of readSSE(body)) {
    assert.equal(ev.data, "tick");
    if (++n === 3) break;
  }
  assert.equal(cancelled, true);
});
