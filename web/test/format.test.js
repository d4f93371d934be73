// Formatting of times, sizes, durations and paths (static/format.js).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { timeAgo, bytes, duration, fmtInt, parentOf, joinPath } from '../static/format.js';

test('bytes in powers of 1024', () => {
  const cases = [[0, '0 B'], [-1, '0 B'], [NaN, '0 B'], [undefined, '0 B'], [1, '1 B'], [1023, '1023 B'], [1024, '1.0 KB'],
    [1536, '1.5 KB'], [5 * 1024 ** 3, '5.0 GB'], [2 * 1024 ** 4, '2.0 TB'], [1024 ** 5, '1024.0 TB']];
  for (const [n, want] of cases) assert.equal(bytes(n), want, String(n));
});

test('duration in ms, s, or min and s', () => {
  const cases = [[0.4, '0 ms'], [999, '999 ms'], [1000, '1.0 s'], [12345, '12.3 s'], [61000, '1 min 1 s'],
    [119600, '2 min 0 s'], [3600000, '60 min 0 s'], [NaN, ''], [undefined, '']];
  for (const [ms, want] of cases) assert.equal(duration(ms), want, String(ms));
});

test('timeAgo from now', () => {
  const now = Date.parse('2026-01-10T12:00:00Z');
  const ago = (s) => new Date(now - s * 1000).toISOString();
  assert.equal(timeAgo(ago(10), now), 'just now');
  assert.equal(timeAgo(ago(-30), now), 'just now', 'a clock a little ahead');
  assert.equal(timeAgo(ago(50), now), '1 min ago');
  assert.equal(timeAgo(ago(90), now), '2 min ago');
  assert.equal(timeAgo(ago(2 * 3600), now), '2 h ago');
  assert.equal(timeAgo(ago(3 * 86400), now), '3 d ago');
  assert.match(timeAgo(ago(30 * 86400), now), /2025/);
  assert.equal(timeAgo('not a time', now), '');
  assert.equal(timeAgo(undefined, now), '');
});

test('fmtInt groups like the locale does', () => {
  assert.equal(fmtInt(1234567), (1234567).toLocaleString());
  assert.equal(fmtInt(undefined), '0');
  assert.equal(fmtInt('12'), '12');
});

test('parentOf and joinPath', () => {
  assert.equal(parentOf('/workspace/a/b'), '/workspace/a');
  assert.equal(parentOf('/workspace/a/'), '/workspace');
  assert.equal(parentOf('/workspace'), '/');
  assert.equal(parentOf('/'), '/');
  assert.equal(joinPath('/workspace', 'x.csv'), '/workspace/x.csv');
  assert.equal(joinPath('/workspace//', 'x.csv'), '/workspace/x.csv');
  assert.equal(joinPath('/', 'etc'), '/etc');
  for (const p of ['/workspace/data', '/a/b/c']) assert.equal(parentOf(joinPath(p, 'f')), p);
});
