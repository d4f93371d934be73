// The chat view: the question box with its attached files, the user's
// messages, and the assistant's answers, rendered from stored turns or live
// from the answer's SSE events (steps, their output, text, charts).

import { api, ApiError } from './api.js';
import { renderMarkdown } from './markdown.js';
import { previewCSV, isCSV } from './csv.js';
import { h, icon, autosize } from './dom.js';
import { timeAgo, bytes, fmtInt } from './format.js';
import { state, el, convKey, homeSandbox } from './state.js';
import { setMode, scrollToEnd, follow } from './views.js';
import { toast, showError, isImageBuilding } from './notify.js';
import { previewTable, imageEl, chartFigure, renderExecution, liveOutput, statusPill, execStatus } from './output.js';
import { loadConversations, renderHeader, threadFor, updateEmpty, adoptConversation } from './conversations.js';
import { loadCells } from './cells.js';
import { refreshFiles } from './files.js';
import { setFocus, refreshSandbox } from './sandbox.js';

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
export function renderTurn(turn) {
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

export function addFiles(fileList) {
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

// ---------------------------------------------------------------- asking

export async function sendQuestion() {
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

export function updateComposer() {
  const busy = state.streaming.has(convKey());
  const stoppable = busy && state.chatAborts.has(convKey());
  el.send.disabled = busy || !!state.chatOff;
  el.send.hidden = stoppable;
  el.stopAnswer.hidden = !stoppable;
  el.send.classList.toggle('busy', busy && !stoppable);
  el.run.disabled = state.codeBusy;
  el.run.classList.toggle('busy', state.codeBusy);
}
