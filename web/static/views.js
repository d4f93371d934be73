// The page's layout: the drawers of narrow screens, the chat and code tabs,
// and scrollers that follow new content while they are at the end.

import { $ } from './dom.js';
import { state, el } from './state.js';

export function setDrawer(which, open) {
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

export function closeDrawers() {
  setDrawer('sidebar', false);
  setDrawer('panel', false);
}

export function setMode(mode) {
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
export function scrollToEnd(scroller, force = false) {
  if (!force && !pinned.get(scroller)) return;
  requestAnimationFrame(() => { scroller.scrollTop = scroller.scrollHeight; pinned.set(scroller, true); });
}
export const follow = () => scrollToEnd(el.chatScroller);
