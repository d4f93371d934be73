// The code view: notebook cells that run in the shown sandbox's kernel with
// their output streamed, edited and re-run as new cells, interrupted, and
// the stored cells of both sources (the user's and the model's).

import { api, ApiError } from './api.js';
import { shortId } from './graph.js';
import { highlight } from './highlight.js';
import { h, icon, autosize } from './dom.js';
import { state, el, convKey, homeSandbox } from './state.js';
import { setMode, scrollToEnd } from './views.js';
import { toast, showError, copyButton } from './notify.js';
import { renderExecution, liveOutput, statusPill, execStatus } from './output.js';
import { cellsFor, updateEmpty, ensureConversation } from './conversations.js';
import { updateComposer } from './chat.js';
import { refreshFiles } from './files.js';
import { setFocus, refreshSandbox } from './sandbox.js';

export function renderCodeTarget() {
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
export async function interruptCell(view) {
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
export function storedCell(c) {
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
export async function loadCells(conv) {
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
export async function runCell() {
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
