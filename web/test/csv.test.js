// CSV previews in the browser (static/csv.js): the parser, the delimiter
// sniffer and pandas-like column types.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sniffDelimiter, parseCSV, inferType, previewCSV, isCSV } from '../static/csv.js';

test('sniffDelimiter picks the delimiter that splits the header most', () => {
  assert.equal(sniffDelimiter('a;b;c\n1;2;3'), ';');
  assert.equal(sniffDelimiter('a\tb\n1\t2'), '\t');
  assert.equal(sniffDelimiter('a|b'), '|');
  assert.equal(sniffDelimiter('a,b;c,d'), ',');
  assert.equal(sniffDelimiter('single'), ',');
  assert.equal(sniffDelimiter(''), ',');
  assert.equal(sniffDelimiter('x;y\r\n1,2,3,4'), ';', 'only the header line counts');
});

test('parseCSV: rows, quotes, escaped quotes, line ends in quotes, CRLF, BOM', () => {
  assert.deepEqual(parseCSV('a,b\n1,2\n'), [['a', 'b'], ['1', '2']]);
  assert.deepEqual(parseCSV('a,b\n1,2'), [['a', 'b'], ['1', '2']], 'no final line end');
  assert.deepEqual(parseCSV('name,note\n"Smith, J","said ""hi"""\n'), [['name', 'note'], ['Smith, J', 'said "hi"']]);
  assert.deepEqual(parseCSV('a,b\n"line1\nline2",x\n'), [['a', 'b'], ['line1\nline2', 'x']]);
  assert.deepEqual(parseCSV('a,b\r\n1,2\r\n'), [['a', 'b'], ['1', '2']]);
  assert.deepEqual(parseCSV('a,b\r1,2\r'), [['a', 'b'], ['1', '2']], 'old Mac line ends');
  assert.deepEqual(parseCSV('\uFEFFa,b\n1,2'), [['a', 'b'], ['1', '2']]);
  assert.deepEqual(parseCSV('a\n\n1\n\n'), [['a'], ['1']], 'blank lines are not rows');
  assert.deepEqual(parseCSV('a,b\n,\n'), [['a', 'b'], ['', '']], 'a row of empty fields is a row');
  assert.deepEqual(parseCSV('a;b\n1;"x;y"', {}), [['a', 'b'], ['1', 'x;y']], 'the sniffed delimiter');
  assert.deepEqual(parseCSV('a,b\n1,2', { delimiter: ';' }), [['a,b'], ['1,2']]);
  assert.deepEqual(parseCSV('a,b"c\n'), [['a', 'b"c']], 'a quote inside a field is text');
});

test('parseCSV: maxRows stops reading', () => {
  assert.deepEqual(parseCSV('h\n1\n2\n3\n', { maxRows: 2 }), [['h'], ['1']]);
  assert.deepEqual(parseCSV('h\n1\n2\n3', { maxRows: 4 }), [['h'], ['1'], ['2'], ['3']]);
});

test('parseCSV: the last line of a cut preview is dropped, however it was cut', () => {
  const cut = { complete: false };
  assert.deepEqual(parseCSV('a,b\n1,2\n3,', cut), [['a', 'b'], ['1', '2']]);
  assert.deepEqual(parseCSV('a,b\n1,2\n3', cut), [['a', 'b'], ['1', '2']]);
  assert.deepEqual(parseCSV('a,b\n1,2\n', cut), [['a', 'b'], ['1', '2']], 'a line end last: nothing was cut');
  // Cut lines that start with a delimiter or a quote were kept before.
  assert.deepEqual(parseCSV('a,b\n1,2\n,', cut), [['a', 'b'], ['1', '2']]);
  assert.deepEqual(parseCSV('name,note\n"Smith', cut), [['name', 'note']]);
  assert.deepEqual(parseCSV('a,b\n"multi\nline', cut), [['a', 'b']], 'cut inside a quoted field with a line end');
  assert.deepEqual(parseCSV('a,b\n"x",', cut), [['a', 'b']]);
});

test('parseCSV: every cut of a file gives a prefix of its rows', () => {
  const text = 'id,name,note\r\n1,"Smith, J","said ""hi"""\r\n2,,"two\nlines"\r\n3,x,y\r\n';
  const all = parseCSV(text);
  assert.equal(all.length, 4);
  for (let i = 0; i <= text.length; i++) {
    const rows = parseCSV(text.slice(0, i), { complete: false, delimiter: ',' });
    assert.deepEqual(rows, all.slice(0, rows.length), `cut at ${i}: ${JSON.stringify(text.slice(0, i))}`);
  }
});

test('inferType: pandas-like column types', () => {
  const cases = [
    [['1', '2', '-3', '+4', '01'], 'int'],
    [['1', '', '3'], 'float'],
    [['1', 'NA', 'n/a', 'null', 'None', '-', 'nan'], 'float'],
    [['1.5', '2'], 'float'],
    [['1e3', 'nan', 'inf', '-Infinity', '.5'], 'float'],
    [['true', 'False', 'TRUE'], 'bool'],
    [['2024-01-05', '2024-12-31 10:00', '2024-02-29T23:59:59Z'], 'datetime'],
    [['1/2/2024', '12/31/24 08:30'], 'datetime'],
    [['2024-13-45'], 'string'],
    [['North', 'South'], 'string'],
    [['1', 'x'], 'string'],
    [['NA', ''], 'float'],
    [[], 'string'],
    [[undefined, null], 'float'],
    [[' 7 ', '8'], 'int'],
  ];
  for (const [values, want] of cases) assert.equal(inferType(values), want, JSON.stringify(values));
});

test('previewCSV: columns, types, head and rows read', () => {
  const p = previewCSV('date,product,,units\n2024-01-01,Widget,a,3\n2024-01-02,Gadget,b,\n2024-01-03,Gizmo,c,5\n', { headRows: 2 });
  assert.deepEqual(p.columns, ['date', 'product', 'column_3', 'units']);
  assert.deepEqual(p.dtypes, ['datetime', 'string', 'string', 'float']);
  assert.deepEqual(p.head, [['2024-01-01', 'Widget', 'a', '3'], ['2024-01-02', 'Gadget', 'b', '']]);
  assert.equal(p.rows, 3);
  assert.deepEqual(previewCSV(''), { columns: [], dtypes: [], head: [], rows: 0 });
  const big = 'n\n' + Array.from({ length: 1000 }, (_, i) => String(i)).join('\n');
  const q = previewCSV(big, { typeRows: 500 });
  assert.equal(q.rows, 500, 'types come from the first typeRows rows');
  assert.deepEqual(q.dtypes, ['int']);
});

test('isCSV by name or type', () => {
  assert.equal(isCSV('sales.csv'), true);
  assert.equal(isCSV('SALES.CSV'), true);
  assert.equal(isCSV('data.tsv'), true);
  assert.equal(isCSV('data.txt', 'text/csv'), true);
  assert.equal(isCSV('data.txt'), false);
  assert.equal(isCSV('csv'), false);
  assert.equal(isCSV(undefined, undefined), false);
});
