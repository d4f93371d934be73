// The UI's modules link: every import names a module of static/ and an
// export it has. A browser refuses the whole UI when one import is wrong,
// so this checks what a page load would, without a browser: the modules
// are parsed and linked (node:vm, which needs --experimental-vm-modules),
// never run. It also checks that app.js reaches every module, and that the
// pure modules the other tests import stay free of the DOM ones.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import vm from 'node:vm';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'static');

/** The modules that run without a DOM (the unit tests import them). */
const PURE = new Set(['sse.js', 'markdown.js', 'csv.js', 'highlight.js', 'graph.js', 'format.js']);

async function sources() {
  const out = new Map();
  for (const name of (await readdir(dir)).filter((n) => n.endsWith('.js'))) {
    out.set(name, await readFile(path.join(dir, name), 'utf8'));
  }
  return out;
}

function needVM() {
  assert.equal(typeof vm.SourceTextModule, 'function', 'node:vm has no SourceTextModule: run node with --experimental-vm-modules (go test ./web/ and npm test do)');
}

/** link parses entry and what it imports, transitively, and links them; it returns the modules by name. */
async function link(entry, srcs) {
  needVM();
  const mods = new Map();
  const load = (name) => {
    if (!mods.has(name)) {
      if (!srcs.has(name)) throw new Error(`there is no module static/${name}`);
      mods.set(name, new vm.SourceTextModule(srcs.get(name), { identifier: name }));
    }
    return mods.get(name);
  };
  await load(entry).link((specifier, referrer) => {
    assert.match(specifier, /^\.\/[\w-]+\.js$/, `${referrer.identifier} imports ${specifier}: the UI's modules import each other as ./name.js`);
    return load(specifier.slice(2));
  });
  return mods;
}

test('every module links from app.js, and app.js reaches them all', async () => {
  const srcs = await sources();
  assert.ok(srcs.size >= 15, `only ${srcs.size} modules`);
  const mods = await link('app.js', srcs);
  for (const [name, m] of mods) assert.equal(m.status, 'linked', name);
  assert.deepEqual([...mods.keys()].sort(), [...srcs.keys()].sort(), 'modules app.js does not load are dead code');
});

test('a wrong import fails to link (the check above has teeth)', async () => {
  const srcs = await sources();
  srcs.set('app.js', "import { noSuchExport } from './dom.js';\n");
  await assert.rejects(link('app.js', srcs), (err) => err instanceof SyntaxError && /noSuchExport/.test(err.message));
  srcs.set('app.js', "import { h } from './nope.js';\n");
  await assert.rejects(link('app.js', srcs), /no module static\/nope\.js/);
});

test('the pure modules import only pure modules', async () => {
  needVM();
  const srcs = await sources();
  for (const name of PURE) {
    const m = new vm.SourceTextModule(srcs.get(name), { identifier: name });
    for (const dep of m.dependencySpecifiers) {
      assert.ok(PURE.has(dep.replace(/^\.\//, '')), `${name} imports ${dep}, which needs a DOM`);
    }
  }
});
