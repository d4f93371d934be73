// The snapshot tree of a sandbox, drawn as inline SVG: sandbox → its
// snapshots → the sandboxes started from them (forks) → their snapshots, …
// laid out top-down as a tidy tree.

const SVG = 'http://www.w3.org/2000/svg';

export function shortId(id) {
  if (!id) return '';
  const i = id.indexOf('_');
  return i > 0 ? id.slice(0, i + 1) + id.slice(i + 1, i + 7) : id.slice(0, 10);
}

/**
 * buildTree returns the root node of the tree that holds sandbox rootId:
 * it first walks up (a sandbox started from a snapshot hangs under that
 * snapshot's sandbox), then down. Nodes: {kind: 'sandbox'|'snapshot', id,
 * data, children}.
 */
export function buildTree(rootId, sandboxes, snapshots) {
  const sbByID = new Map(sandboxes.map((s) => [s.id, s]));
  const snapByID = new Map(snapshots.map((s) => [s.id, s]));
  const snapsOf = new Map(); // sandbox id → its snapshots, oldest first
  for (const sn of snapshots) {
    if (!snapsOf.has(sn.sandbox_id)) snapsOf.set(sn.sandbox_id, []);
    snapsOf.get(sn.sandbox_id).push(sn);
  }
  for (const list of snapsOf.values()) list.sort((a, b) => String(a.created_at).localeCompare(String(b.created_at)));
  const startedFrom = new Map(); // snapshot id → sandboxes started from it
  for (const sb of sandboxes) {
    if (!sb.snapshot_id) continue;
    if (!startedFrom.has(sb.snapshot_id)) startedFrom.set(sb.snapshot_id, []);
    startedFrom.get(sb.snapshot_id).push(sb);
  }
  for (const list of startedFrom.values()) list.sort((a, b) => String(a.created_at).localeCompare(String(b.created_at)));

  // Walk up to the first sandbox whose origin is not in the lists.
  let top = rootId;
  const seenUp = new Set([top]);
  for (;;) {
    const sb = sbByID.get(top);
    const sn = sb && sb.snapshot_id ? snapByID.get(sb.snapshot_id) : null;
    if (!sn || !sn.sandbox_id || seenUp.has(sn.sandbox_id) || !sbByID.has(sn.sandbox_id)) break;
    top = sn.sandbox_id;
    seenUp.add(top);
  }

  const seen = new Set();
  const sandboxNode = (id) => {
    seen.add(id);
    const node = { kind: 'sandbox', id, data: sbByID.get(id) || { id, state: 'unknown' }, children: [] };
    for (const sn of snapsOf.get(id) || []) {
      if (seen.has(sn.id)) continue;
      seen.add(sn.id);
      const snode = { kind: 'snapshot', id: sn.id, data: sn, children: [] };
      for (const child of startedFrom.get(sn.id) || []) {
        if (!seen.has(child.id)) snode.children.push(sandboxNode(child.id));
      }
      node.children.push(snode);
    }
    return node;
  };
  return sandboxNode(top);
}

/** countNodes counts the tree's nodes by kind. */
export function countNodes(root) {
  const n = { sandbox: 0, snapshot: 0 };
  const walk = (x) => { n[x.kind]++; x.children.forEach(walk); };
  walk(root);
  return n;
}

const NODE_W = 148;
const SB_H = 56;
const SN_H = 44;
const GAP_X = 14;
const GAP_Y = 30;
const PAD = 10;

function layout(root) {
  let leaf = 0;
  let depthMax = 0;
  const place = (node, depth) => {
    node.depth = depth;
    depthMax = Math.max(depthMax, depth);
    if (!node.children.length) {
      node.x = leaf++ * (NODE_W + GAP_X);
    } else {
      node.children.forEach((c) => place(c, depth + 1));
      node.x = (node.children[0].x + node.children[node.children.length - 1].x) / 2;
    }
  };
  place(root, 0);
  // Rows alternate sandbox / snapshot, so each row has one height.
  const rowY = [];
  let y = PAD;
  for (let d = 0; d <= depthMax; d++) {
    rowY.push(y);
    y += (d % 2 === 0 ? SB_H : SN_H) + GAP_Y;
  }
  const walk = (n) => {
    n.h = n.kind === 'sandbox' ? SB_H : SN_H;
    n.y = rowY[n.depth];
    n.x += PAD;
    n.children.forEach(walk);
  };
  walk(root);
  return { width: leaf * (NODE_W + GAP_X) - GAP_X + 2 * PAD, height: y - GAP_Y + PAD };
}

function el(name, attrs = {}, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** fitText shortens labels (with an ellipsis) that are wider than their data-max. */
function fitText(svg) {
  for (const t of svg.querySelectorAll('text[data-max]')) {
    const max = Number(t.getAttribute('data-max'));
    const full = t.textContent;
    let n = full.length;
    try {
      while (n > 1 && t.getComputedTextLength() > max) t.textContent = full.slice(0, --n) + '…';
    } catch { /* not rendered (display: none): leave it */ }
  }
}

// ago is a compact age for the node labels: now, 5m, 3h, 2d.
function ago(t) {
  const d = (Date.now() - new Date(t).getTime()) / 1000;
  if (!isFinite(d)) return '';
  if (d < 60) return 'now';
  if (d < 3600) return `${Math.floor(d / 60)}m`;
  if (d < 86400) return `${Math.floor(d / 3600)}h`;
  return `${Math.floor(d / 86400)}d`;
}

/**
 * renderGraph draws root into container. current is the highlighted
 * sandbox, home the conversation's own; onSelect(id) is called when a
 * sandbox node is chosen.
 */
export function renderGraph(container, root, { current, home, onSelect } = {}) {
  const { width, height } = layout(root);
  const svg = el('svg', {
    width, height, viewBox: `0 0 ${width} ${height}`, role: 'group',
    'aria-label': 'Snapshot tree of the sandbox', 'data-testid': 'snapshot-graph-svg',
  });
  const edges = el('g', { class: 'g-edges' });
  const nodes = el('g', { class: 'g-nodes' });
  svg.append(edges, nodes);

  const draw = (n) => {
    for (const c of n.children) {
      const x1 = n.x + NODE_W / 2;
      const y1 = n.y + n.h;
      const x2 = c.x + NODE_W / 2;
      const y2 = c.y;
      const my = (y1 + y2) / 2;
      edges.append(el('path', {
        class: `g-edge ${c.kind === 'sandbox' ? 'restore' : 'save'}`,
        d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`,
        'data-testid': 'graph-edge',
      }));
      draw(c);
    }
    nodes.append(node(n));
  };

  const node = (n) => {
    const d = n.data || {};
    const g = el('g', { transform: `translate(${n.x},${n.y})`, 'data-testid': 'graph-node', 'data-kind': n.kind, 'data-id': n.id });
    const title = el('title');
    g.append(title);
    if (n.kind === 'sandbox') {
      const state = d.state || 'unknown';
      const isCurrent = n.id === current;
      const cls = ['g-node', 'sandbox', state];
      if (isCurrent) cls.push('current');
      if (state !== 'terminated' && onSelect) cls.push('clickable');
      g.setAttribute('class', cls.join(' '));
      g.setAttribute('data-state', state);
      if (isCurrent) g.setAttribute('data-current', 'true');
      g.append(el('rect', { width: NODE_W, height: n.h, rx: 10 }));
      g.append(el('circle', { class: `g-dot ${state}`, cx: 14, cy: 17, r: 4.5 }));
      const label = d.name || (n.id === home ? 'conversation' : d.snapshot_id ? 'fork' : 'sandbox');
      g.append(el('text', { class: 'g-title', x: 25, y: 21, 'data-max': NODE_W - 33 }, label));
      g.append(el('text', { class: 'g-sub', x: 10, y: 36 }, shortId(n.id)));
      g.append(el('text', { class: 'g-state', x: 10, y: 49 }, state));
      if (isCurrent) g.append(el('text', { class: 'g-tag', x: NODE_W - 8, y: 49, 'text-anchor': 'end' }, 'CURRENT'));
      else if (n.id === home) g.append(el('text', { class: 'g-tag', x: NODE_W - 8, y: 49, 'text-anchor': 'end' }, 'HOME'));
      title.textContent = `${d.name ? d.name + ' · ' : ''}${n.id} · ${state}${d.image ? ' · image ' + d.image : ''}`;
      if (state !== 'terminated' && onSelect) {
        g.setAttribute('tabindex', '0');
        g.setAttribute('role', 'button');
        g.setAttribute('aria-label', `Sandbox ${d.name || ''} ${n.id}, ${state}${isCurrent ? ', current' : ''}`);
        g.addEventListener('click', () => onSelect(n.id));
        g.addEventListener('keydown', (e) => {
          if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); onSelect(n.id); }
        });
      }
    } else {
      const type = d.type === 'filesystem' ? 'filesystem' : 'memory';
      g.setAttribute('class', `g-node snapshot ${type}`);
      g.setAttribute('role', 'img');
      g.append(el('rect', { width: NODE_W, height: n.h, rx: n.h / 2 }));
      g.append(el('text', { class: 'g-title', x: NODE_W / 2, y: 18, 'text-anchor': 'middle', 'data-max': NODE_W - 24 }, d.name || `${type} snapshot`));
      g.append(el('text', { class: 'g-sub', x: NODE_W / 2, y: 33, 'text-anchor': 'middle', 'data-max': NODE_W - 20 }, `${shortId(n.id)} · ${ago(d.created_at)}`));
      title.textContent = `${type} snapshot ${n.id}${d.name ? ' (' + d.name + ')' : ''}, taken ${d.created_at || ''}`;
      g.setAttribute('aria-label', title.textContent);
    }
    return g;
  };

  draw(root);
  // The SVG scales down to fit a narrow panel (its height follows the
  // viewBox), but not below a legible size: past that the panel scrolls.
  svg.style.maxWidth = '100%';
  svg.style.height = 'auto';
  svg.style.minWidth = `${Math.min(width, Math.round(width * 0.7))}px`;
  container.replaceChildren(svg);
  fitText(svg);
  return svg;
}
