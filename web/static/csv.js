// CSV in the browser: a parser (quotes, escaped quotes, CRLF, a delimiter
// sniffed from the header) and per-column type inference like pandas'
// (int, float, bool, datetime, string), for previews of uploaded files.

/** sniffDelimiter picks , ; tab or | by which splits the header line most. */
export function sniffDelimiter(text) {
  const line = String(text).split(/\r?\n/, 1)[0] || '';
  let best = ',';
  let most = 0;
  for (const d of [',', ';', '\t', '|']) {
    const n = line.split(d).length - 1;
    if (n > most) { most = n; best = d; }
  }
  return best;
}

/**
 * parseCSV returns up to maxRows records (arrays of strings) of text; the
 * first is the header. A last line cut off (a preview of the file's start)
 * is dropped when complete is false.
 */
export function parseCSV(text, { delimiter = sniffDelimiter(text), maxRows = Infinity, complete = true } = {}) {
  const s = String(text).replace(/^\uFEFF/, '');
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  let i = 0;
  while (i < s.length && rows.length < maxRows) {
    const c = s[i];
    if (!quoted && (c === '\r' || c === '\n')) {
      row.push(field); field = '';
      rows.push(row); row = [];
      i += c === '\r' && s[i + 1] === '\n' ? 2 : 1;
      continue;
    }
    if (quoted) {
      if (c === '"') {
        if (s[i + 1] === '"') { field += '"'; i += 2; continue; }
        quoted = false; i++; continue;
      }
      field += c; i++; continue;
    }
    if (c === '"' && field === '') { quoted = true; i++; continue; }
    if (c === delimiter) { row.push(field); field = ''; i++; continue; }
    field += c; i++;
  }
  // What follows the last line end is a last line without its end: a whole
  // one when the text is the whole file, else possibly cut (a quoted field
  // or a row half read), so dropped.
  if (rows.length < maxRows && (field !== '' || row.length) && complete) {
    row.push(field);
    rows.push(row);
  }
  // Blank lines are not rows.
  return rows.filter((r) => !(r.length === 1 && r[0] === ''));
}

const INT = /^[+-]?\d+$/;
const FLOAT = /^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|infinity|nan)$/i;
const BOOL = /^(true|false)$/i;
const DATE = /^\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$|^\d{1,2}\/\d{1,2}\/\d{2,4}( \d{1,2}:\d{2}(:\d{2})?)?$/;
const MISSING = /^(|na|n\/a|nan|null|none|-)$/i;

/** inferType names the type of one column's values: int, float, bool, datetime or string. */
export function inferType(values) {
  const vs = values.map((v) => String(v ?? '').trim());
  const present = vs.filter((v) => !MISSING.test(v));
  if (!present.length) return vs.length ? 'float' : 'string'; // all missing: pandas makes it NaN
  const missing = present.length < vs.length;
  if (present.every((v) => INT.test(v))) return missing ? 'float' : 'int';
  if (present.every((v) => FLOAT.test(v))) return 'float';
  if (present.every((v) => BOOL.test(v))) return 'bool';
  if (present.every((v) => DATE.test(v) && !Number.isNaN(Date.parse(v.includes('/') ? v : v.replace(' ', 'T'))))) return 'datetime';
  return 'string';
}

/**
 * previewCSV parses the start of a CSV: its columns, their inferred types
 * (from up to typeRows rows), the first headRows rows, and how many rows
 * were read.
 */
export function previewCSV(text, { headRows = 5, typeRows = 500, complete = true } = {}) {
  const rows = parseCSV(text, { maxRows: typeRows + 1, complete });
  if (!rows.length) return { columns: [], dtypes: [], head: [], rows: 0 };
  const [header, ...body] = rows;
  const columns = header.map((c, i) => c.trim() || `column_${i + 1}`);
  const dtypes = columns.map((_, j) => inferType(body.map((r) => r[j])));
  return { columns, dtypes, head: body.slice(0, headRows), rows: body.length };
}

/** isCSV tells by name (or type) whether a file is a CSV. */
export function isCSV(name, type = '') {
  return /\.(csv|tsv)$/i.test(name || '') || /text\/(csv|tab-separated-values)/.test(type || '');
}
