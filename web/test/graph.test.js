// The snapshot tree (static/graph.js) without a browser: which sandboxes
// and snapshots it holds and in what order, the names of forks, and the
// outline layout that must fit the panel's width.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shortId, buildTree, countNodes, forkLabels, layout } from '../static/graph.js';

test('shortId keeps the prefix and six characters', () => {
  assert.equal(shortId('sb_0123456789abcdef'), 'sb_012345');
  assert.equal(shortId('snap_abc'), 'snap_abc');
  assert.equal(shortId('abcdefghijklmnop'), 'abcdefghij');
  assert.equal(shortId('_abcdefghijklmnop'), '_abcdefghi');
  assert.equal(shortId(''), '');
  assert.equal(shortId(undefined), '');
});

// A: the conversation's sandbox; s1, s2 its snapshots; B and C started
// from s1 (a fork of two), D from s2 (a restore); s3 a snapshot of B; E
// started from s3.
const t = (n) => `2026-01-01T00:00:0${n}Z`;
const SANDBOXES = [
  { id: 'E', snapshot_id: 's3', created_at: t(8), state: 'running' },
  { id: 'C', snapshot_id: 's1', created_at: t(4), state: 'suspended' },
  { id: 'A', created_at: t(0), state: 'running' },
  { id: 'D', snapshot_id: 's2', created_at: t(6), state: 'terminated' },
  { id: 'B', snapshot_id: 's1', created_at: t(3), state: 'running', name: 'experiment' },
];
const SNAPSHOTS = [
  { id: 's2', sandbox_id: 'A', created_at: t(5), type: 'filesystem' },
  { id: 's1', sandbox_id: 'A', created_at: t(2), type: 'memory' },
  { id: 's3', sandbox_id: 'B', created_at: t(7), type: 'memory' },
  { id: 'sX', sandbox_id: 'gone', created_at: t(1), type: 'memory' },
];

/** shape is the tree as nested [id, children…] arrays. */
const shape = (n) => (n.children.length ? [n.id, ...n.children.map(shape)] : n.id);

test('buildTree: from any sandbox of the family, the whole tree from its top, oldest first', () => {
  const want = ['A', ['s1', ['B', ['s3', 'E']], 'C'], ['s2', 'D']];
  for (const from of ['A', 'B', 'C', 'D', 'E']) {
    const root = buildTree(from, SANDBOXES, SNAPSHOTS);
    assert.deepEqual(shape(root), want, `from ${from}`);
  }
  const root = buildTree('A', SANDBOXES, SNAPSHOTS);
  assert.equal(root.kind, 'sandbox');
  assert.equal(root.children[0].kind, 'snapshot');
  assert.equal(root.children[0].data.type, 'memory');
  assert.deepEqual(countNodes(root), { sandbox: 5, snapshot: 3 });
});

test('buildTree: a sandbox whose origin is not listed is the top', () => {
  assert.deepEqual(shape(buildTree('B', [SANDBOXES[4]], SNAPSHOTS)), ['B', 's3']);
  const lone = buildTree('Z', [], []);
  assert.deepEqual(lone, { kind: 'sandbox', id: 'Z', data: { id: 'Z', state: 'unknown' }, children: [] });
});

test('buildTree: data with a cycle still gives a finite tree, each node once', () => {
  const sbs = [{ id: 'A', snapshot_id: 'sB' }, { id: 'B', snapshot_id: 'sA' }];
  const snaps = [{ id: 'sA', sandbox_id: 'A' }, { id: 'sB', sandbox_id: 'B' }];
  for (const from of ['A', 'B']) {
    const root = buildTree(from, sbs, snaps);
    const ids = [];
    const walk = (n) => { ids.push(n.id); n.children.forEach(walk); };
    walk(root);
    assert.deepEqual([...ids].sort(), ['A', 'B', 'sA', 'sB'], `from ${from}: ${ids}`);
  }
});

test('forkLabels: a name, else "conversation" for home, else fork-n among siblings', () => {
  const labels = forkLabels(buildTree('A', SANDBOXES, SNAPSHOTS), 'A');
  assert.deepEqual(Object.fromEntries(labels), { A: 'conversation', B: 'experiment', C: 'fork-2', D: 'fork-3', E: 'fork-1' });
  assert.equal(forkLabels(buildTree('A', SANDBOXES, SNAPSHOTS), 'other').get('A'), 'sandbox');
});

/** chain is a tree of depth sandboxes, each started from its parent's one snapshot. */
function chain(depth) {
  const sbs = [];
  const snaps = [];
  for (let i = 0; i < depth; i++) {
    sbs.push({ id: `sb${i}`, snapshot_id: i ? `sn${i - 1}` : undefined, created_at: t(0) });
    snaps.push({ id: `sn${i}`, sandbox_id: `sb${i}`, created_at: t(0) });
  }
  return buildTree('sb0', sbs, snaps);
}

function checkLayout(root, width) {
  const { rows, height } = layout(root, width);
  assert.equal(rows.length, countNodes(root).sandbox + countNodes(root).snapshot);
  assert.equal(rows[0], root, 'the root is the first row');
  for (let i = 0; i < rows.length; i++) {
    const n = rows[i];
    assert.equal(n.h, n.kind === 'sandbox' ? 46 : 34);
    assert.ok(n.x >= 6 && n.x + n.w <= width - 6 + 1e-9, `row ${i} (${n.id}) spans ${n.x}..${n.x + n.w} of ${width}`);
    if (i) {
      assert.ok(n.y >= rows[i - 1].y + rows[i - 1].h, `row ${i} overlaps the one above`);
      const parent = rows.slice(0, i).reverse().find((p) => p.children.includes(n));
      assert.ok(parent, `row ${i} comes after its parent`);
      assert.ok(n.x > parent.x, `row ${i} is indented under its parent`);
    }
  }
  const last = rows[rows.length - 1];
  assert.equal(height, last.y + last.h + 6);
  return rows;
}

test('layout: one row per node, in order, indented, inside the width', () => {
  const rows = checkLayout(buildTree('A', SANDBOXES, SNAPSHOTS), 300);
  assert.deepEqual(rows.map((n) => n.id), ['A', 's1', 'B', 's3', 'E', 'C', 's2', 'D']);
  assert.deepEqual(rows.map((n) => n.depth), [0, 1, 2, 3, 4, 2, 1, 2]);
  assert.equal(rows[1].x - rows[0].x, 18, 'a shallow tree indents fully');
  checkLayout(buildTree('Z', [], []), 200);
});

test('layout: a deep tree indents less and still fits', () => {
  const rows = checkLayout(chain(10), 300); // 20 levels
  assert.ok(rows[1].x - rows[0].x < 18);
  assert.ok(rows[1].x - rows[0].x >= 6);
  checkLayout(chain(5), 200);
});
