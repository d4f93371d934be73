// forkbox web UI: conversations, the chat (streamed over SSE), code cells
// that run directly in the conversation's sandbox, and the sandbox panel
// with its lifecycle actions and snapshot tree.

import { api, ApiError, getApiKey, setApiKey } from './api.js';
import { renderMarkdown } from './markdown.js';
import { buildTree, renderGraph, shortId } from './graph.js';
import { highlight } from './highlight.js';
import { previewCSV, isCSV } from './csv.js';

// ---------------------------------------------------------------- helpers

const $ = (id) => document.getElementById(id);

/** h builds an element: h('div', {class: 'x', 'data-testid': 'y'}, child, 'text'). */
function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on') && typeof v === 'function') e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function icon(name) {
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('class', 'icon');
  svg.setAttribute('aria-hidden', 'true');
  const use = document.createElementNS('http://www.w3.org/2000/svg', 'use');
  use.setAttribute('href', `#i-${name}`);
  svg.append(use);
  return svg;
}

function timeAgo(t) {
  const ms = new Date(t).getTime();
  if (!isFinite(ms)) return '';
  const s = (Date.now() - ms) / 1000;
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.max(1, Math.round(s / 60))} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  if (s < 7 * 86400) return `${Math.round(s / 86400)} d ago`;
  return new Date(ms).toLocaleDateString(undefined, { month: 'short', day: 'numeric', year: 'numeric' });
}

function bytes(n) {
  if (!isFinite(n) || n <= 0) return '0 B';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  const i = Math.min(u.length - 1, Math.floor(Math.log(n) / Math.log(1024)));
  return `${(n / 1024 ** i).toFixed(i ? 1 : 0)} ${u[i]}`;
}

function duration(ms) {
  if (!isFinite(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

const fmtInt = (n) => Number(n || 0).toLocaleString();

/** copyText puts text on the clipboard (the Clipboard API, else a hidden textarea). */
async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch { /* fall back below */ }
  const t = h('textarea', { class: 'visually-hidden', 'aria-hidden': 'true' });
  t.value = text;
  document.body.append(t);
  t.select();
  let ok = false;
  try { ok = document.execCommand('copy'); } catch { ok = false; }
  t.remove();
  return ok;
}

/** copyButton is a small button that copies text() and says so. */
function copyButton(text, { label = 'Copy', testid = 'copy-button', cls = 'icon-btn small' } = {}) {
  const b = h('button', { class: cls, type: 'button', title: label, 'aria-label': label, 'data-testid': testid }, icon('copy'));
  b.addEventListener('click', async (e) => {
    e.stopPropagation();
    const ok = await copyText(typeof text === 'function' ? text() : text);
    b.dataset.copied = ok ? 'true' : 'false';
    toast(ok ? 'Copied' : 'Could not copy: select the text instead', ok ? '' : 'error');
  });
  return b;
}

/** saveBlob has the browser download blob as name. */
function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 30000);
}

function blobToDataURL(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(r.error);
    r.readAsDataURL(blob);
  });
}

/** previewTable shows a CSV preview: the columns with their types, then the first rows. */
function previewTable(p, { testid = 'csv-preview' } = {}) {
  const table = h('table', { class: 'html-table csv-table' },
    h('thead', {},
      h('tr', {}, p.columns.map((c) => h('th', { text: c }))),
      h('tr', { class: 'dtypes', 'data-testid': 'csv-dtypes' }, p.dtypes.map((t) => h('th', { class: `dtype dtype-${t}`, 'data-testid': 'csv-dtype', text: t })))),
    h('tbody', {}, p.head.map((r) => h('tr', {}, p.columns.map((_, j) => h('td', { text: r[j] ?? '' }))))));
  return h('div', { class: 'csv-preview', 'data-testid': testid },
    h('div', { class: 'out-table' }, table),
    h('div', { class: 'out-meta', text: `${p.columns.length} columns · first ${p.head.length} of ${p.rows >= 500 ? '500+' : p.rows} rows read` }));
}
const isNarrow = (px) => window.matchMedia(`(max-width: ${px}px)`).matches;

// ---------------------------------------------------------------- state

const state = {
  conversations: [],
  conv: null,        // the selected conversation (null: a new one, not created yet)
  focus: '',         // the sandbox shown in the panel; code cells run there
  sandbox: null,     // the focused sandbox as last fetched
  pending: [],       // files for the next question: {file, status, uploaded, error, el, promise}
  mode: 'chat',
  streaming: new Set(), // conversation ids (or '' for a new one) with a question in flight
  codeBusy: false,
  actionBusy: false,
  threads: new Map(), // conversation id ('' for new) → its chat thread element
  cells: new Map(),   // conversation id ('' for new) → its code cells element
  cellHistory: [],
  historyAt: -1,
  running: null,      // the code cell running now: {view, sandbox, contextId}
  chatAborts: new Map(), // conversation id ('' for new) → aborts its answer being streamed
  chatOff: '',        // why chat is unavailable ('' when it is, or not known)
  filesPath: '/workspace',
  filesOf: '',        // the sandbox the file list shows
};

const el = {
  sidebar: $('sidebar'), panel: $('panel'), backdrop: $('backdrop'),
  convList: $('conversation-list'), convEmpty: $('conversation-empty'),
  title: $('conversation-title'), sub: $('conversation-sub'),
  banners: $('banners'), toasts: $('toasts'),
  chatView: $('chat-view'), codeView: $('code-view'),
  tabChat: $('tab-chat'), tabCode: $('tab-code'),
  messages: $('messages'), chatEmpty: $('chat-empty'), chatScroller: $('chat-scroller'),
  cells: $('cells'), codeEmpty: $('code-empty'), codeScroller: $('code-scroller'),
  composer: $('composer'), question: $('question'), send: $('send-button'),
  attach: $('attach-button'), fileInput: $('file-input'), attachments: $('attachments'),
  drop: $('drop-overlay'),
  codeForm: $('code-form'), codeInput: $('code-input'), run: $('run-button'), codeTarget: $('code-target'),
  sbNone: $('sandbox-none'), sbInfo: $('sandbox-info'), sbName: $('sandbox-name'), sbId: $('sandbox-id'),
  sbState: $('sandbox-state'), sbFacts: $('sandbox-facts'), focusNote: $('focus-note'),
  sbPorts: $('sandbox-ports'), sbPortList: $('sandbox-port-list'),
  actions: $('sandbox-actions'), graph: $('graph'), panelDot: $('toggle-panel-dot'),
  filesCard: $('files-card'), fileList: $('file-list'), filesPath: $('files-path'), filePreview: $('file-preview'),
  filesInput: $('files-input'), stopAnswer: $('stop-answer'), chatOff: $('chat-off'),
  forkDialog: $('fork-dialog'), forkCount: $('fork-count'), forkNames: $('fork-names'),
  restoreDialog: $('restore-dialog'), lightbox: $('lightbox'),
  keyDialog: $('key-dialog'), keyInput: $('key-input'),
};

const convKey = () => (state.conv ? state.conv.id : '');
const homeSandbox = () => (state.conv ? state.conv.sandbox : '');

// ---------------------------------------------------------------- banners, toasts, errors

function banner({ title, message, kind = 'error', actions = [] }) {
  for (const b of el.banners.children) {
    if (b.dataset.message === `${title}|${message}`) b.remove();
  }
  const close = h('button', { class: 'icon-btn', type: 'button', 'aria-label': 'Dismiss' }, icon('x'));
  const b = h('div', { class: `banner ${kind}`, role: 'alert', 'data-testid': 'error-banner', 'data-kind': kind },
    h('div', { class: 'banner-body' },
      h('strong', { text: title }),
      h('span', { 'data-testid': 'error-message', text: message }),
      actions.length ? h('div', { class: 'banner-actions' },
        actions.map((a) => h('button', {
          class: 'btn', type: 'button', 'data-testid': a.testid,
          onclick: () => { a.onClick(); b.remove(); },
        }, a.label))) : null),
    close);
  b.dataset.message = `${title}|${message}`;
  close.addEventListener('click', () => b.remove());
  el.banners.append(b);
  while (el.banners.children.length > 3) el.banners.firstElementChild.remove();
  return b;
}

function clearBanners() { el.banners.replaceChildren(); }

function toast(message, kind = '') {
  const t = h('div', { class: `toast ${kind}`, role: 'status', 'data-testid': 'toast', text: message });
  // On a phone the toasts sit just above the question or code box, not over it.
  const box = state.mode === 'chat' ? el.composer : el.codeForm;
  const top = isNarrow(759) && box ? box.getBoundingClientRect().top : 0;
  el.toasts.style.bottom = top > 0 && top < window.innerHeight ? `${Math.round(window.innerHeight - top + 6)}px` : '';
  el.toasts.append(t);
  while (el.toasts.children.length > 4) el.toasts.firstElementChild.remove();
  setTimeout(() => t.remove(), kind === 'error' ? 6000 : 3500);
}

/** showError explains a failed call in a banner, with what to do about it. */
function showError(err, context = '') {
  if (err && err.name === 'AbortError') return;
  const status = err instanceof ApiError ? err.status : 0;
  const message = (err && err.message) || String(err);
  if (status === 401) {
    banner({ title: 'API key needed', message, kind: 'warn', actions: [{ label: 'Enter API key', testid: 'banner-api-key', onClick: openKeyDialog }] });
    openKeyDialog();
    return;
  }
  if (status === 503 && isImageBuilding(err)) {
    banner({ title: 'The image is still being built', message, kind: 'warn' });
    checkHealth();
    return;
  }
  if (status === 503 && context === 'chat') {
    setChatOff(message);
    return;
  }
  const titles = { chat: 'The question failed', code: 'Could not run the cell', upload: 'Upload refused', action: 'Sandbox action failed', load: 'Could not load' };
  banner({ title: titles[context] || 'Something went wrong', message });
}

const isImageBuilding = (err) => /being built|building/i.test((err && err.message) || '');

// ---------------------------------------------------------------- daemon health: images, chat

const MODEL_ENV = [
  'OPENAI_API_KEY=sk-… FORKBOX_MODEL=gpt-4o-mini',
  'ANTHROPIC_API_KEY=sk-ant-… FORKBOX_MODEL=claude-sonnet-4-5',
  'OPENAI_BASE_URL=http://localhost:11434/v1 FORKBOX_MODEL=qwen2.5',
];

/** setChatOff says once, above the composer, that chat has no model and how to give it one; the input is disabled. */
function setChatOff(why) {
  if (state.chatOff) return;
  state.chatOff = why || 'No model is configured.';
  const lines = MODEL_ENV.map((l) => h('li', {},
    h('code', { 'data-testid': 'model-env', text: l }),
    copyButton(l, { label: `Copy ${l.split('=')[0]}`, testid: 'model-env-copy' })));
  el.chatOff.replaceChildren(
    h('div', { class: 'chat-off-text' },
      h('strong', { text: 'Chat is unavailable: the daemon has no model.' }),
      h('p', { class: 'chat-off-why', 'data-testid': 'chat-off-why', text: state.chatOff }),
      h('p', { text: 'Start forkbox serve with one of these in its environment, then reload:' }),
      h('ul', { class: 'env-lines' }, lines),
      h('div', { class: 'chat-off-actions' },
        copyButton(MODEL_ENV.join('\n'), { label: 'Copy all', testid: 'model-env-copy-all', cls: 'btn' }),
        h('button', { class: 'btn', type: 'button', 'data-testid': 'chat-off-use-code', onclick: () => setMode('code') }, icon('code'), 'Use code cells'))));
  el.chatOff.querySelector('[data-testid="model-env-copy-all"]').append(' Copy all');
  el.chatOff.hidden = false;
  el.question.disabled = true;
  el.question.placeholder = 'Chat needs a model (see above); code cells work without one.';
  updateComposer();
}

let healthTimer = 0;
let imageBanner = null;

/** checkHealth reads /healthz: chat readiness once, and an image build's progress every 2 s until it is ready. */
async function checkHealth() {
  clearTimeout(healthTimer);
  const hz = await api.health();
  if (!hz) return;
  if (hz.chat && typeof hz.chat.ready === 'boolean' && !hz.chat.ready) setChatOff(hz.chat.why);
  const images = Array.isArray(hz.images) ? hz.images : [];
  const building = images.filter((i) => i.state === 'building');
  const failed = images.filter((i) => i.state === 'failed');
  if (building.length) {
    const text = building.map((i) => `Building image ${i.name}${i.steps ? `: step ${i.step || 0} of ${i.steps}` : ''}…`).join(' ');
    if (!imageBanner || !imageBanner.isConnected) {
      imageBanner = h('div', { class: 'banner warn image-banner', role: 'status', 'data-testid': 'image-banner' },
        h('div', { class: 'banner-body' }, h('strong', { text: 'Preparing the sandbox image' }), h('span', { 'data-testid': 'image-banner-text' })));
      el.banners.prepend(imageBanner);
    }
    imageBanner.querySelector('[data-testid="image-banner-text"]').textContent = `${text} Sandboxes can start once it is ready.`;
    healthTimer = setTimeout(checkHealth, 2000);
  } else if (imageBanner) {
    imageBanner.remove();
    imageBanner = null;
    if (!failed.length) toast('The sandbox image is ready');
  }
  for (const f of failed) banner({ title: `Image ${f.name} failed to build`, message: f.error || 'see the daemon log' });
}

// ---------------------------------------------------------------- drawers and tabs

function setDrawer(which, open) {
  const node = which === 'sidebar' ? el.sidebar : el.panel;
  const toggle = which === 'sidebar' ? $('toggle-sidebar') : $('toggle-panel');
  node.classList.toggle('open', open);
  toggle.setAttribute('aria-expanded', String(open));
  const other = which === 'sidebar' ? el.panel : el.sidebar;
  if (open) other.classList.remove('open');
  el.backdrop.hidden = !(el.sidebar.classList.contains('open') || el.panel.classList.contains('open'));
  if (open) {
    const first = node.querySelector('button, [href]');
    if (first) setTimeout(() => first.focus({ preventScroll: true }), 50);
  }
}

function closeDrawers() {
  setDrawer('sidebar', false);
  setDrawer('panel', false);
}

function setMode(mode) {
  state.mode = mode;
  const chat = mode === 'chat';
  el.tabChat.setAttribute('aria-selected', String(chat));
  el.tabCode.setAttribute('aria-selected', String(!chat));
  el.tabChat.tabIndex = chat ? 0 : -1;
  el.tabCode.tabIndex = chat ? -1 : 0;
  el.chatView.hidden = !chat;
  el.codeView.hidden = chat;
  document.body.dataset.mode = mode;
  (chat ? el.question : el.codeInput).focus({ preventScroll: true });
  scrollToEnd(chat ? el.chatScroller : el.codeScroller, true);
}

// ---------------------------------------------------------------- scrolling

const pinned = new WeakMap(); // scroller → whether it follows new content
for (const s of [$('chat-scroller'), $('code-scroller')]) {
  pinned.set(s, true);
  s.addEventListener('scroll', () => pinned.set(s, s.scrollHeight - s.scrollTop - s.clientHeight < 80), { passive: true });
}
function scrollToEnd(scroller, force = false) {
  if (!force && !pinned.get(scroller)) return;
  requestAnimationFrame(() => { scroller.scrollTop = scroller.scrollHeight; pinned.set(scroller, true); });
}
const follow = () => scrollToEnd(el.chatScroller);

// ---------------------------------------------------------------- conversations

async function loadConversations() {
  try {
    const list = await api.listConversations();
    state.conversations = (list && list.conversations) || [];
  } catch (err) {
    showError(err, 'load');
  }
  renderConversations();
}

function renderConversations() {
  const items = state.conversations.map((c) => {
    const del = h('button', {
      class: 'icon-btn conv-delete', type: 'button', 'aria-label': `Delete conversation ${c.title || c.id}`,
      'data-testid': 'conversation-delete', title: 'Delete',
    }, icon('trash'));
    let timer = 0;
    del.addEventListener('click', async (e) => {
      e.stopPropagation();
      if (!del.classList.contains('confirming')) {
        del.classList.add('confirming');
        del.setAttribute('aria-label', 'Click again to delete');
        del.title = 'Click again to delete';
        timer = setTimeout(() => { del.classList.remove('confirming'); del.title = 'Delete'; }, 3000);
        return;
      }
      clearTimeout(timer);
      try {
        await api.deleteConversation(c.id);
        toast('Conversation deleted');
        if (state.conv && state.conv.id === c.id) newConversation();
        state.threads.delete(c.id);
        state.cells.delete(c.id);
        await loadConversations();
      } catch (err) { showError(err, 'action'); }
    });
    const active = state.conv && state.conv.id === c.id;
    return h('li', { class: `conv-item${active ? ' active' : ''}`, 'data-testid': 'conversation-item', 'data-id': c.id },
      h('button', {
        class: 'conv-link', type: 'button', 'aria-current': active ? 'page' : null,
        onclick: () => selectConversation(c.id),
      },
      h('span', { class: 'conv-title', text: c.title || 'Untitled conversation' }),
      h('span', { class: 'conv-time', text: timeAgo(c.updated_at || c.created_at) })),
      del);
  });
  el.convList.replaceChildren(...items);
  el.convEmpty.hidden = items.length > 0;
}

function renderHeader() {
  const c = state.conv;
  el.title.textContent = c ? (c.title || 'Untitled conversation') : 'New conversation';
  el.sub.textContent = c ? `${c.sandbox_name || shortId(c.sandbox)} · started ${timeAgo(c.created_at)}` : 'Ask a question or run code to start';
  document.title = c && c.title ? `${c.title} · forkbox` : 'forkbox';
}

function threadFor(key) {
  if (!state.threads.has(key)) state.threads.set(key, h('div', { class: 'thread-conv', 'data-conversation': key }));
  return state.threads.get(key);
}
function cellsFor(key) {
  if (!state.cells.has(key)) state.cells.set(key, h('div', { class: 'cells-conv', 'data-conversation': key }));
  return state.cells.get(key);
}

function showThreads() {
  const key = convKey();
  const thread = threadFor(key);
  const cells = cellsFor(key);
  for (const c of [...el.messages.children]) if (c !== el.chatEmpty) c.remove();
  for (const c of [...el.cells.children]) if (c !== el.codeEmpty) c.remove();
  el.messages.append(thread);
  el.cells.append(cells);
  updateEmpty();
  updateComposer();
  scrollToEnd(el.chatScroller, true);
  scrollToEnd(el.codeScroller, true);
}

function updateEmpty() {
  el.chatEmpty.hidden = threadFor(convKey()).childElementCount > 0;
  el.codeEmpty.hidden = cellsFor(convKey()).childElementCount > 0;
}

function newConversation() {
  state.conv = null;
  state.threads.set('', h('div', { class: 'thread-conv', 'data-conversation': '' }));
  state.cells.set('', h('div', { class: 'cells-conv', 'data-conversation': '' }));
  history.replaceState(null, '', location.pathname);
  clearBanners();
  renderHeader();
  renderConversations();
  showThreads();
  refreshFiles();
  setFocus('');
  if (isNarrow(759)) setDrawer('sidebar', false);
  (state.mode === 'chat' ? el.question : el.codeInput).focus({ preventScroll: true });
}

async function selectConversation(id) {
  if (isNarrow(759)) setDrawer('sidebar', false);
  const prev = state.conv;
  const known = state.conversations.find((c) => c.id === id);
  state.conv = known ? { ...known } : { id, title: '', sandbox: '' };
  history.replaceState(null, '', `#c=${encodeURIComponent(id)}`);
  clearBanners();
  renderHeader();
  renderConversations();
  if (!prev || prev.id !== id) showThreads();
  if (state.streaming.has(id)) return; // its thread is live already
  try {
    const conv = await api.getConversation(id);
    if (!state.conv || state.conv.id !== id) return; // another one was chosen meanwhile
    state.conv = conv;
    renderHeader();
    const thread = threadFor(id);
    if (!state.streaming.has(id)) {
      thread.replaceChildren(...(conv.turns || []).flatMap(renderTurn));
    }
    showThreads();
    setFocus(conv.sandbox);
    loadCells(conv);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      toast('That conversation no longer exists', 'error');
      newConversation();
      loadConversations();
      return;
    }
    showError(err, 'load');
  }
}

/** ensureConversation creates the conversation (and its sandbox) if none is selected. */
async function ensureConversation(title = '') {
  if (state.conv) return state.conv;
  const conv = await api.createConversation(title);
  adoptConversation(conv);
  loadConversations();
  return conv;
}

/** adoptConversation makes a just-created conversation the selected one, keeping what was shown. */
function adoptConversation(conv) {
  const draftThread = state.threads.get('');
  const draftCells = state.cells.get('');
  if (draftThread) { draftThread.dataset.conversation = conv.id; state.threads.set(conv.id, draftThread); state.threads.delete(''); }
  if (draftCells) { draftCells.dataset.conversation = conv.id; state.cells.set(conv.id, draftCells); state.cells.delete(''); }
  if (state.streaming.delete('')) state.streaming.add(conv.id);
  state.conv = { ...conv };
  history.replaceState(null, '', `#c=${encodeURIComponent(conv.id)}`);
  renderHeader();
  setFocus(conv.sandbox);
}

// ---------------------------------------------------------------- rendering code output

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

function imageEl(src, alt, testid, cls = 'out-image') {
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
function chartFigure(img, src, { name, caption, ext = 'png' } = {}) {
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
function renderExecution(out, exec) {
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
function liveOutput(out, type, payload) {
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

function statusPill(kind, text) {
  return h('span', { class: `step-status ${kind}`, 'data-testid': 'step-status', text });
}

function execStatus(exec) {
  if (!exec) return statusPill('failed', 'no result');
  if (exec.error) return statusPill('failed', exec.error.name || 'error');
  return statusPill('ok', duration(exec.duration_ms));
}

// ---------------------------------------------------------------- chat messages

function fileChip(f, { removable = false, onRemove } = {}) {
  const meta = f.columns && f.columns.length
    ? `${fmtInt(f.rows)} rows · ${f.columns.length} columns: ${f.columns.join(', ')}`
    : bytes(f.size_bytes);
  return h('span', { class: 'file-chip', 'data-testid': 'file-chip', 'data-status': 'ready', title: meta },
    icon('table'),
    h('span', { class: 'file-chip-text' },
      h('span', { class: 'file-chip-name', text: f.name }),
      h('span', { class: 'file-chip-meta', text: meta })),
    removable ? h('button', { class: 'icon-btn', type: 'button', 'aria-label': `Remove ${f.name}`, onclick: onRemove }, icon('x')) : null);
}

function userMessage(question, files = []) {
  const previews = files.filter((f) => f.preview && f.preview.columns.length).map((f) =>
    h('details', { class: 'csv-details', open: true, 'data-testid': 'chat-csv-preview' },
      h('summary', { text: `${f.name}: first rows and column types` }),
      previewTable(f.preview)));
  return h('div', { class: 'msg msg-user', 'data-testid': 'user-message' },
    files.length ? h('div', { class: 'file-chips' }, files.map((f) => fileChip(f))) : null,
    previews.length ? h('div', { class: 'csv-previews' }, previews) : null,
    h('div', { class: 'bubble', text: question }));
}

function assistantShell() {
  const status = h('span', { class: 'msg-status', 'data-testid': 'assistant-status' });
  const body = h('div', { class: 'msg-body' });
  const root = h('div', { class: 'msg msg-assistant', 'data-testid': 'assistant-message', 'data-state': 'done' },
    h('div', { class: 'assistant-head' }, h('span', { class: 'avatar' }, icon('box')), h('span', { text: 'forkbox' }), status),
    body);
  return { root, body, status };
}

function stepView(index, code, round) {
  const status = statusPill('running', 'running…');
  const out = h('div', { class: 'output', 'data-testid': 'step-output' });
  const firstLine = (code || '').split('\n').find((l) => l.trim() && !l.trim().startsWith('#')) || code || '';
  const details = h('details', { class: 'step', 'data-testid': 'step', 'data-round': round || '' },
    h('summary', {},
      h('span', { class: 'step-label', text: `Step ${index}` }),
      h('span', { class: 'step-preview', text: firstLine.trim() }),
      status),
    h('div', { class: 'step-body' },
      h('pre', { class: 'code-block', 'data-testid': 'step-code' }, h('code', { text: code || '' })),
      out));
  return { details, out, status, setStatus(node) { status.replaceWith(node); this.status = node; } };
}

function chartsView(images) {
  if (!images || !images.length) return null;
  return h('div', { class: 'charts', 'data-testid': 'charts' },
    images.map((img, i) => {
      const src = `data:image/png;base64,${img.png_base64}`;
      const name = (img.file_name || `chart-${i + 1}.png`).replace(/^.*\//, '');
      return chartFigure(imageEl(src, `Chart ${i + 1}: ${img.file_name || 'chart'}`, 'chart-image', 'chart'), src,
        { name: /\.png$/i.test(name) ? name : `${name}.png`, caption: img.file_name || `chart-${i + 1}.png` });
    }));
}

function answerView(text) {
  const div = h('div', { class: 'md msg-text', 'data-testid': 'answer' });
  div.innerHTML = renderMarkdown(text); // renderMarkdown escapes everything it does not format
  return div;
}

/** renderTurn renders a stored turn: the question, then steps, answer, charts and error. */
function renderTurn(turn) {
  const a = assistantShell();
  (turn.steps || []).forEach((s, i) => {
    const v = stepView(i + 1, s.code);
    renderExecution(v.out, s.execution);
    v.setStatus(execStatus(s.execution));
    a.body.append(v.details);
  });
  if (turn.answer) a.body.append(answerView(turn.answer));
  const charts = chartsView(turn.images);
  if (charts) a.body.append(charts);
  if (turn.error) a.body.append(h('div', { class: 'msg-error', 'data-testid': 'assistant-error', text: turn.error }));
  const n = (turn.steps || []).length;
  a.status.textContent = `${timeAgo(turn.created_at)}${n ? ` · ${n} step${n > 1 ? 's' : ''}` : ''}`;
  return [userMessage(turn.question), a.root];
}

/** LiveAnswer renders one answer as its SSE events arrive. */
class LiveAnswer {
  constructor(onConversation) {
    const a = assistantShell();
    this.root = a.root;
    this.body = a.body;
    this.status = a.status;
    this.root.dataset.state = 'streaming';
    this.onConversation = onConversation;
    this.steps = new Map();
    this.stepCount = 0;
    this.text = null;   // the text segment being streamed: {div, raw}
    this.answered = false;
    this.finished = false;
    this.textEvents = 0;
    this.thinking = h('div', { class: 'thinking', 'aria-label': 'Thinking' }, h('span'), h('span'), h('span'));
    this.body.append(this.thinking);
    this.status.textContent = 'thinking…';
    this.frame = 0;
  }

  append(node) {
    this.thinking.remove();
    this.body.append(node);
    follow();
  }

  textSegment() {
    if (!this.text) {
      const div = h('div', { class: 'md msg-text streaming', 'data-testid': 'assistant-text' });
      this.text = { div, raw: '' };
      this.append(div);
    }
    return this.text;
  }

  closeText() {
    if (this.text) {
      this.text.div.classList.remove('streaming');
      this.text.div.innerHTML = renderMarkdown(this.text.raw);
    }
    this.text = null;
  }

  renderText() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      if (this.text) this.text.div.innerHTML = renderMarkdown(this.text.raw);
      follow();
    });
  }

  handle(name, d) {
    d = d || {};
    switch (name) {
      case 'conversation':
        this.onConversation(d);
        break;
      case 'text': {
        const seg = this.textSegment();
        seg.raw += d.text || '';
        this.textEvents++;
        this.root.dataset.streamed = 'true';
        this.root.dataset.textEvents = String(this.textEvents);
        this.status.textContent = 'writing…';
        this.renderText();
        break;
      }
      case 'tool_call': {
        this.closeText();
        const v = stepView(++this.stepCount, d.code, d.round);
        this.steps.set(d.call_id || `#${this.stepCount}`, v);
        this.lastStep = v;
        this.append(v.details);
        this.status.textContent = 'running code…';
        break;
      }
      case 'tool_error':
        this.closeText();
        this.append(h('div', { class: 'note', 'data-testid': 'tool-error', text: `The model's tool call was malformed (${d.error || 'unknown problem'}); it was told so and tried again.` }));
        break;
      case 'output': {
        const v = this.steps.get(d.call_id) || this.lastStep;
        const o = d.output || {};
        if (v) {
          liveOutput(v.out, o.type, o.type === 'result' ? o.result : o.type === 'error' ? o.error : o.text || '');
          follow();
        }
        break;
      }
      case 'execution': {
        let v = this.steps.get(d.call_id) || this.lastStep;
        if (!v) { // an execution without its call: show it anyway
          v = stepView(++this.stepCount, d.code, d.round);
          this.append(v.details);
        }
        renderExecution(v.out, d.execution);
        v.setStatus(execStatus(d.execution));
        this.status.textContent = 'thinking…';
        follow();
        break;
      }
      case 'answer':
        this.showAnswer(d.text || '', d.images || []);
        break;
      case 'done':
      case 'json':
        this.finish(d);
        break;
      case 'error':
        this.fail(d.message || d.error || 'the answer failed', d.code);
        break;
      default:
        break;
    }
  }

  showAnswer(text, images) {
    if (this.answered) return;
    this.answered = true;
    const seg = this.text;
    if (seg) {
      seg.raw = text || seg.raw;
      this.closeText();
      seg.div.dataset.testid = 'answer';
    } else if (text) {
      this.append(answerView(text));
    }
    const charts = chartsView(images);
    if (charts) this.append(charts);
  }

  finish(resp) {
    if (this.finished) return;
    if (resp && resp.conversation_id) this.onConversation({ conversation_id: resp.conversation_id, sandbox: resp.sandbox });
    if (!this.stepCount && resp && resp.steps) {
      for (const s of resp.steps) {
        const v = stepView(++this.stepCount, s.code);
        renderExecution(v.out, s.execution);
        v.setStatus(execStatus(s.execution));
        this.append(v.details);
      }
    }
    if (!this.answered) this.showAnswer((resp && resp.answer) || '', (resp && resp.images) || []);
    this.closeText();
    if (resp && resp.truncated) {
      this.append(h('div', { class: 'truncated-note', text: `Stopped after ${resp.rounds} tool rounds; the answer is built from what had been computed.` }));
    }
    this.thinking.remove();
    this.finished = true;
    this.root.dataset.state = 'done';
    const n = this.stepCount;
    this.status.textContent = `just now${n ? ` · ${n} step${n > 1 ? 's' : ''}` : ''}`;
  }

  /** endSteps marks the steps still running as ended with why. */
  endSteps(why) {
    for (const v of this.steps.values()) {
      if (v.status && v.status.classList.contains('running')) v.setStatus(statusPill('failed', why));
    }
  }

  stop() {
    if (this.finished) return;
    this.endSteps('stopped');
    this.closeText();
    this.thinking.remove();
    this.body.append(h('div', { class: 'note', 'data-testid': 'assistant-stopped', text: 'Stopped. The model\'s turn was cancelled.' }));
    this.finished = true;
    this.root.dataset.state = 'stopped';
    this.status.textContent = 'stopped';
    follow();
  }

  fail(message, code) {
    this.endSteps('failed');
    this.closeText();
    this.thinking.remove();
    this.body.append(h('div', { class: 'msg-error', 'data-testid': 'assistant-error', text: message }));
    this.finished = true;
    this.root.dataset.state = 'error';
    if (code) this.root.dataset.errorCode = code;
    this.status.textContent = 'failed';
    follow();
  }
}

// ---------------------------------------------------------------- composer and uploads

function autosize(t) {
  t.style.height = 'auto';
  t.style.height = `${Math.min(t.scrollHeight, t.classList.contains('mono') ? 320 : 200)}px`;
}

function renderPending() {
  el.attachments.replaceChildren(...state.pending.map((p) => p.el));
  el.attachments.hidden = state.pending.length === 0;
}

function pendingChip(p) {
  const remove = () => {
    state.pending = state.pending.filter((x) => x !== p);
    renderPending();
  };
  if (p.status === 'ready') {
    const chip = fileChip(p.uploaded, { removable: true, onRemove: remove });
    return chip;
  }
  const meta = p.status === 'uploading' ? `Uploading · ${bytes(p.file.size)}` : p.error;
  return h('span', { class: `file-chip ${p.status}`, 'data-testid': 'file-chip', 'data-status': p.status, title: meta },
    icon('table'),
    h('span', { class: 'file-chip-text' },
      h('span', { class: 'file-chip-name', text: p.file.name }),
      h('span', { class: 'file-chip-meta', text: meta })),
    h('button', { class: 'icon-btn', type: 'button', 'aria-label': `Remove ${p.file.name}`, onclick: remove }, icon('x')));
}

function addFiles(fileList) {
  const files = [...fileList];
  if (!files.length) return;
  setMode('chat');
  for (const file of files) {
    const p = { file, status: 'uploading' };
    p.el = pendingChip(p);
    state.pending.push(p);
    // The CSV's head and column types, read here from the file's start.
    if (isCSV(file.name, file.type)) {
      p.parsed = file.slice(0, 256 * 1024).text()
        .then((text) => { p.preview = previewCSV(text, { complete: file.size <= 256 * 1024 }); })
        .catch(() => {});
    }
    const convAtUpload = convKey();
    p.promise = api.upload(file, state.conv ? state.conv.id : '').then((uploaded) => {
      p.status = 'ready';
      p.uploaded = uploaded;
      if (convKey() === convAtUpload) refreshFiles();
    }, (err) => {
      p.status = 'failed';
      p.error = err.message;
      showError(err, 'upload');
    }).finally(() => {
      const fresh = pendingChip(p);
      p.el.replaceWith(fresh);
      p.el = fresh;
      if (p.status === 'failed') setTimeout(() => { if (state.pending.includes(p)) { state.pending = state.pending.filter((x) => x !== p); renderPending(); } }, 8000);
    });
  }
  renderPending();
  el.question.focus({ preventScroll: true });
}

// ---------------------------------------------------------------- the /workspace browser

const TEXT_EXT = /\.(txt|md|py|json|ya?ml|toml|ini|cfg|log|sh|js|ts|html|css|xml|sql|r|ipynb|tsv|csv)$/i;
const IMAGE_EXT = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml' };
const PREVIEW_MAX = 256 * 1024;
let filesSeq = 0;

const parentOf = (p) => (p === '/' ? '/' : p.replace(/\/[^/]+\/?$/, '') || '/');
const joinPath = (dir, name) => `${dir.replace(/\/+$/, '')}/${name}`;

/** refreshFiles lists the shown folder of the shown sandbox. */
async function refreshFiles() {
  const id = state.focus || homeSandbox();
  const seq = ++filesSeq;
  if (state.filesOf !== id) {
    state.filesOf = id;
    state.filesPath = '/workspace';
    el.filePreview.hidden = true;
  }
  el.filesPath.textContent = state.filesPath;
  $('files-up').disabled = state.filesPath === '/workspace' || state.filesPath === '/';
  $('files-upload').disabled = !id;
  if (!id) {
    el.fileList.replaceChildren(h('li', { class: 'muted file-empty', text: 'The sandbox\'s files show here once it exists.' }));
    return;
  }
  if (state.sandbox && state.sandbox.id === id && state.sandbox.state === 'terminated') {
    el.fileList.replaceChildren(h('li', { class: 'muted file-empty', text: 'The sandbox is terminated.' }));
    return;
  }
  try {
    const res = await api.listFiles(id, state.filesPath);
    if (seq !== filesSeq) return;
    const entries = ((res && res.entries) || []).slice().sort((x, y) =>
      (x.type === 'dir' ? 0 : 1) - (y.type === 'dir' ? 0 : 1) || x.name.localeCompare(y.name));
    if (!entries.length) {
      el.fileList.replaceChildren(h('li', { class: 'muted file-empty', 'data-testid': 'files-empty', text: 'No files here yet. Upload one, or write files from code.' }));
      return;
    }
    el.fileList.replaceChildren(...entries.map((e) => fileRow(id, e)));
  } catch (err) {
    if (seq !== filesSeq) return;
    el.fileList.replaceChildren(h('li', { class: 'muted file-empty', text: `Could not list ${state.filesPath}: ${err.message}` }));
  }
}

function fileRow(id, e) {
  const path = e.path || joinPath(state.filesPath, e.name);
  const dir = e.type === 'dir';
  const open = h('button', { class: 'file-open', type: 'button', title: dir ? `Open ${path}` : `Preview ${path}`, 'data-testid': 'file-open' },
    icon(dir ? 'folder' : 'file'), h('span', { class: 'file-name', text: e.name }));
  open.addEventListener('click', () => {
    if (dir) { state.filesPath = path; el.filePreview.hidden = true; refreshFiles(); } else previewFile(id, path, e);
  });
  const tools = [];
  if (!dir && e.type === 'file') {
    tools.push(h('button', { class: 'icon-btn small', type: 'button', title: `Download ${e.name}`, 'aria-label': `Download ${e.name}`, 'data-testid': 'file-download', onclick: () => downloadFile(id, path, e.name) }, icon('download')));
  }
  const del = h('button', { class: 'icon-btn small', type: 'button', title: `Delete ${e.name}`, 'aria-label': `Delete ${e.name}`, 'data-testid': 'file-delete' }, icon('trash'));
  let timer = 0;
  del.addEventListener('click', async () => {
    if (!del.classList.contains('confirming')) {
      del.classList.add('confirming');
      del.title = 'Click again to delete';
      timer = setTimeout(() => { del.classList.remove('confirming'); del.title = `Delete ${e.name}`; }, 3000);
      return;
    }
    clearTimeout(timer);
    try {
      await api.removeFile(id, path, dir);
      toast(`Deleted ${e.name}`);
      if (el.filePreview.dataset.path === path) el.filePreview.hidden = true;
    } catch (err) { showError(err, 'action'); }
    refreshFiles();
  });
  tools.push(del);
  return h('li', { class: 'file-row', 'data-testid': 'file-item', 'data-name': e.name, 'data-type': e.type },
    open, h('span', { class: 'file-size', text: dir ? '' : bytes(e.size) }), h('span', { class: 'file-tools' }, tools));
}

async function downloadFile(id, path, name) {
  try {
    const { blob } = await api.readFile(id, path);
    saveBlob(blob, name);
  } catch (err) { showError(err, 'action'); }
}

/** previewFile shows a file under the list: a CSV as a table with its column types, an image, or text. */
async function previewFile(id, path, e) {
  const p = el.filePreview;
  p.hidden = false;
  p.dataset.path = path;
  const head = h('div', { class: 'file-preview-head' },
    h('code', { text: e.name }),
    h('button', { class: 'icon-btn small', type: 'button', 'aria-label': 'Close the preview', onclick: () => { p.hidden = true; } }, icon('x')));
  p.replaceChildren(head, h('p', { class: 'muted', text: 'Loading…' }));
  try {
    const ext = (/\.([^.]+)$/.exec(e.name) || [])[1] || '';
    const { blob } = await api.readFile(id, path);
    if (p.dataset.path !== path) return;
    let body;
    if (IMAGE_EXT[ext.toLowerCase()]) {
      const url = await blobToDataURL(new Blob([blob], { type: IMAGE_EXT[ext.toLowerCase()] }));
      body = h('img', { class: 'out-image', src: url, alt: e.name, 'data-testid': 'file-preview-image' });
    } else {
      const part = blob.size > PREVIEW_MAX ? blob.slice(0, PREVIEW_MAX) : blob;
      const text = await part.text();
      if (isCSV(e.name) || /\.tsv$/i.test(e.name)) {
        body = previewTable(previewCSV(text, { headRows: 10, complete: blob.size <= PREVIEW_MAX }), { testid: 'file-csv-preview' });
      } else if (TEXT_EXT.test(e.name) || !/[\u0000-\u0008\u000e-\u001f]/.test(text.slice(0, 4096))) {
        body = h('pre', { class: 'out-text', 'data-testid': 'file-preview-text', text: text + (blob.size > PREVIEW_MAX ? '\n…' : '') });
      } else {
        body = h('p', { class: 'muted', text: `A binary file of ${bytes(blob.size)}: download it to open it.` });
      }
    }
    p.replaceChildren(head, body);
  } catch (err) {
    p.replaceChildren(head, h('p', { class: 'msg-error', text: err.message }));
  }
}

/** uploadToWorkspace writes the chosen files into the shown folder. */
async function uploadToWorkspace(files) {
  const id = state.focus || homeSandbox();
  if (!id) return;
  for (const f of files) {
    try {
      await api.writeFile(id, joinPath(state.filesPath, f.name), f);
      toast(`Uploaded ${f.name} to ${state.filesPath}`);
    } catch (err) { showError(err, 'upload'); }
  }
  await refreshFiles();
  const last = files[files.length - 1];
  if (last && files.length === 1) previewFile(id, joinPath(state.filesPath, last.name), { name: last.name, size: last.size, type: 'file' });
}

// ---------------------------------------------------------------- notebooks: export and import

async function exportNotebook(kind) {
  try {
    let res;
    if (kind === 'conversation') {
      if (!state.conv) { toast('Start a conversation first'); return; }
      res = await api.conversationNotebook(state.conv.id);
    } else {
      const id = state.focus || homeSandbox();
      if (!id) { toast('No sandbox yet'); return; }
      res = await api.sandboxNotebook(id);
    }
    const fallback = `${kind === 'conversation' ? state.conv.id : (state.focus || homeSandbox())}.ipynb`;
    saveBlob(res.blob, res.name || fallback);
  } catch (err) { showError(err, 'action'); }
}

/** importNotebook runs an .ipynb's code cells in the shown sandbox, showing each as it finishes. */
async function importNotebook(file) {
  if (state.codeBusy) { toast('A cell is running: stop it or wait'); return; }
  const text = await file.text();
  try { JSON.parse(text); } catch { banner({ title: 'Not a notebook', message: `${file.name} is not JSON.` }); return; }
  let conv;
  try {
    conv = await ensureConversation(`Notebook: ${file.name}`);
  } catch (err) { showError(err, 'code'); return; }
  setMode('code');
  const target = state.focus || conv.sandbox;
  const box = cellsFor(conv.id);
  const note = h('div', { class: 'note import-note', 'data-testid': 'import-status', text: `Running ${file.name}…` });
  box.append(note);
  updateEmpty();
  state.codeBusy = true;
  updateComposer();
  let ran = 0;
  const show = (c) => { box.insertBefore(storedCell({ ...c, sandbox: c.sandbox || target }), note); ran++; scrollToEnd(el.codeScroller); };
  try {
    await api.importNotebook(target, text, (name, d) => {
      if (name === 'cell' && d) show(d);
      else if (name === 'done' && d) {
        note.textContent = `${file.name}: ran ${d.ran} of ${d.total} code cells${d.stopped ? ', stopped at the first error' : ''}.`;
        note.dataset.state = d.stopped ? 'stopped' : 'done';
      } else if (name === 'failure') {
        note.textContent = `${file.name}: ${(d && d.message) || 'the import failed'}`;
        note.className = 'note error import-note';
        note.dataset.state = 'error';
      } else if (name === 'json' && d) {
        for (const c of d.cells || []) show(c);
        note.textContent = `${file.name}: ran ${d.ran} of ${d.total} code cells${d.stopped ? ', stopped at the first error' : ''}.`;
        note.dataset.state = d.stopped ? 'stopped' : 'done';
      }
    }, { contentType: 'application/x-ipynb+json' });
    if (!note.dataset.state) { note.textContent = `${file.name}: ran ${ran} cells; the stream ended early.`; note.dataset.state = 'error'; }
  } catch (err) {
    note.textContent = `${file.name}: ${err.message}`;
    note.className = 'note error import-note';
    note.dataset.state = 'error';
    if (err instanceof ApiError && (err.status === 401 || err.status === 503)) showError(err, 'code');
  } finally {
    state.codeBusy = false;
    updateComposer();
    refreshSandbox(true);
    refreshFiles();
  }
}

async function sendQuestion() {
  const question = el.question.value.trim();
  const key = convKey();
  if (state.streaming.has(key)) return;
  if (!question) {
    if (state.pending.length) toast('Ask a question about the file');
    el.question.focus();
    return;
  }
  if (state.pending.some((p) => p.status === 'uploading')) {
    el.send.classList.add('busy');
    await Promise.allSettled(state.pending.map((p) => p.promise));
    el.send.classList.remove('busy');
  }
  const files = state.pending.filter((p) => p.status === 'ready');
  state.pending = state.pending.filter((p) => p.status === 'uploading');
  renderPending();
  await Promise.allSettled(files.map((p) => p.parsed));

  const thread = threadFor(key);
  const live = new LiveAnswer((d) => {
    if (d.conversation_id && (!state.conv || state.conv.id !== d.conversation_id) && convKey() === '' && key === '') {
      adoptConversation({ id: d.conversation_id, title: question.slice(0, 80), sandbox: d.sandbox, created_at: new Date().toISOString() });
      loadConversations();
    } else if (d.sandbox && state.conv && state.conv.id === d.conversation_id && state.conv.sandbox !== d.sandbox) {
      state.conv.sandbox = d.sandbox;
      setFocus(d.sandbox);
    }
  });
  thread.append(userMessage(question, files.map((p) => ({ ...p.uploaded, preview: p.preview }))), live.root);
  updateEmpty();
  scrollToEnd(el.chatScroller, true);
  el.question.value = '';
  autosize(el.question);
  state.streaming.add(key);
  let streamKey = key;
  updateComposer();

  const body = { question };
  if (state.conv) body.conversation_id = state.conv.id;
  if (files.length) body.file_ids = files.map((p) => p.uploaded.id);
  const abort = new AbortController();
  state.chatAborts.set(key, abort);
  updateComposer();
  try {
    await api.chat(body, (name, data) => {
      live.handle(name, data);
      if (name === 'conversation' && streamKey === '' && state.conv) {
        streamKey = state.conv.id;
        state.chatAborts.set(streamKey, abort);
        updateComposer();
      }
      if (name === 'error') showError(new ApiError(0, data && data.code, data && data.message), 'chat');
    }, { signal: abort.signal });
    if (!live.finished) live.fail('The answer stream ended early (the daemon may have restarted).');
  } catch (err) {
    if (err && err.name === 'AbortError') {
      live.stop();
    } else if (err instanceof ApiError && err.status === 503 && !isImageBuilding(err)) {
      // No model: the notice above the composer explains it once.
      live.fail('Chat is unavailable: the daemon has no model (see the note above the question box).', err.code);
      showError(err, 'chat');
    } else {
      live.fail(err.message, err.code);
      showError(err, 'chat');
    }
    // A refused question keeps its files for the next try.
    if (files.length) {
      for (const p of files) p.el = pendingChip(p);
      state.pending.unshift(...files);
      renderPending();
    }
  } finally {
    for (const k of [key, streamKey]) if (state.chatAborts.get(k) === abort) state.chatAborts.delete(k);
    state.streaming.delete(streamKey);
    state.streaming.delete(key);
    updateComposer();
    loadConversations();
    if (state.conv && state.conv.id === streamKey) {
      // The title and files may have changed with the question, and the
      // model's steps are cells of the notebook now.
      api.getConversation(streamKey).then((c) => {
        if (state.conv && state.conv.id === c.id) {
          state.conv = { ...state.conv, ...c, turns: undefined, cells: undefined };
          renderHeader();
          if (c.sandbox && c.sandbox !== homeSandbox()) setFocus(c.sandbox);
          loadCells(c);
        }
      }).catch(() => {});
    }
    refreshSandbox(true);
    refreshFiles();
  }
}

function updateComposer() {
  const busy = state.streaming.has(convKey());
  const stoppable = busy && state.chatAborts.has(convKey());
  el.send.disabled = busy || !!state.chatOff;
  el.send.hidden = stoppable;
  el.stopAnswer.hidden = !stoppable;
  el.send.classList.toggle('busy', busy && !stoppable);
  el.run.disabled = state.codeBusy;
  el.run.classList.toggle('busy', state.codeBusy);
}

// ---------------------------------------------------------------- code cells

function renderCodeTarget() {
  const target = state.focus || homeSandbox();
  if (!target) {
    el.codeTarget.replaceChildren(h('span', { text: 'Runs in the conversation\'s sandbox (created on the first run).' }));
    return;
  }
  const fork = target !== homeSandbox();
  const parts = [
    h('span', { text: fork ? 'Runs in the fork' : 'Runs in' }),
    h('code', { 'data-testid': 'code-target-id', text: state.sandbox && state.sandbox.id === target && state.sandbox.name ? `${state.sandbox.name} (${shortId(target)})` : shortId(target) }),
  ];
  if (fork) parts.push(h('button', { class: 'link-btn', type: 'button', onclick: () => setFocus(homeSandbox()), text: 'use the conversation\'s sandbox' }));
  el.codeTarget.replaceChildren(...parts);
}

/**
 * cellView builds one notebook cell: its head (count, who ran it, where,
 * status, tools), its highlighted code and its output. c: {code, source
 * ('user'|'model'), sandbox, id, seq, execution, contextId}.
 */
function cellView(c) {
  const status = statusPill('running', 'running…');
  const count = h('span', { class: 'cell-count', text: '[*]' });
  const out = h('div', { class: 'output', 'data-testid': 'cell-output' });
  const code = h('code', {});
  highlight(code, c.code || '');
  const pre = h('pre', { class: 'code-block', 'data-testid': 'cell-code' }, code);
  const stop = h('button', { class: 'btn btn-small stop-cell', type: 'button', 'data-testid': 'cell-stop', title: 'Interrupt the kernel (Esc)', hidden: true }, icon('stop'), 'Stop');
  const edit = h('button', { class: 'icon-btn small', type: 'button', title: 'Edit and run as a new cell', 'aria-label': 'Edit', 'data-testid': 'cell-edit' }, icon('edit'));
  const rerun = h('button', { class: 'icon-btn small', type: 'button', title: 'Run again as a new cell', 'aria-label': 'Run again', 'data-testid': 'cell-rerun' }, icon('refresh'));
  const home = homeSandbox();
  const where = c.sandbox && home && c.sandbox !== home ? `in fork ${shortId(c.sandbox)}` : '';
  const root = h('div', {
    class: `cell${c.source === 'model' ? ' cell-model' : ''}`, 'data-testid': 'code-cell', 'data-state': 'running',
    'data-sandbox': c.sandbox || '', 'data-source': c.source || 'user', 'data-cell-id': c.id || null,
  },
  h('div', { class: 'cell-head' }, count,
    c.source === 'model' ? h('span', { class: 'cell-source', 'data-testid': 'cell-source', title: 'The chat\'s model ran this step', text: 'model' }) : null,
    where ? h('span', { text: where }) : null,
    status,
    h('span', { class: 'cell-tools' }, stop, copyButton(() => view.code, { label: 'Copy the code', testid: 'cell-copy' }), edit, rerun)),
  pre, out);
  const view = {
    root, out, count, code: c.code || '', contextId: c.contextId || '', sandbox: c.sandbox || '',
    setStatus(node) { status.replaceWith(node); },
    setRunning(on) { stop.hidden = !on; edit.disabled = on; rerun.disabled = on; root.dataset.state = on ? 'running' : root.dataset.state; },
    finish(exec) {
      renderExecution(out, exec);
      count.textContent = `[${exec && exec.execution_count ? exec.execution_count : ' '}]`;
      if (exec && exec.context_id) view.contextId = exec.context_id;
      const pill = execStatus(exec);
      status.replaceWith(pill);
      view.setStatus = (node) => pill.replaceWith(node);
      stop.hidden = true; edit.disabled = false; rerun.disabled = false;
      root.dataset.state = exec && exec.error ? 'error' : 'done';
      if (exec && exec.error && exec.error.name === 'KeyboardInterrupt') root.dataset.interrupted = 'true';
    },
    fail(text) {
      // What streamed before the failure stays.
      out.append(h('div', { class: 'msg-error', 'data-testid': 'cell-failure', text }));
      const pill = statusPill('failed', 'failed');
      status.replaceWith(pill);
      stop.hidden = true; edit.disabled = false; rerun.disabled = false;
      root.dataset.state = 'error';
    },
  };
  stop.addEventListener('click', () => interruptCell(view));
  rerun.addEventListener('click', () => runCode(view.code));
  edit.addEventListener('click', () => editCell(view, pre));
  return view;
}

/** editCell turns a cell's code into an editor; running it makes a new cell. */
function editCell(view, pre) {
  if (view.root.querySelector('.cell-editor')) return;
  const ta = h('textarea', { class: 'cell-editor mono', rows: String(Math.min(20, view.code.split('\n').length + 1)), spellcheck: 'false', 'data-testid': 'cell-editor' });
  ta.value = view.code;
  const done = () => { box.remove(); pre.hidden = false; };
  const run = () => {
    const code = ta.value;
    if (!code.trim() || state.codeBusy) { if (state.codeBusy) toast('A cell is running: stop it or wait'); return; }
    done();
    runCode(code);
  };
  const box = h('div', { class: 'cell-edit' }, ta,
    h('div', { class: 'cell-edit-actions' },
      h('button', { class: 'btn', type: 'button', onclick: done, text: 'Cancel' }),
      h('button', { class: 'btn btn-primary', type: 'button', 'data-testid': 'cell-edit-run', onclick: run }, icon('play'), 'Run as new cell')));
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); } else if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); done(); } else if (e.key === 'Tab' && !e.shiftKey) {
      e.preventDefault();
      ta.setRangeText('    ', ta.selectionStart, ta.selectionEnd, 'end');
    }
  });
  pre.hidden = true;
  pre.after(box);
  ta.focus();
}

/** interruptCell interrupts the kernel context a running cell runs in (its id, else the sandbox's default python context). */
async function interruptCell(view) {
  if (!view || view.root.dataset.state !== 'running') return;
  view.root.dataset.interrupting = 'true';
  try {
    let ctx = view.contextId;
    if (!ctx) {
      const list = await api.listContexts(view.sandbox);
      const def = ((list && list.contexts) || []).find((x) => x.default && x.language === 'python');
      if (!def) throw new Error('the sandbox has no default python context');
      ctx = def.id;
    }
    await api.interrupt(view.sandbox, ctx);
    toast('Interrupted: the kernel keeps its variables');
  } catch (err) {
    showError(err, 'code');
  }
}

/** storedCell renders a cell the server recorded (GET …/cells). */
function storedCell(c) {
  const v = cellView({
    code: c.code, source: c.source, sandbox: c.sandbox, id: c.id, seq: c.seq,
    contextId: c.context_id || (c.execution && c.execution.context_id) || '',
  });
  v.finish(c.execution);
  return v.root;
}

/**
 * loadCells shows the notebook of a conversation: its sandbox's cells, the
 * user's and the model's, oldest first (conv.cells, else GET …/cells).
 * Cells run in forks from this page stay after them.
 */
async function loadCells(conv) {
  if (!conv || !conv.id) return;
  let cells = conv.cells;
  if (!Array.isArray(cells) && conv.sandbox) {
    try {
      const res = await api.listCells(conv.sandbox);
      cells = res && res.cells;
    } catch { cells = null; }
  }
  if (!Array.isArray(cells)) return; // a daemon without recorded cells: keep what is shown
  const box = cellsFor(conv.id);
  if (state.running && box.contains(state.running.root)) return; // not while one runs here
  const forks = [...box.children].filter((e) => e.dataset.sandbox && e.dataset.sandbox !== conv.sandbox);
  box.replaceChildren(...cells.map(storedCell), ...forks);
  if (!state.cellHistory.length) state.cellHistory = cells.filter((c) => c.source !== 'model').map((c) => c.code);
  updateEmpty();
  if (convKey() === conv.id) scrollToEnd(el.codeScroller, true);
}

/** runCell runs what the code editor holds. */
async function runCell() {
  const code = el.codeInput.value;
  if (!code.trim() || state.codeBusy) return;
  await runCode(code, { fromEditor: true });
}

/** runCode runs code as a new cell in the shown sandbox, streaming its output. */
async function runCode(code, { fromEditor = false } = {}) {
  if (!code.trim()) return false;
  if (state.codeBusy) { toast('A cell is running: stop it (Esc) or wait'); return false; }
  state.codeBusy = true;
  updateComposer();
  let conv;
  try {
    const first = code.split('\n').map((l) => l.trim()).find((l) => l && !l.startsWith('#')) || 'code';
    conv = await ensureConversation(`Code: ${first.length > 60 ? first.slice(0, 59) + '…' : first}`);
  } catch (err) {
    state.codeBusy = false;
    updateComposer();
    showError(err, 'code');
    return false;
  }
  if (state.mode !== 'code') setMode('code');
  const target = state.focus || conv.sandbox;
  state.cellHistory.push(code);
  state.historyAt = -1;
  if (fromEditor) {
    el.codeInput.value = '';
    autosize(el.codeInput);
  }

  const view = cellView({ code, source: 'user', sandbox: target });
  view.setRunning(true);
  const { root: cell, out } = view;
  state.running = view;
  const cells = cellsFor(conv.id);
  cells.append(cell);
  updateEmpty();
  scrollToEnd(el.codeScroller, true);
  const fail = (text) => view.fail(text);
  let done = false;
  try {
    await api.runCode(target, code, (name, d) => {
      switch (name) {
        case 'stdout': case 'stderr':
          liveOutput(out, name, (d && d.data) || ''); break;
        case 'result': liveOutput(out, 'result', d); break;
        case 'error': liveOutput(out, 'error', d); break;
        case 'done': case 'json':
          done = true;
          view.finish(d);
          break;
        case 'failure':
          done = true;
          fail((d && d.message) || 'the run failed');
          break;
        default: break;
      }
      scrollToEnd(el.codeScroller);
    });
    if (!done) fail('The output stream ended early.');
  } catch (err) {
    fail(err.message);
    if (err instanceof ApiError && err.status === 401) showError(err);
    else if (err instanceof ApiError && err.status === 503) showError(err, 'code');
  } finally {
    if (state.running === view) state.running = null;
    state.codeBusy = false;
    updateComposer();
    scrollToEnd(el.codeScroller);
    refreshSandbox(true);
    refreshFiles();
  }
  return true;
}

// ---------------------------------------------------------------- the sandbox panel

let pollTimer = 0;
let polls = 0;
let sandboxSeq = 0;

function setFocus(id) {
  const changed = state.focus !== id;
  state.focus = id || '';
  if (changed) state.sandbox = null;
  renderSandbox();
  renderCodeTarget();
  if (changed) refreshFiles();
  if (state.focus) refreshSandbox(true);
  else el.graph.replaceChildren(h('p', { class: 'graph-empty', text: 'The tree appears once the sandbox exists.' }));
}

function renderSandbox() {
  const sb = state.sandbox;
  const id = state.focus;
  el.sbNone.hidden = !!id;
  el.sbInfo.hidden = !id;
  el.focusNote.hidden = !id || id === homeSandbox() || !homeSandbox();
  const st = sb ? sb.state : (id ? 'loading' : '');
  el.panelDot.dataset.state = sb ? sb.state : 'none';
  if (id) {
    el.sbName.textContent = (sb && sb.name) || (id === homeSandbox() ? 'conversation sandbox' : 'sandbox');
    el.sbId.textContent = id;
    el.sbState.textContent = st;
    el.sbState.dataset.state = st;
    const facts = [];
    if (sb) {
      facts.push(['Image', sb.image]);
      facts.push(['Resources', `${sb.cpus} CPU · ${fmtInt(sb.memory_mb)} MB`]);
      if (sb.usage) {
        facts.push(['Memory now', `${bytes(sb.usage.memory_bytes)}`]);
        facts.push(['CPU time', duration(sb.usage.cpu_seconds * 1000)]);
      }
      if (sb.snapshot_id) facts.push(['From snapshot', shortId(sb.snapshot_id)]);
      facts.push(['Created', timeAgo(sb.created_at)]);
      facts.push(['Last active', timeAgo(sb.last_active_at)]);
      if (sb.state_reason) facts.push(['Reason', sb.state_reason]);
    }
    el.sbFacts.replaceChildren(...facts.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })]));
  }
  const can = {
    suspend: st === 'running',
    resume: st === 'suspended',
    checkpoint: st === 'running' || st === 'suspended',
    fork: st === 'running' || st === 'suspended',
    terminate: !!sb && st !== 'terminated',
  };
  for (const b of el.actions.querySelectorAll('[data-action]')) {
    b.disabled = state.actionBusy || !can[b.dataset.action];
  }
  $('export-conversation').disabled = !state.conv;
  $('export-sandbox').disabled = !id;
}

async function refreshSandbox(withGraph = false) {
  const id = state.focus;
  if (!id) return;
  const seq = ++sandboxSeq;
  try {
    const sb = await api.getSandbox(id);
    if (seq !== sandboxSeq || state.focus !== id) return;
    const stateChanged = !state.sandbox || state.sandbox.state !== sb.state;
    state.sandbox = sb;
    renderSandbox();
    refreshPorts(id, sb.state);
    renderCodeTarget();
    if (withGraph || stateChanged) refreshGraph();
  } catch (err) {
    if (seq !== sandboxSeq || state.focus !== id) return;
    if (err instanceof ApiError && err.status === 404) {
      state.sandbox = { id, state: 'terminated', name: '' };
      renderSandbox();
      if (withGraph) refreshGraph();
    } else if (err instanceof ApiError && err.status === 401) {
      showError(err);
    }
  }
}

// The servers code started in the sandbox: each listening port with a link
// that opens it in a new tab through the daemon (its token on the URL; the
// daemon keeps it in a cookie of the port's path, so the app's links work).
let portsSeq = 0;
async function refreshPorts(id, st) {
  const seq = ++portsSeq;
  let ports = [];
  if (st === 'running') {
    try {
      const list = await api.listPorts(id);
      ports = ((list && list.ports) || []).filter((p) => p.listening);
    } catch {
      ports = [];
    }
  }
  if (seq !== portsSeq || state.focus !== id) return;
  el.sbPorts.hidden = ports.length === 0;
  el.sbPortList.replaceChildren(...ports.map((p) => h('li', { 'data-testid': 'sandbox-port', 'data-port': String(p.port) },
    h('code', { text: String(p.port) }),
    h('span', { class: 'muted', text: p.process || '' }),
    h('button', {
      class: 'link-btn', type: 'button', 'data-testid': `port-open-${p.port}`, text: 'Open ↗',
      title: `Open port ${p.port} in a new tab`,
      onclick: () => openPort(id, p.port),
    }))));
}

async function openPort(id, port) {
  // The tab is opened at once (a popup blocker allows it during the
  // click), then pointed at the port once its token is known.
  const tab = window.open('about:blank', '_blank');
  try {
    const p = await api.getPort(id, port);
    const url = `${p.host_url || p.url}?forkbox_token=${encodeURIComponent(p.token)}`;
    if (tab) { tab.opener = null; tab.location.href = url; } else window.location.assign(url);
  } catch (err) {
    if (tab) tab.close();
    showError(err);
  }
}

let graphSeq = 0;
async function refreshGraph() {
  const home = homeSandbox() || state.focus;
  if (!home) return;
  const seq = ++graphSeq;
  try {
    const [sbs, snaps] = await Promise.all([api.listSandboxes(), api.listSnapshots()]);
    if (seq !== graphSeq) return;
    const sandboxes = (sbs && sbs.sandboxes) || [];
    if (!sandboxes.some((s) => s.id === home) && state.sandbox && state.sandbox.id === home) sandboxes.push(state.sandbox);
    const root = buildTree(home, sandboxes, (snaps && snaps.snapshots) || []);
    renderGraph(el.graph, root, {
      current: state.focus || home,
      home,
      onSelect: (id, label) => {
        setFocus(id);
        toast(id === homeSandbox() ? 'Back to the conversation\'s sandbox' : `Code cells now run in ${label || 'the fork'} (${shortId(id)})`);
      },
      onSnapshot: (id, sn) => askRestore(id, sn),
    });
  } catch (err) {
    if (seq === graphSeq) el.graph.replaceChildren(h('p', { class: 'graph-empty', text: `Could not load the tree: ${err.message}` }));
  }
}

function startPolling() {
  clearInterval(pollTimer);
  pollTimer = setInterval(() => {
    if (document.visibilityState !== 'visible' || !state.focus || state.actionBusy) return;
    polls++;
    refreshSandbox(polls % 4 === 0);
  }, 3000);
}

let terminateTimer = 0;
async function sandboxAction(action, button) {
  const id = state.focus;
  if (!id || state.actionBusy) return;
  if (action === 'terminate' && !button.classList.contains('confirming')) {
    button.classList.add('confirming');
    button.querySelector('span').textContent = 'Click to confirm';
    terminateTimer = setTimeout(() => {
      button.classList.remove('confirming');
      button.querySelector('span').textContent = 'Terminate';
    }, 4000);
    return;
  }
  clearTimeout(terminateTimer);
  button.classList.remove('confirming');
  const label = button.querySelector('span');
  if (label && action === 'terminate') label.textContent = 'Terminate';
  state.actionBusy = true;
  button.classList.add('busy');
  renderSandbox();
  try {
    switch (action) {
      case 'suspend': await api.suspend(id); toast('Sandbox suspended: its memory is on disk'); break;
      case 'resume': await api.resume(id); toast('Sandbox resumed'); break;
      case 'checkpoint': {
        const sn = await api.checkpoint(id, 'memory');
        toast(`Checkpoint ${shortId(sn.id)} saved${sn.size_bytes ? ` (${bytes(sn.size_bytes)})` : ''}`);
        break;
      }
      case 'fork': {
        const ask = await askFork();
        if (!ask) break;
        const res = await api.fork(id, ask.count, ask.names);
        const n = (res && res.sandboxes && res.sandboxes.length) || 0;
        toast(`Forked into ${n} sandbox${n === 1 ? '' : 'es'}: ${(res.sandboxes || []).map((s) => s.name || shortId(s.id)).join(', ')}`);
        break;
      }
      case 'terminate':
        await api.terminate(id);
        toast('Sandbox terminated');
        break;
      default: break;
    }
  } catch (err) {
    showError(err, 'action');
  } finally {
    state.actionBusy = false;
    button.classList.remove('busy');
    if (action === 'terminate' && id !== homeSandbox() && homeSandbox()) setFocus(homeSandbox());
    else { renderSandbox(); await refreshSandbox(true); }
  }
}

// ---------------------------------------------------------------- fork and restore dialogs

/** askFork asks how many forks and their names; null when cancelled. */
function askFork() {
  const d = el.forkDialog;
  const renderNames = () => {
    const n = Math.max(1, Math.min(8, Number(el.forkCount.value) || 1));
    const old = [...el.forkNames.querySelectorAll('input')].map((i) => i.value);
    el.forkNames.replaceChildren(...Array.from({ length: n }, (_, i) => {
      const input = h('input', { type: 'text', id: `fork-name-${i}`, placeholder: `fork-${i + 1}`, 'data-testid': 'fork-name', maxlength: '63', autocomplete: 'off', spellcheck: 'false' });
      input.value = old[i] || '';
      return h('div', { class: 'fork-name' }, h('label', { for: `fork-name-${i}`, text: `Name of fork ${i + 1} (optional)` }), input);
    }));
  };
  el.forkCount.value = '2';
  el.forkNames.replaceChildren();
  renderNames();
  el.forkCount.oninput = renderNames;
  return new Promise((resolve) => {
    d.onclose = () => {
      d.onclose = null;
      if (d.returnValue !== 'fork') { resolve(null); return; }
      const count = Math.max(1, Math.min(8, Number(el.forkCount.value) || 1));
      const names = [...el.forkNames.querySelectorAll('input')].map((i) => i.value.trim());
      // Names are all or none: a blank one gets a unique name of its own.
      const tag = Math.random().toString(36).slice(2, 6);
      resolve({ count, names: names.some(Boolean) ? names.map((n, i) => n || `fork-${i + 1}-${tag}`) : [] });
    };
    d.returnValue = '';
    d.showModal();
    el.forkCount.focus();
  });
}

/** askRestore offers to start a new sandbox from a snapshot, then shows it. */
function askRestore(id, sn) {
  $('restore-text').textContent = `A new sandbox starts from ${sn && sn.type === 'filesystem' ? 'filesystem' : 'memory'} snapshot ${shortId(id)}${sn && sn.name ? ` (${sn.name})` : ''}${sn && sn.type !== 'filesystem' ? ', with the memory it had: variables included' : ''}. The conversation's sandbox is not changed.`;
  const d = el.restoreDialog;
  d.returnValue = '';
  d.onclose = async () => {
    d.onclose = null;
    if (d.returnValue !== 'restore') return;
    try {
      const sb = await api.restore(id);
      toast(`Started ${shortId(sb.id)} from snapshot ${shortId(id)}`);
      setFocus(sb.id);
    } catch (err) { showError(err, 'action'); }
  };
  d.showModal();
}

// ---------------------------------------------------------------- API key dialog

function openKeyDialog() {
  if (el.keyDialog.open) return;
  el.keyInput.value = getApiKey();
  if (typeof el.keyDialog.showModal === 'function') el.keyDialog.showModal();
  el.keyInput.focus();
}

// ---------------------------------------------------------------- wiring

function wire() {
  $('new-conversation').addEventListener('click', newConversation);
  $('toggle-sidebar').addEventListener('click', () => setDrawer('sidebar', !el.sidebar.classList.contains('open')));
  $('toggle-panel').addEventListener('click', () => setDrawer('panel', !el.panel.classList.contains('open')));
  el.backdrop.addEventListener('click', closeDrawers);
  for (const b of document.querySelectorAll('[data-close-drawer]')) b.addEventListener('click', closeDrawers);
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || document.querySelector('dialog[open]')) return;
    if (el.sidebar.classList.contains('open') || el.panel.classList.contains('open')) { closeDrawers(); return; }
    // Esc stops what runs: the cell in the code view, the answer in the chat.
    if (state.mode === 'code' && state.running) { e.preventDefault(); interruptCell(state.running); } else if (state.mode === 'chat' && state.chatAborts.has(convKey())) { e.preventDefault(); state.chatAborts.get(convKey()).abort(); }
  });
  el.stopAnswer.addEventListener('click', () => {
    const a = state.chatAborts.get(convKey());
    if (a) a.abort();
  });
  $('files-up').addEventListener('click', () => { state.filesPath = parentOf(state.filesPath); el.filePreview.hidden = true; refreshFiles(); });
  $('files-refresh').addEventListener('click', () => refreshFiles());
  $('files-upload').addEventListener('click', () => el.filesInput.click());
  el.filesInput.addEventListener('change', () => {
    const files = [...el.filesInput.files];
    el.filesInput.value = '';
    if (files.length) uploadToWorkspace(files);
  });
  $('export-conversation').addEventListener('click', () => exportNotebook('conversation'));
  $('export-sandbox').addEventListener('click', () => exportNotebook('sandbox'));
  $('import-notebook').addEventListener('click', () => $('notebook-input').click());
  $('notebook-input').addEventListener('change', () => {
    const f = $('notebook-input').files[0];
    $('notebook-input').value = '';
    if (f) importNotebook(f);
  });
  el.lightbox.addEventListener('click', (e) => { if (e.target === el.lightbox) el.lightbox.close(); });

  el.tabChat.addEventListener('click', () => setMode('chat'));
  el.tabCode.addEventListener('click', () => setMode('code'));
  for (const t of [el.tabChat, el.tabCode]) {
    t.addEventListener('keydown', (e) => {
      if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
        e.preventDefault();
        setMode(state.mode === 'chat' ? 'code' : 'chat');
        (state.mode === 'chat' ? el.tabChat : el.tabCode).focus();
      }
    });
  }

  el.composer.addEventListener('submit', (e) => { e.preventDefault(); sendQuestion(); });
  el.question.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      sendQuestion();
    }
  });
  el.question.addEventListener('input', () => autosize(el.question));
  for (const b of document.querySelectorAll('#suggestions .chip-btn')) {
    b.addEventListener('click', () => {
      el.question.value = b.textContent;
      autosize(el.question);
      el.question.focus();
    });
  }
  el.attach.addEventListener('click', () => el.fileInput.click());
  el.fileInput.addEventListener('change', () => {
    addFiles(el.fileInput.files);
    el.fileInput.value = '';
  });

  // Drag and drop: a CSV dropped anywhere on the chat or code view.
  let depth = 0;
  const hasFiles = (e) => e.dataTransfer && [...(e.dataTransfer.types || [])].includes('Files');
  const main = $('main');
  main.addEventListener('dragenter', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    depth++;
    el.drop.hidden = false;
    if (state.mode !== 'chat') setMode('chat');
  });
  main.addEventListener('dragover', (e) => {
    if (!hasFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = 'copy';
  });
  main.addEventListener('dragleave', () => {
    depth = Math.max(0, depth - 1);
    if (!depth) el.drop.hidden = true;
  });
  main.addEventListener('drop', (e) => {
    if (!e.dataTransfer || !e.dataTransfer.files || !e.dataTransfer.files.length) return;
    e.preventDefault();
    depth = 0;
    el.drop.hidden = true;
    addFiles(e.dataTransfer.files);
  });
  // A file dropped elsewhere must not navigate away from the page.
  window.addEventListener('dragover', (e) => { if (hasFiles(e)) e.preventDefault(); });
  window.addEventListener('drop', (e) => { if (hasFiles(e)) e.preventDefault(); });

  el.codeForm.addEventListener('submit', (e) => { e.preventDefault(); runCell(); });
  el.codeInput.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      runCell();
    } else if (e.key === 'Tab' && !e.shiftKey) {
      e.preventDefault();
      el.codeInput.setRangeText('    ', el.codeInput.selectionStart, el.codeInput.selectionEnd, 'end');
    } else if ((e.key === 'ArrowUp' || e.key === 'ArrowDown') && state.cellHistory.length &&
      (el.codeInput.value === '' || (state.historyAt >= 0 && !el.codeInput.value.includes('\n')))) {
      // Up and Down recall earlier cells while the editor is empty or shows a one-line one.
      e.preventDefault();
      const n = state.cellHistory.length;
      let at = state.historyAt < 0 ? n : state.historyAt;
      at = e.key === 'ArrowUp' ? Math.max(0, at - 1) : at + 1;
      if (at >= n) { state.historyAt = -1; el.codeInput.value = ''; } else { state.historyAt = at; el.codeInput.value = state.cellHistory[at]; }
      autosize(el.codeInput);
    }
  });
  el.codeInput.addEventListener('input', () => { state.historyAt = -1; autosize(el.codeInput); });

  for (const b of el.actions.querySelectorAll('[data-action]')) {
    b.addEventListener('click', () => sandboxAction(b.dataset.action, b));
  }
  $('focus-reset').addEventListener('click', () => setFocus(homeSandbox()));
  $('graph-refresh').addEventListener('click', () => { refreshSandbox(true); });

  $('api-key-button').addEventListener('click', openKeyDialog);
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const save = e.submitter && e.submitter.value === 'save';
    el.keyDialog.close();
    if (save) {
      setApiKey(el.keyInput.value.trim());
      clearBanners();
      toast(getApiKey() ? 'API key saved' : 'API key removed');
      loadConversations();
      refreshSandbox(true);
    }
  });

  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') refreshSandbox();
  });
  // Times like "5 min ago" age; redraw them now and then.
  setInterval(() => { renderConversations(); renderHeader(); }, 60000);
}

async function start() {
  wire();
  state.threads.set('', h('div', { class: 'thread-conv', 'data-conversation': '' }));
  state.cells.set('', h('div', { class: 'cells-conv', 'data-conversation': '' }));
  renderHeader();
  showThreads();
  setFocus('');
  refreshFiles();
  updateComposer();
  startPolling();
  checkHealth();
  await loadConversations();
  const m = /^#c=(.+)$/.exec(location.hash);
  if (m) await selectConversation(decodeURIComponent(m[1]));
  document.body.dataset.ready = 'true';
}

start();
