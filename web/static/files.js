// The sandbox panel's /workspace browser: list a folder, preview a file (a
// CSV as a table with its column types, an image, text), download, delete,
// upload.

import { api } from './api.js';
import { previewCSV, isCSV } from './csv.js';
import { $, h, icon, saveBlob, blobToDataURL } from './dom.js';
import { bytes, joinPath } from './format.js';
import { state, el, homeSandbox } from './state.js';
import { toast, showError } from './notify.js';
import { previewTable } from './output.js';

const TEXT_EXT = /\.(txt|md|py|json|ya?ml|toml|ini|cfg|log|sh|js|ts|html|css|xml|sql|r|ipynb|tsv|csv)$/i;
const IMAGE_EXT = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml' };
const PREVIEW_MAX = 256 * 1024;
let filesSeq = 0;

/** refreshFiles lists the shown folder of the shown sandbox. */
export async function refreshFiles() {
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
export async function uploadToWorkspace(files) {
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
