// Conversations: the sidebar's list, the selected one (its id in the URL's
// #c=… so a reload or a shared link opens it), and the chat thread and code
// cells each keeps while another is shown.

import { api, ApiError } from './api.js';
import { shortId } from './graph.js';
import { h, icon, isNarrow } from './dom.js';
import { timeAgo } from './format.js';
import { state, el, convKey } from './state.js';
import { setDrawer, scrollToEnd } from './views.js';
import { clearBanners, toast, showError } from './notify.js';
import { renderTurn, updateComposer } from './chat.js';
import { loadCells } from './cells.js';
import { refreshFiles } from './files.js';
import { setFocus } from './sandbox.js';

export async function loadConversations() {
  try {
    const list = await api.listConversations();
    state.conversations = (list && list.conversations) || [];
  } catch (err) {
    showError(err, 'load');
  }
  renderConversations();
}

export function renderConversations() {
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

export function renderHeader() {
  const c = state.conv;
  el.title.textContent = c ? (c.title || 'Untitled conversation') : 'New conversation';
  el.sub.textContent = c ? `${c.sandbox_name || shortId(c.sandbox)} · started ${timeAgo(c.created_at)}` : 'Ask a question or run code to start';
  document.title = c && c.title ? `${c.title} · forkbox` : 'forkbox';
}

export function threadFor(key) {
  if (!state.threads.has(key)) state.threads.set(key, h('div', { class: 'thread-conv', 'data-conversation': key }));
  return state.threads.get(key);
}
export function cellsFor(key) {
  if (!state.cells.has(key)) state.cells.set(key, h('div', { class: 'cells-conv', 'data-conversation': key }));
  return state.cells.get(key);
}

export function showThreads() {
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

export function updateEmpty() {
  el.chatEmpty.hidden = threadFor(convKey()).childElementCount > 0;
  el.codeEmpty.hidden = cellsFor(convKey()).childElementCount > 0;
}

export function newConversation() {
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

export async function selectConversation(id) {
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
export async function ensureConversation(title = '') {
  if (state.conv) return state.conv;
  const conv = await api.createConversation(title);
  adoptConversation(conv);
  loadConversations();
  return conv;
}

/** adoptConversation makes a just-created conversation the selected one, keeping what was shown. */
export function adoptConversation(conv) {
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
