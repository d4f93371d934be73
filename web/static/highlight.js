// A small Python syntax highlighter for code cells: a tokenizer that knows
// keywords, builtins, strings (with prefixes and triple quotes), comments,
// numbers and decorators. It returns DOM nodes (spans with classes tk-*),
// never HTML, so nothing in the code can become markup.

const KEYWORDS = new Set([
  'False', 'None', 'True', 'and', 'as', 'assert', 'async', 'await', 'break', 'class', 'continue',
  'def', 'del', 'elif', 'else', 'except', 'finally', 'for', 'from', 'global', 'if', 'import', 'in',
  'is', 'lambda', 'match', 'case', 'nonlocal', 'not', 'or', 'pass', 'raise', 'return', 'try',
  'while', 'with', 'yield',
]);

const BUILTINS = new Set([
  'abs', 'all', 'any', 'bool', 'dict', 'dir', 'enumerate', 'filter', 'float', 'format', 'getattr',
  'hasattr', 'int', 'isinstance', 'len', 'list', 'map', 'max', 'min', 'next', 'open', 'print',
  'range', 'repr', 'reversed', 'round', 'set', 'setattr', 'sorted', 'str', 'sum', 'tuple', 'type',
  'zip', 'self', 'super', 'object', 'Exception', 'ValueError', 'KeyError', 'TypeError',
]);

/**
 * tokenize splits Python source into [kind, text] pairs whose texts, joined,
 * give back the source. Kinds: kw, builtin, str, comment, num, deco, def
 * (the name after def/class), op, '' (anything else).
 */
export function tokenize(src) {
  const s = String(src);
  const out = [];
  let i = 0;
  let plain = '';
  let afterDef = false;
  const push = (kind, text) => {
    if (!kind) { plain += text; return; }
    if (plain) { out.push(['', plain]); plain = ''; }
    out.push([kind, text]);
  };
  while (i < s.length) {
    const c = s[i];
    // Comments run to the end of the line.
    if (c === '#') {
      let j = s.indexOf('\n', i);
      if (j < 0) j = s.length;
      push('comment', s.slice(i, j));
      i = j;
      continue;
    }
    // Strings, with an optional prefix (r, b, f, u, rb, fr, …).
    const sm = /^([rRbBuUfF]{0,2})('''|"""|'|")/.exec(s.slice(i, i + 5));
    if (sm && (sm[1] === '' || !/[\w]/.test(s[i - 1] || ''))) {
      const q = sm[2];
      let j = i + sm[0].length;
      const raw = /[rR]/.test(sm[1]);
      for (;;) {
        if (j >= s.length) break;
        if (s[j] === '\\' && !raw) { j += 2; continue; }
        if (s[j] === '\\' && raw) { j += 2; continue; }
        if (q.length === 1 && s[j] === '\n') break; // an unclosed one-line string
        if (s.startsWith(q, j)) { j += q.length; break; }
        j++;
      }
      j = Math.min(j, s.length);
      push('str', s.slice(i, j));
      i = j;
      afterDef = false;
      continue;
    }
    // Numbers: 42, 3.14, 1e-3, 0x1f, 1_000, .5, 2j.
    const nm = /^(0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][+-]?\d+)?[jJ]?)/.exec(s.slice(i, i + 64));
    if (nm && nm[0] && !/[\w.]/.test(s[i - 1] || '') && /[\d.]/.test(c) && nm[0] !== '.') {
      push('num', nm[0]);
      i += nm[0].length;
      continue;
    }
    // Names.
    const wm = /^[A-Za-z_][A-Za-z0-9_]*/.exec(s.slice(i, i + 256));
    if (wm) {
      const w = wm[0];
      const prevDot = /\.\s*$/.test(s.slice(Math.max(0, i - 3), i));
      if (afterDef) { push('def', w); afterDef = false; } else if (KEYWORDS.has(w) && !prevDot) {
        push('kw', w);
        afterDef = w === 'def' || w === 'class';
      } else if (BUILTINS.has(w) && !prevDot) push('builtin', w);
      else push('', w);
      i += w.length;
      continue;
    }
    // Decorators at the start of a line.
    if (c === '@' && /(^|\n)[ \t]*$/.test(s.slice(Math.max(0, i - 80), i))) {
      const dm = /^@[\w.]+/.exec(s.slice(i, i + 256));
      if (dm) { push('deco', dm[0]); i += dm[0].length; continue; }
    }
    if ('+-*/%=<>!&|^~:'.includes(c)) { push('op', c); i++; continue; }
    push('', c);
    i++;
  }
  if (plain) out.push(['', plain]);
  return out;
}

/** highlight fills el (a <code>) with the highlighted source. */
export function highlight(el, src) {
  const frag = document.createDocumentFragment();
  for (const [kind, text] of tokenize(src)) {
    if (!kind) { frag.append(document.createTextNode(text)); continue; }
    const span = document.createElement('span');
    span.className = `tk-${kind}`;
    span.textContent = text;
    frag.append(span);
  }
  el.replaceChildren(frag);
  el.classList.add('hl');
  return el;
}
