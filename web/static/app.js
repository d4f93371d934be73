// forkbox web UI: conversations, the chat (streamed over SSE), code cells
// that run directly in the conversation's sandbox, and the sandbox panel
// with its lifecycle actions and snapshot tree. This module wires the page's
// controls to the views (each in its own module) and starts the UI.

import { getApiKey, setApiKey } from './api.js';
import { $, h, autosize } from './dom.js';
import { parentOf } from './format.js';
import { state, el, convKey, homeSandbox } from './state.js';
import { setDrawer, closeDrawers, setMode } from './views.js';
import { clearBanners, toast, openKeyDialog } from './notify.js';
import { checkHealth } from './health.js';
import { loadConversations, renderConversations, renderHeader, showThreads, newConversation, selectConversation } from './conversations.js';
import { addFiles, sendQuestion, updateComposer } from './chat.js';
import { interruptCell, runCell } from './cells.js';
import { refreshFiles, uploadToWorkspace } from './files.js';
import { exportNotebook, importNotebook } from './notebook.js';
import { setFocus, refreshSandbox, startPolling, sandboxAction } from './sandbox.js';

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
