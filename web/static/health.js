// The daemon's health as the UI shows it: whether chat has a model (said
// once, above the composer) and the progress of an image being built.

import { api } from './api.js';
import { h, icon } from './dom.js';
import { state, el } from './state.js';
import { setMode } from './views.js';
import { banner, toast, copyButton } from './notify.js';
import { updateComposer } from './chat.js';

const MODEL_ENV = [
  'OPENAI_API_KEY=sk-… FORKBOX_MODEL=gpt-4o-mini',
  'ANTHROPIC_API_KEY=sk-ant-… FORKBOX_MODEL=claude-sonnet-4-5',
  'OPENAI_BASE_URL=http://localhost:11434/v1 FORKBOX_MODEL=qwen2.5',
];

/** setChatOff says once, above the composer, that chat has no model and how to give it one; the input is disabled. */
export function setChatOff(why) {
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
export async function checkHealth() {
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
