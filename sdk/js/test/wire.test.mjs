// The generated wire types (src/wire.ts, made by internal/apigen from the
// API's Go types) against the SDK's conversions, at run time.
//
// Each conversion in types.ts has a table of its wire type's keys (which
// field carries each key, or why none does); tsc holds the table to the
// wire type. This test holds the conversion to its table: fed a sample of
// its wire type with every key set, each conversion must set the field the
// table names for every key, to the JSON's value, and set no field the table
// does not name. A failure names the key and the field. It mirrors
// sdk/python/tests/test_wire.py.
import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as types from "../dist/types.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * The interfaces of a wire.ts: name → [{ key, type }]. The generator writes
 * one `  key?: type;` line per property at two spaces' indent (comments are
 * deeper, an index signature starts with "[").
 */
function parseWire(src) {
  const schemas = new Map();
  for (const m of src.matchAll(/^export interface (\w+) \{\n([\s\S]*?)^\}/gm)) {
    const fields = [...m[2].matchAll(/^  (\w+)\??: (.+);$/gm)].map(([, key, type]) => ({ key, type }));
    schemas.set(m[1], fields);
  }
  return schemas;
}

const WIRE = parseWire(readFileSync(join(root, "src", "wire.ts"), "utf8"));

/**
 * A JSON value of a wire type with every key set (lists of one). Strings
 * and numbers differ from key to key, so that a field that reads another
 * key shows; a key ending in _at gets a time.
 */
function sample(schemas, type, key = "", seq = { n: 100 }, depth = 0) {
  if (depth > 12) throw new Error(`wire type nests too deep: ${type}`);
  const alts = type.split(" | ").filter((a) => a !== "null");
  const t = alts[0];
  const n = ++seq.n;
  if (t.startsWith('"')) return JSON.parse(t); // a literal union: its first
  if (t === "true" || t === "boolean") return true;
  if (t === "number") return n;
  if (t === "string" || t === "unknown") return key.endsWith("_at") ? new Date(Date.UTC(2026, 0, 2, 3, 4, n % 60)).toISOString() : `${key}-${n}`;
  if (t.endsWith("[]")) return [sample(schemas, t.slice(0, -2), key, seq, depth + 1)];
  const rec = /^Record<string, (.+)>$/.exec(t);
  if (rec) return { k: sample(schemas, rec[1], key, seq, depth + 1) };
  const fields = schemas.get(t);
  if (!fields) throw new Error(`no sample for wire type ${type} (of ${key || "a schema"})`);
  return Object.fromEntries(fields.map((f) => [f.key, sample(schemas, f.type, f.key, seq, depth + 1)]));
}

/** Whether the SDK's value of a field carries the JSON's value. */
function carries(out, json) {
  if (out instanceof Date) return typeof json === "string" && out.getTime() === Date.parse(json);
  if (Array.isArray(json)) return Array.isArray(out) && out.length === json.length;
  if (typeof json === "object" && json !== null) return typeof out === "object" && out !== null;
  return out === json;
}

const show = (v) => (v instanceof Date ? v.toISOString() : JSON.stringify(v));

/**
 * What is wrong between a conversion ({ wire, type, convert, keys }) and its
 * wire type, in words that name the field; empty when they match.
 */
function problems(schemas, { wire, type, convert, keys }) {
  const fields = schemas.get(wire);
  if (!fields) return [`${type}: wire.ts has no interface ${wire}`];
  const wname = `wire.${wire}`;
  const wkeys = fields.map((f) => f.key);
  const out = [];
  for (const k of wkeys) {
    if (!(k in keys)) out.push(`${wname} key "${k}" is not in ${convert.name}'s table: the API added it? Say which ${type} field carries it, or why none does`);
  }
  for (const k of Object.keys(keys)) {
    if (!wkeys.includes(k)) out.push(`${convert.name}'s table has "${k}", which ${wname} lacks: the API renamed or dropped it?`);
  }
  const json = sample(schemas, wire);
  let obj;
  try {
    obj = convert(json);
  } catch (err) {
    return [...out, `${convert.name} fails on a full ${wname}: ${err}`];
  }
  for (const k of wkeys) {
    const field = keys[k];
    if (field === undefined) continue;
    if (typeof field === "object") {
      if (!field.notExposed) out.push(`${convert.name}'s table leaves out ${wname} key "${k}" without saying why`);
      continue;
    }
    if (obj[field] === undefined) {
      out.push(`${wname} key "${k}" is not reachable from ${type}: ${convert.name} leaves ${type}.${field} unset though the JSON has it`);
    } else if (!carries(obj[field], json[k])) {
      out.push(`${type}.${field} is ${show(obj[field])}, not the JSON's ${k} ${show(json[k])}: it reads another key?`);
    }
  }
  const named = new Set(Object.values(keys).filter((f) => typeof f === "string"));
  for (const f of Object.keys(obj)) {
    if (!named.has(f)) out.push(`${type}.${f} is set, but no key of ${wname} is carried by it in ${convert.name}'s table`);
  }
  return out;
}

describe("wire types", () => {
  test("wire.ts parses into its interfaces, each with keys and a sample", () => {
    assert.ok(WIRE.size > 50, `only ${WIRE.size} interfaces in src/wire.ts: did the generator's layout change?`);
    for (const [name, fields] of WIRE) {
      assert.ok(fields.length > 0, `wire.${name} has no keys`);
      sample(WIRE, name); // every key's type resolves to JSON
    }
    assert.deepEqual(
      WIRE.get("Sandbox").slice(0, 3).map((f) => f.key),
      ["id", "name", "state"],
    );
  });

  test("every conversion is checked", () => {
    const listed = new Set(types.conversions.map((c) => c.convert));
    for (const [name, fn] of Object.entries(types)) {
      if (/^to[A-Z]/.test(name) && typeof fn === "function") {
        assert.ok(listed.has(fn), `${name} is not in types.ts's conversions: add it with its wire type and key table`);
      }
    }
  });

  test("every conversion carries every key of its wire type", () => {
    const found = types.conversions.flatMap((c) => problems(WIRE, c));
    assert.deepEqual(found, [], "conversions and wire types disagree:\n  " + found.join("\n  "));
  });

  test("the check names the field", () => {
    const schemas = parseWire("export interface Probe {\n  kept: string;\n  /** A comment: not a key. */\n  added?: number;\n}\n");
    const probe = (convert, keys) => problems(schemas, { wire: "Probe", type: "P", convert, keys });
    const kept = (w) => ({ kept: w.kept });
    assert.deepEqual(probe(kept, { kept: "kept" }), [
      `wire.Probe key "added" is not in kept's table: the API added it? Say which P field carries it, or why none does`,
    ]);
    assert.match(probe(kept, { kept: "kept", added: "added" }).join("\n"), /wire\.Probe key "added" is not reachable from P: kept leaves P\.added unset/);
    assert.deepEqual(probe(kept, { kept: "kept", added: { notExposed: "a probe" } }), []);
    assert.match(probe((w) => ({ kept: w.kept, added: 1 }), { kept: "kept", added: "added" }).join("\n"), /P\.added is 1, not the JSON's added \d+/);
    assert.match(probe((w) => ({ kept: w.kept, old: 1 }), { kept: "kept", added: { notExposed: "x" }, gone: "old" }).join("\n"), /table has "gone", which wire\.Probe lacks/);
    assert.match(probe((w) => ({ kept: w.kept, more: 1 }), { kept: "kept", added: { notExposed: "x" } }).join("\n"), /P\.more is set, but no key of wire\.Probe/);
  });
});
