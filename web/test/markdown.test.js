// The Markdown renderer of the model's answers (static/markdown.js): the
// subset it formats, what it leaves as text while an answer streams, and
// that nothing in an answer becomes markup it did not make.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { renderMarkdown, escapeHTML } from '../static/markdown.js';

test('escapeHTML escapes the five characters that matter in HTML', () => {
  assert.equal(escapeHTML(`<a href="x">'&'</a>`), '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;');
  assert.equal(escapeHTML(42), '42');
});

const CASES = [
  ['empty', '', ''],
  ['nothing but blank lines', '\n\n  \n', ''],
  ['a paragraph', 'Hello **world**', '<p>Hello <strong>world</strong></p>'],
  ['lines of one paragraph', 'a\nb', '<p>a<br>b</p>'],
  ['two paragraphs', 'a\n\nb', '<p>a</p><p>b</p>'],
  ['CRLF and CR', 'a\r\nb\rc', '<p>a<br>b<br>c</p>'],
  ['HTML is text', '<script>alert("x")</script> & \'q\'', '<p>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;</p>'],
  ['headings sit under the page\'s', '# Title\n## Sub ##\n###### Six', '<h2>Title</h2><h3>Sub</h3><h4>Six</h4>'],
  ['a heading needs its space', '#tag', '<p>#tag</p>'],
  ['fenced code is escaped, not formatted', '```python\nx = 1 < 2\nprint("**b**")\n```\nafter',
    '<pre><code>x = 1 &lt; 2\nprint(&quot;**b**&quot;)</code></pre><p>after</p>'],
  ['a tilde fence', '~~~\na\n~~~', '<pre><code>a</code></pre>'],
  ['a fence still open (streaming) runs to the end', 'text\n```\ncode **not bold**', '<p>text</p><pre><code>code **not bold**</code></pre>'],
  ['inline code keeps its text', 'use `a*b*c` and `<x>`', '<p>use <code>a*b*c</code> and <code>&lt;x&gt;</code></p>'],
  ['emphasis, not inside words or numbers', '*it* and _it_ but snake_case_name and 2*3*4',
    '<p><em>it</em> and <em>it</em> but snake_case_name and 2*3*4</p>'],
  ['bold with underscores', '__b__', '<p><strong>b</strong></p>'],
  ['unfinished bold (streaming) is text', 'the **profit', '<p>the **profit</p>'],
  ['an http(s) link', '[docs](https://example.com/a?b=1&c=2)',
    '<p><a href="https://example.com/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">docs</a></p>'],
  ['a URL\'s * and _ stay in it', '[a](https://x.org/*b*_c_/**d**)',
    '<p><a href="https://x.org/*b*_c_/**d**" target="_blank" rel="noopener noreferrer">a</a></p>'],
  ['a link\'s label is formatted', '[**bold** _it_](https://x.org)',
    '<p><a href="https://x.org" target="_blank" rel="noopener noreferrer"><strong>bold</strong> <em>it</em></a></p>'],
  ['a code span in a URL is no link', '[a](https://x.org/`c`)', '<p>[a](https://x.org/<code>c</code>)</p>'],
  ['NULs in the text are not placeholders', 'a\u00000\u0000b `c`', '<p>a\uFFFD0\uFFFDb <code>c</code></p>'],
  ['other links are text', '[x](javascript:alert(1)) [y](ftp://h/f)', '<p>[x](javascript:alert(1)) [y](ftp://h/f)</p>'],
  ['lists with a continuation line', '- a\n- b\n  continued\n\n1. one\n2) two',
    '<ul><li>a</li><li>b continued</li></ul><ol><li>one</li><li>two</li></ol>'],
  ['a bullet list then a numbered one', '* a\n1. b', '<ul><li>a</li></ul><ol><li>b</li></ol>'],
  ['a table, short rows padded', '| region | profit |\n|---|---:|\n| North | **1.5** |\n| South |',
    '<table><thead><tr><th>region</th><th>profit</th></tr></thead><tbody><tr><td>North</td><td><strong>1.5</strong></td></tr>' +
    '<tr><td>South</td><td></td></tr></tbody></table>'],
  ['a table row without its separator is text', '| a |', '<p>| a |</p>'],
  ['a block quote, formatted inside', '> quoted **b**\n> more\n\nafter', '<blockquote><p>quoted <strong>b</strong><br>more</p></blockquote><p>after</p>'],
  ['a paragraph ends at a heading, list or fence', 'text\n# H\ntext\n- i', '<p>text</p><h2>H</h2><p>text</p><ul><li>i</li></ul>'],
];

for (const [name, src, want] of CASES) {
  test(`renderMarkdown: ${name}`, () => {
    assert.equal(renderMarkdown(src), want);
  });
}

test('renderMarkdown: a quote in a link ends in the attribute, escaped', () => {
  const out = renderMarkdown('[x](https://e.com/"onmouseover="alert(1))');
  assert.doesNotMatch(out, /onmouseover="/);
  assert.match(out, /^<p><a href="https:\/\/e\.com\/&quot;onmouseover=&quot;alert\(1" target="_blank" rel="noopener noreferrer">x<\/a>\)<\/p>$/);
});

test('renderMarkdown: null and numbers', () => {
  assert.equal(renderMarkdown(null), '');
  assert.equal(renderMarkdown(undefined), '');
  assert.equal(renderMarkdown(42), '<p>42</p>');
});

// Whatever the model writes, the output has only the tags the renderer
// makes, links only to http(s), and no attribute but a link's own.
test('renderMarkdown: random answers make only known markup', () => {
  const TAGS = new Set(['p', 'br', 'h2', 'h3', 'h4', 'pre', 'code', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'blockquote', 'ul', 'ol', 'li', 'strong', 'em', 'a']);
  const pieces = ['<', '>', '"', "'", '&', '*', '**', '_', '__', '`', '```', '[', ']', '(', ')', '|', '|---|', '#', '# ', '- ', '1. ', '> ', '\n', '\n\n', '  ', 'a', 'b c',
    'https://x.org/', 'javascript:', '<img src=x onerror=alert(1)>', '<a href="javascript:x">', '\u0000', '\u00001\u0000', '&lt;'];
  let seed = 7;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  for (let round = 0; round < 3000; round++) {
    let src = '';
    for (let i = 1 + rand(30); i > 0; i--) src += pieces[rand(pieces.length)];
    const out = renderMarkdown(src);
    for (const m of out.matchAll(/<\/?([a-zA-Z0-9]*)([^>]*)>/g)) {
      assert.ok(TAGS.has(m[1]), `tag <${m[1]}> from ${JSON.stringify(src)}: ${out}`);
      if (m[1] === 'a' && !m[0].startsWith('</')) {
        assert.match(m[2], /^ href="https?:\/\/[^"<>]*" target="_blank" rel="noopener noreferrer"$/, `link from ${JSON.stringify(src)}: ${out}`);
      } else {
        assert.equal(m[2], '', `attributes on <${m[1]}> from ${JSON.stringify(src)}: ${out}`);
      }
    }
    assert.doesNotMatch(out, /<(?![a-z0-9/])/, `a bare < from ${JSON.stringify(src)}: ${out}`);
  }
});
