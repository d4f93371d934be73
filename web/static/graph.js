// The snapshot tree of a sandbox, drawn as inline SVG: sandbox → its
// snapshots → the sandboxes started from them (forks) → their snapshots, …
// laid out as an indented outline that always fits its panel.

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

const SB_H = 46;
const SN_H = 34;
const GAP = 8;
const PAD = 6;
const INDENT = 18;

/**
 * forkLabels names each sandbox node: its own name, "conversation" for the
 * conversation's, else "fork-1", "fork-2", … by order among the sandboxes
 * started from the same sandbox's snapshots (its forks and restores), and
 * "sandbox" for a root without a name.
 */
export function forkLabels(root, home) {
  const labels = new Map();
  const walk = (n, nth) => {
    const d = n.data || {};
    labels.set(n.id, d.name || (n.id === home ? 'conversation' : nth ? `fork-${nth}` : 'sandbox'));
    let k = 0;
    for (const sn of n.children) for (const c of sn.children) walk(c, ++k);
  };
  walk(root, 0);
  return labels;
}

/**
 * layout places the tree as an indented outline that fits width: each node
 * is one row, children below their parent and indented, so the tree grows
 * down, never sideways; deep trees indent less.
 */
export function layout(root, width) {
  const rows = [];
  let depthMax = 0;
  const walk = (n, depth) => {
    n.depth = depth;
    depthMax = Math.max(depthMax, depth);
    rows.push(n);
    n.children.forEach((c) => walk(c, depth + 1));
  };
  walk(root, 0);
  const indent = Math.max(6, Math.min(INDENT, (width * 0.4) / Math.max(1, depthMax)));
  let y = PAD;
  for (const n of rows) {
    n.h = n.kind === 'sandbox' ? SB_H : SN_H;
    n.x = PAD + n.depth * indent;
    n.w = Math.max(60, width - n.x - PAD);
    n.y = y;
    y += n.h + GAP;
  }
  return { rows, height: y - GAP + PAD };
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

const observed = new WeakMap(); // container → {observer, last width, redraw}

/**
 * renderGraph draws root into container, as wide as the container (the
 * SVG's user units are CSS pixels, so labels keep their size at any
 * width; a resize redraws). current is the highlighted sandbox, home the
 * conversation's own; onSelect(id) is called when a sandbox node is chosen,
 * onSnapshot(id, data) when a snapshot node is.
 */
export function renderGraph(container, root, opts = {}) {
  const { current, home, onSelect, onSnapshot } = opts;
  const width = Math.max(200, Math.floor(container.clientWidth || 300));
  const { rows, height } = layout(root, width);
  const labels = forkLabels(root, home);
  const svg = el('svg', {
    width: '100%', viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'xMinYMin meet', role: 'group',
    'aria-label': 'Snapshot tree of the sandbox', 'data-testid': 'snapshot-graph-svg',
  });
  const edges = el('g', { class: 'g-edges' });
  const nodes = el('g', { class: 'g-nodes' });
  svg.append(edges, nodes);

  for (const n of rows) {
    for (const c of n.children) {
      const x = n.x + 10;
      edges.append(el('path', {
        class: `g-edge ${c.kind === 'sandbox' ? 'restore' : 'save'}`,
        d: `M${x},${n.y + n.h} V${c.y + c.h / 2} H${c.x}`,
        'data-testid': 'graph-edge',
      }));
    }
    nodes.append(node(n));
  }

  function node(n) {
    const d = n.data || {};
    const W = n.w;
    const g = el('g', { transform: `translate(${n.x},${n.y})`, 'data-testid': 'graph-node', 'data-kind': n.kind, 'data-id': n.id });
    const title = el('title');
    g.append(title);
    const activate = (fn) => {
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'button');
      g.addEventListener('click', fn);
      g.addEventListener('keydown', (e) => {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); fn(); }
      });
    };
    if (n.kind === 'sandbox') {
      const state = d.state || 'unknown';
      const isCurrent = n.id === current;
      const cls = ['g-node', 'sandbox', state];
      if (isCurrent) cls.push('current');
      if (state !== 'terminated' && onSelect) cls.push('clickable');
      g.setAttribute('class', cls.join(' '));
      g.setAttribute('data-state', state);
      if (isCurrent) g.setAttribute('data-current', 'true');
      const label = labels.get(n.id) || 'sandbox';
      g.setAttribute('data-label', label);
      g.append(el('rect', { width: W, height: n.h, rx: 9 }));
      g.append(el('circle', { class: `g-dot ${state}`, cx: 13, cy: 16, r: 4.5 }));
      const tag = isCurrent ? 'CURRENT' : n.id === home ? 'HOME' : '';
      if (tag) g.append(el('text', { class: 'g-tag', x: W - 8, y: 20, 'text-anchor': 'end' }, tag));
      g.append(el('text', { class: 'g-title', x: 24, y: 20, 'data-max': W - 32 - (tag ? 74 : 0) }, label));
      g.append(el('text', { class: 'g-sub', x: 10, y: 37, 'data-max': W - 20 }, `${shortId(n.id)} · ${state}`));
      title.textContent = `${label} · ${n.id} · ${state}${d.image ? ' · image ' + d.image : ''}`;
      if (state !== 'terminated' && onSelect) {
        g.setAttribute('aria-label', `Sandbox ${label} ${n.id}, ${state}${isCurrent ? ', current' : ''}`);
        activate(() => onSelect(n.id, label));
      }
    } else {
      const type = d.type === 'filesystem' ? 'filesystem' : 'memory';
      g.setAttribute('class', `g-node snapshot ${type}${onSnapshot ? ' clickable' : ''}`);
      g.append(el('rect', { width: W, height: n.h, rx: n.h / 2 }));
      g.append(el('text', { class: 'g-title', x: 14, y: 21, 'data-max': W - 28 },
        `${d.name || `${type} snapshot`} · ${shortId(n.id)} · ${ago(d.created_at)}`));
      title.textContent = `${type} snapshot ${n.id}${d.name ? ' (' + d.name + ')' : ''}, taken ${d.created_at || ''}`;
      g.setAttribute('aria-label', `${title.textContent}${onSnapshot ? ': start a sandbox from it' : ''}`);
      if (onSnapshot) activate(() => onSnapshot(n.id, d));
      else g.setAttribute('role', 'img');
    }
    return g;
  }

  svg.style.display = 'block';
  svg.style.height = 'auto';
  container.replaceChildren(svg);
  fitText(svg);

  // Redraw when the panel changes width (a drawer opening, a rotated phone).
  let o = observed.get(container);
  if (!o && typeof ResizeObserver === 'function') {
    o = { width, redraw: null, timer: 0 };
    o.observer = new ResizeObserver(() => {
      const w = Math.floor(container.clientWidth);
      if (!w || Math.abs(w - o.width) < 2 || !o.redraw) return;
      clearTimeout(o.timer);
      o.timer = setTimeout(() => o.redraw && o.redraw(), 60);
    });
    o.observer.observe(container);
    observed.set(container, o);
  }
  if (o) {
    o.width = width;
    o.redraw = () => { if (container.contains(svg)) renderGraph(container, root, opts); };
  }
  return svg;
}
