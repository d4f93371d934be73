// Rendering what code produced: printed text, results (charts, DataFrame
// tables rebuilt from their table elements only, values), errors, CSV
// previews and the chart lightbox.

import { $, h, icon } from './dom.js';
import { duration } from './format.js';
import { el } from './state.js';
import { follow } from './views.js';

/** previewTable shows a CSV preview: the columns with their types, then the first rows. */
export function previewTable(p, { testid = 'csv-preview' } = {}) {
  const table = h('table', { class: 'html-table csv-table' },
    h('thead', {},
      h('tr', {}, p.columns.map((c) => h('th', { text: c }))),
      h('tr', { class: 'dtypes', 'data-testid': 'csv-dtypes' }, p.dtypes.map((t) => h('th', { class: `dtype dtype-${t}`, 'data-testid': 'csv-dtype', text: t })))),
    h('tbody', {}, p.head.map((r) => h('tr', {}, p.columns.map((_, j) => h('td', { text: r[j] ?? '' }))))));
  return h('div', { class: 'csv-preview', 'data-testid': testid },
    h('div', { class: 'out-table' }, table),
    h('div', { class: 'out-meta', text: `${p.columns.length} columns · first ${p.head.length} of ${p.rows >= 500 ? '500+' : p.rows} rows read` }));
}

const ALLOWED_TABLE_TAGS = new Set(['TABLE', 'THEAD', 'TBODY', 'TFOOT', 'TR', 'TH', 'TD', 'CAPTION']);

/** safeTable rebuilds an HTML result (a DataFrame) from its table elements only; other HTML is not shown. */
function safeTable(html) {
  // Styles are dropped before parsing: the page's CSP refuses inline ones
  // (and would log each), and the table is styled by app.css.
  const bare = String(html).replace(/<style[\s\S]*?<\/style>/gi, '').replace(/\sstyle\s*=\s*("[^"]*"|'[^']*'|[^\s>]+)/gi, '');
  const doc = new DOMParser().parseFromString(bare, 'text/html');
  const table = doc.querySelector('table');
  if (!table) return null;
  const copy = (src) => {
    const out = document.createElement(src.tagName.toLowerCase());
    for (const child of src.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) out.append(child.textContent);
      else if (child.nodeType === Node.ELEMENT_NODE && ALLOWED_TABLE_TAGS.has(child.tagName)) out.append(copy(child));
      else if (child.nodeType === Node.ELEMENT_NODE) out.append(child.textContent);
    }
    for (const a of ['colspan', 'rowspan']) if (src.hasAttribute(a)) out.setAttribute(a, src.getAttribute(a).replace(/\D/g, '').slice(0, 3));
    return out;
  };
  const t = copy(table);
  t.className = 'html-table';
  return t;
}

export function imageEl(src, alt, testid, cls = 'out-image') {
  const img = h('img', { class: cls, src, alt, 'data-testid': testid, loading: 'lazy', decoding: 'async' });
  img.addEventListener('load', follow, { once: true });
  return img;
}

let chartSeq = 0;

/** openLightbox shows an image full size, with a download link. */
function openLightbox(src, name, caption) {
  const img = $('lightbox-image');
  img.src = src;
  img.alt = caption || name;
  $('lightbox-caption').textContent = caption || name;
  const a = $('lightbox-download');
  a.href = src;
  a.download = name;
  if (typeof el.lightbox.showModal === 'function') el.lightbox.showModal();
  else el.lightbox.setAttribute('open', '');
}

/** chartFigure wraps an image with buttons to open it full size and download it. */
export function chartFigure(img, src, { name, caption, ext = 'png' } = {}) {
  const file = name || `chart-${++chartSeq}.${ext}`;
  const open = h('button', { class: 'icon-btn small', type: 'button', title: 'Open full size', 'aria-label': 'Open full size', 'data-testid': 'chart-open' }, icon('expand'));
  open.addEventListener('click', () => openLightbox(src, file, caption));
  img.addEventListener('click', () => openLightbox(src, file, caption));
  img.classList.add('zoomable');
  const dl = h('a', { class: 'icon-btn small', href: src, download: file, title: `Download ${file}`, 'aria-label': `Download ${file}`, 'data-testid': 'chart-download' }, icon('download'));
  return h('figure', { class: 'chart-figure' }, img,
    h('figcaption', {}, h('span', { class: 'chart-name', text: caption || file }), h('span', { class: 'chart-tools' }, open, dl)));
}

function renderResult(r) {
  if (!r || typeof r !== 'object') return null;
  if (r.png) {
    const src = `data:image/png;base64,${r.png}`;
    return chartFigure(imageEl(src, 'Chart drawn by the code', 'result-image'), src);
  }
  if (r.jpeg) return imageEl(`data:image/jpeg;base64,${r.jpeg}`, 'Image drawn by the code', 'result-image');
  if (r.svg) return imageEl(`data:image/svg+xml;charset=utf-8,${encodeURIComponent(r.svg)}`, 'Image drawn by the code', 'result-image');
  if (r.html) {
    const t = safeTable(r.html);
    if (t) return h('div', { class: 'out-table', 'data-testid': 'result-table' }, t);
  }
  let text = r.text ?? r.markdown ?? r.latex;
  if (text === undefined && r.json !== undefined) text = JSON.stringify(r.json, null, 2);
  if (text === undefined) return null;
  return h('pre', { class: 'out-text out-result', 'data-testid': 'result-text', text });
}

function renderError(e) {
  if (!e) return null;
  const tb = (e.traceback || []).join('\n');
  return h('div', { class: 'out-error', 'data-testid': 'output-error' },
    h('strong', { text: `${e.name || 'Error'}${e.value ? ': ' + e.value : ''}` }),
    tb ? h('pre', { text: tb }) : null);
}

/** renderExecution fills out with an Execution: printed text, results (charts, tables, values), error. */
export function renderExecution(out, exec) {
  out.replaceChildren();
  if (!exec) return;
  const stdout = (exec.logs && exec.logs.stdout || []).join('');
  const stderr = (exec.logs && exec.logs.stderr || []).join('');
  if (stdout) out.append(h('pre', { class: 'out-text out-stdout', 'data-testid': 'output-stdout', text: stdout }));
  if (stderr) out.append(h('pre', { class: 'out-text out-stderr', 'data-testid': 'output-stderr', text: stderr }));
  for (const r of exec.results || []) {
    const node = renderResult(r);
    if (node) out.append(node);
  }
  const err = renderError(exec.error);
  if (err) out.append(err);
}

/** liveOutput appends a piece of output while the code runs, merging consecutive text of one stream. */
export function liveOutput(out, type, payload) {
  if (type === 'stdout' || type === 'stderr') {
    const last = out.lastElementChild;
    if (last && last.dataset.stream === type) last.textContent += payload;
    else out.append(h('pre', { class: `out-text out-${type}`, 'data-stream': type, 'data-testid': `output-${type}`, text: payload }));
  } else if (type === 'result') {
    const node = renderResult(payload);
    if (node) out.append(node);
  } else if (type === 'error') {
    const node = renderError(payload);
    if (node) out.append(node);
  }
}

export function statusPill(kind, text) {
  return h('span', { class: `step-status ${kind}`, 'data-testid': 'step-status', text });
}

export function execStatus(exec) {
  if (!exec) return statusPill('failed', 'no result');
  if (exec.error) return statusPill('failed', exec.error.name || 'error');
  return statusPill('ok', duration(exec.duration_ms));
}
