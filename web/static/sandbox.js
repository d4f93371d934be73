// The sandbox panel: the shown sandbox's facts, ports and lifecycle actions
// (suspend, resume, checkpoint, fork, terminate), its snapshot tree with
// restores, and polling while the page is visible.

import { api, ApiError } from './api.js';
import { buildTree, renderGraph, shortId } from './graph.js';
import { $, h } from './dom.js';
import { timeAgo, bytes, duration, fmtInt } from './format.js';
import { state, el, homeSandbox } from './state.js';
import { toast, showError } from './notify.js';
import { renderCodeTarget } from './cells.js';
import { refreshFiles } from './files.js';

let pollTimer = 0;
let polls = 0;
let sandboxSeq = 0;

export function setFocus(id) {
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

export async function refreshSandbox(withGraph = false) {
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

export function startPolling() {
  clearInterval(pollTimer);
  pollTimer = setInterval(() => {
    if (document.visibilityState !== 'visible' || !state.focus || state.actionBusy) return;
    polls++;
    refreshSandbox(polls % 4 === 0);
  }, 3000);
}

let terminateTimer = 0;
export async function sandboxAction(action, button) {
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
