// Telling the user: banners for failed calls (with what to do about them),
// corner toasts, copy buttons, and the API key dialog a 401 opens.

import { ApiError, getApiKey } from './api.js';
import { h, icon, copyText, isNarrow } from './dom.js';
import { state, el } from './state.js';
import { setChatOff, checkHealth } from './health.js';

export function banner({ title, message, kind = 'error', actions = [] }) {
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

export function clearBanners() { el.banners.replaceChildren(); }

export function toast(message, kind = '') {
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
export function showError(err, context = '') {
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

export const isImageBuilding = (err) => /being built|building/i.test((err && err.message) || '');

/** copyButton is a small button that copies text() and says so. */
export function copyButton(text, { label = 'Copy', testid = 'copy-button', cls = 'icon-btn small' } = {}) {
  const b = h('button', { class: cls, type: 'button', title: label, 'aria-label': label, 'data-testid': testid }, icon('copy'));
  b.addEventListener('click', async (e) => {
    e.stopPropagation();
    const ok = await copyText(typeof text === 'function' ? text() : text);
    b.dataset.copied = ok ? 'true' : 'false';
    toast(ok ? 'Copied' : 'Could not copy: select the text instead', ok ? '' : 'error');
  });
  return b;
}

export function openKeyDialog() {
  if (el.keyDialog.open) return;
  el.keyInput.value = getApiKey();
  if (typeof el.keyDialog.showModal === 'function') el.keyDialog.showModal();
  el.keyInput.focus();
}
