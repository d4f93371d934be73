// Pure formatting of times, sizes, durations and /workspace paths (no DOM,
// so web/test/format.test.js runs them under Node).

/** timeAgo says how long before now time t was: "just now", "5 min ago", "3 h ago", "2 d ago", else its date. */
export function timeAgo(t, now = Date.now()) {
  const ms = new Date(t).getTime();
  if (!isFinite(ms)) return '';
  const s = (now - ms) / 1000;
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.max(1, Math.round(s / 60))} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  if (s < 7 * 86400) return `${Math.round(s / 86400)} d ago`;
  return new Date(ms).toLocaleDateString(undefined, { month: 'short', day: 'numeric', year: 'numeric' });
}

/** bytes is a size in B, KB, MB, GB or TB (powers of 1024). */
export function bytes(n) {
  if (!isFinite(n) || n <= 0) return '0 B';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  const i = Math.min(u.length - 1, Math.floor(Math.log(n) / Math.log(1024)));
  return `${(n / 1024 ** i).toFixed(i ? 1 : 0)} ${u[i]}`;
}

/** duration is a time in ms, s, or min and s. */
export function duration(ms) {
  if (!isFinite(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000); // whole seconds first, so 119.6 s is 2 min 0 s, not 1 min 60 s
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

export const fmtInt = (n) => Number(n || 0).toLocaleString();

/** parentOf is the folder that holds path p ("/" for "/" and for a top-level name). */
export const parentOf = (p) => (p === '/' ? '/' : p.replace(/\/[^/]+\/?$/, '') || '/');
/** joinPath is name in folder dir. */
export const joinPath = (dir, name) => `${dir.replace(/\/+$/, '')}/${name}`;
