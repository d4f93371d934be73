// Notebooks: download a conversation's or a sandbox's cells as .ipynb, and
// import one, running its code cells in the shown sandbox as they stream.

import { api, ApiError } from './api.js';
import { h, saveBlob } from './dom.js';
import { state, el, homeSandbox } from './state.js';
import { setMode, scrollToEnd } from './views.js';
import { banner, toast, showError } from './notify.js';
import { cellsFor, updateEmpty, ensureConversation } from './conversations.js';
import { updateComposer } from './chat.js';
import { storedCell } from './cells.js';
import { refreshFiles } from './files.js';
import { refreshSandbox } from './sandbox.js';

export async function exportNotebook(kind) {
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
export async function importNotebook(file) {
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
