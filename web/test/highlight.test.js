// The Python highlighter's tokenizer (static/highlight.js): the tokens give
// back the source exactly, and each kind is found where Python has it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tokenize } from '../static/highlight.js';

/** kinds lists the highlighted tokens as kind:text. */
const kinds = (src) => tokenize(src).filter(([k]) => k).map(([k, t]) => `${k}:${t}`);

test('tokenize: functions, keywords, operators, comments', () => {
  assert.deepEqual(kinds('def f(x):\n    return x  # done'), ['kw:def', 'def:f', 'op::', 'kw:return', 'comment:# done']);
  assert.deepEqual(kinds('class Model(Base): pass'), ['kw:class', 'def:Model', 'op::', 'kw:pass']);
  assert.deepEqual(kinds('x is None and not y'), ['kw:is', 'kw:None', 'kw:and', 'kw:not']);
  assert.deepEqual(kinds('a = b + c'), ['op:=', 'op:+']);
});

test('tokenize: strings with prefixes, triple quotes, escapes', () => {
  assert.deepEqual(kinds(`s = f"a{b}" + r'\\d' + b"x"`), ['op:=', 'str:f"a{b}"', 'op:+', "str:r'\\d'", 'op:+', 'str:b"x"']);
  assert.deepEqual(kinds('"""doc\nstring"""\nx'), ['str:"""doc\nstring"""']);
  assert.deepEqual(kinds(`'it\\'s' # not a comment inside`), ["str:'it\\'s'", 'comment:# not a comment inside']);
  assert.deepEqual(kinds("'#' + x"), ["str:'#'", 'op:+']);
  assert.deepEqual(kinds("'abc\nx = 1"), ["str:'abc", 'op:=', 'num:1'], 'an unclosed one-line string ends at the line end');
  assert.deepEqual(kinds('elif"x"'), ['kw:elif', 'str:"x"'], 'a name ending in a prefix letter is no prefix');
});

test('tokenize: numbers, not names or attributes', () => {
  assert.deepEqual(kinds('x = 0x1f + 1_000 + 3.14e-2 + 2j + .5'), ['op:=', 'num:0x1f', 'op:+', 'num:1_000', 'op:+', 'num:3.14e-2', 'op:+', 'num:2j', 'op:+', 'num:.5']);
  assert.deepEqual(kinds('x1 = a.b2'), ['op:=']);
});

test('tokenize: builtins, but not as attributes', () => {
  assert.deepEqual(kinds('print(len(x)); obj.print; obj . sum'), ['builtin:print', 'builtin:len']);
  assert.deepEqual(kinds('df.sort_values().head()'), []);
});

test('tokenize: decorators only where a line starts', () => {
  assert.deepEqual(kinds('@app.route("/")\ndef f(): pass'), ['deco:@app.route', 'str:"/"', 'kw:def', 'def:f', 'op::', 'kw:pass']);
  assert.deepEqual(kinds('  @cache\n'), ['deco:@cache']);
  assert.deepEqual(kinds('a @ b'), []);
});

test('tokenize: the tokens give back the source, whatever it is', () => {
  const sources = [
    '',
    'import pandas as pd\ndf = pd.read_csv("/workspace/sales.csv")\ndf.groupby("region")["revenue"].sum()\n',
    'for i in range(10):\n\tif i % 2 == 0: print(f"{i:>3}")\n',
    'x = """never closed',
    "s = '\\",
    '0x 1e 1.e5 ._ 0b102 @\n@',
  ];
  const alphabet = ['def', 'class', 'print', ' ', '\n', '\t', '"', "'", '"""', '#', '\\', '@', '.', '0', '1e', 'x', 'f', 'r', 'b', '_', '+', '=', '(', ')', ':', 'é', '\u{1F600}'];
  let seed = 3;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  for (let i = 0; i < 2000; i++) {
    let s = '';
    for (let j = rand(40); j > 0; j--) s += alphabet[rand(alphabet.length)];
    sources.push(s);
  }
  for (const src of sources) {
    const toks = tokenize(src);
    assert.equal(toks.map(([, t]) => t).join(''), src, JSON.stringify(src));
    for (const [k, t] of toks) {
      assert.ok(t.length > 0, `an empty token in ${JSON.stringify(src)}`);
      assert.ok(['', 'kw', 'builtin', 'str', 'comment', 'num', 'deco', 'def', 'op'].includes(k), k);
    }
    // Plain text is merged: never two plain tokens in a row.
    for (let j = 1; j < toks.length; j++) assert.ok(toks[j][0] || toks[j - 1][0], `two plain tokens in ${JSON.stringify(src)}`);
  }
});
