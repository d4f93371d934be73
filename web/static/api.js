// The daemon's HTTP API as the UI uses it: JSON calls, multipart upload and
// Server-Sent Events over fetch (EventSource cannot POST).

import { readSSE } from './sse.js';

const KEY_STORAGE = 'forkbox.apiKey';

let apiKey = '';
try { apiKey = localStorage.getItem(KEY_STORAGE) || ''; } catch { /* storage may be off */ }

export function getApiKey() { return apiKey; }

export function setApiKey(key) {
  apiKey = key || '';
  try {
    if (apiKey) localStorage.setItem(KEY_STORAGE, apiKey);
    else localStorage.removeItem(KEY_STORAGE);
  } catch { /* ignore */ }
}

/** ApiError is a refused or failed call: HTTP status, error code, message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = code || '';
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

async function errorFrom(res) {
  let code = '';
  let message = `${res.status} ${res.statusText}`.trim();
  const text = await res.text().catch(() => '');
  if (text) {
    try {
      const body = JSON.parse(text);
      const e = body && body.error;
      if (e && typeof e === 'object') {
        code = e.code || '';
        message = e.message || message;
      } else if (typeof e === 'string') {
        message = e;
      } else if (body && body.message) {
        message = body.message;
      }
    } catch {
      message = text.trim().slice(0, 500) || message;
    }
  }
  return new ApiError(res.status, code, message);
}

async function send(method, path, init) {
  let res;
  try {
    res = await fetch(path, { method, ...init });
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new ApiError(0, 'unreachable', `Cannot reach the forkbox daemon (${err && err.message ? err.message : err}).`);
  }
  if (!res.ok) throw await errorFrom(res);
  return res;
}

/** request calls a JSON endpoint and returns the decoded body (null for 204). */
export async function request(method, path, body, { signal } = {}) {
  const init = { headers: headers({ Accept: 'application/json' }), signal };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await send(method, path, init);
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** upload posts one file as multipart part "file" to POST /v1/files. */
export async function upload(file, conversationId) {
  const form = new FormData();
  form.append('file', file, file.name);
  if (conversationId) form.append('conversation_id', conversationId);
  const res = await send('POST', '/v1/files', { headers: headers({ Accept: 'application/json' }), body: form });
  return res.json();
}

/**
 * stream POSTs body as JSON asking for text/event-stream and calls
 * onEvent(name, data) for each event as it arrives (data decoded from JSON
 * when it is JSON). A stream cut in the middle of an event does not pass
 * that half event on: the caller sees the stream end without its last
 * event. A refused call throws ApiError before any event; a
 * server that answers with JSON instead of a stream has it passed as one
 * event named "json". raw sends body as it is, with contentType.
 */
export async function stream(path, body, onEvent, { signal, raw = false, contentType = 'application/json' } = {}) {
  const res = await send('POST', path, {
    headers: headers({ 'Content-Type': contentType, Accept: 'text/event-stream' }),
    body: raw ? body : JSON.stringify(body),
    signal,
  });
  const type = res.headers.get('Content-Type') || '';
  if (!type.includes('text/event-stream')) {
    const text = await res.text();
    onEvent('json', text ? JSON.parse(text) : null);
    return;
  }
  for await (const ev of readSSE(res.body)) onEvent(ev.event, decodeData(ev.data));
}

/** fetchBlob GETs path (with the API key) and returns the body and the file name the server suggests. */
export async function fetchBlob(path, { signal } = {}) {
  const res = await send('GET', path, { headers: headers(), signal });
  const cd = res.headers.get('Content-Disposition') || '';
  const m = /filename\*=UTF-8''([^;]+)|filename="?([^";]+)"?/i.exec(cd);
  let name = '';
  if (m) { try { name = decodeURIComponent(m[1] || m[2]); } catch { name = m[1] || m[2]; } }
  return { blob: await res.blob(), name, type: res.headers.get('Content-Type') || '' };
}

/** putFile writes bytes to path in a sandbox (PUT /v1/sandboxes/{s}/files). */
export async function putFile(sandbox, path, data) {
  const res = await send('PUT', `/v1/sandboxes/${encodeURIComponent(sandbox)}/files?path=${encodeURIComponent(path)}`, {
    headers: headers({ 'Content-Type': 'application/octet-stream', Accept: 'application/json' }),
    body: data,
  });
  return res.json();
}

/** health is GET /healthz (public; null when it cannot be read). */
export async function health() {
  try {
    const res = await fetch('/healthz', { headers: headers({ Accept: 'application/json' }) });
    if (!res.ok) { await res.text().catch(() => ''); return null; }
    return await res.json();
  } catch {
    return null;
  }
}

// decodeData decodes an event's data from JSON; data that is not JSON is
// passed as it is, and empty data as null.
function decodeData(raw) {
  if (!raw) return null;
  try { return JSON.parse(raw); } catch { return raw; }
}

/**
 * listAll GETs every page of one of the daemon's paged lists (path, with the
 * query's parameters) and returns the first page's document with the items
 * under key of every page: it asks for the most a page holds and follows
 * next_cursor to the last page. A cursor answered back is an error, not a
 * loop.
 */
export async function listAll(path, key, query = {}) {
  const q = new URLSearchParams({ ...query, limit: '1000' });
  let first = null;
  const items = [];
  for (let n = 0; n < 10000; n++) {
    const doc = (await request('GET', `${path}?${q}`)) || {};
    if (!first) first = doc;
    items.push(...(doc[key] || []));
    const next = doc.next_cursor || '';
    if (!next) {
      const out = { ...first, [key]: items };
      delete out.next_cursor;
      return out;
    }
    if (next === q.get('cursor')) throw new ApiError(0, 'internal', `${path} answered the cursor it was sent as the next page's`);
    q.set('cursor', next);
  }
  throw new ApiError(0, 'internal', `${path} did not end after 10000 pages`);
}

// The endpoints the UI calls. The lists are every page of the daemon's;
// the sandboxes' includes the terminated ones (the graph draws them).
const enc = encodeURIComponent;
export const api = {
  listConversations: () => listAll('/v1/conversations', 'conversations'),
  createConversation: (title) => request('POST', '/v1/conversations', title ? { title } : {}),
  getConversation: (id) => request('GET', `/v1/conversations/${enc(id)}`),
  deleteConversation: (id) => request('DELETE', `/v1/conversations/${enc(id)}`),
  getSandbox: (id, opts) => request('GET', `/v1/sandboxes/${enc(id)}`, undefined, opts),
  listSandboxes: () => listAll('/v1/sandboxes', 'sandboxes', { include_terminated: 'true' }),
  listSnapshots: () => listAll('/v1/snapshots', 'snapshots'),
  suspend: (id) => request('POST', `/v1/sandboxes/${enc(id)}/suspend`),
  resume: (id) => request('POST', `/v1/sandboxes/${enc(id)}/resume`),
  checkpoint: (id, type = 'memory') => request('POST', `/v1/sandboxes/${enc(id)}/checkpoint`, { type }),
  fork: (id, count = 2, names) => request('POST', `/v1/sandboxes/${enc(id)}/fork`, names && names.length ? { count, names } : { count }),
  restore: (snapshotId) => request('POST', '/v1/sandboxes', { snapshot_id: snapshotId }),
  terminate: (id) => request('DELETE', `/v1/sandboxes/${enc(id)}`),
  listPorts: (id) => request('GET', `/v1/sandboxes/${enc(id)}/ports`),
  getPort: (id, port) => request('GET', `/v1/sandboxes/${enc(id)}/ports/${enc(String(port))}`),
  upload,
  chat: (body, onEvent, opts) => stream('/v1/chat', body, onEvent, opts),
  runCode: (id, code, onEvent, opts) => stream(`/v1/sandboxes/${enc(id)}/code`, { code }, onEvent, opts),
  listContexts: (id) => request('GET', `/v1/sandboxes/${enc(id)}/contexts`),
  interrupt: (id, ctx) => request('POST', `/v1/sandboxes/${enc(id)}/contexts/${enc(ctx)}/interrupt`),
  listCells: (id) => request('GET', `/v1/sandboxes/${enc(id)}/cells`),
  listFiles: (id, path) => request('GET', `/v1/sandboxes/${enc(id)}/files/list?path=${enc(path)}`),
  readFile: (id, path, opts) => fetchBlob(`/v1/sandboxes/${enc(id)}/files?path=${enc(path)}`, opts),
  writeFile: putFile,
  removeFile: (id, path, recursive = false) => request('DELETE', `/v1/sandboxes/${enc(id)}/files?path=${enc(path)}${recursive ? '&recursive=true' : ''}`),
  conversationNotebook: (id) => fetchBlob(`/v1/conversations/${enc(id)}/notebook`),
  sandboxNotebook: (id) => fetchBlob(`/v1/sandboxes/${enc(id)}/notebook`),
  importNotebook: (id, text, onEvent, opts) => stream(`/v1/sandboxes/${enc(id)}/notebook`, text, onEvent, { ...opts, raw: true }),
  health,
};
