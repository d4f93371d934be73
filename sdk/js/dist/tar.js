/**
 * A small tar writer (POSIX ustar with pax headers for long names and link
 * targets), enough to send a build context: directories, regular files and
 * symbolic links (written as links, never followed), in lexical order,
 * without owner names or ids, so that the same tree gives the same tar.
 *
 * @module
 */
import { lstat, readdir, readFile, readlink, realpath } from "node:fs/promises";
import { basename, join } from "node:path";
const BLOCK = 512;
const enc = new TextEncoder();
function octal(n, width) {
    // width includes the terminating NUL.
    return n.toString(8).padStart(width - 1, "0") + "\0";
}
function putString(buf, off, width, s) {
    const b = enc.encode(s);
    buf.set(b.subarray(0, width), off);
}
function fits(s, width) {
    const b = enc.encode(s);
    return b.length <= width && !/[^\x20-\x7e]/.test(s);
}
function paxRecord(key, value) {
    // "<len> <key>=<value>\n" where len counts itself.
    const body = ` ${key}=${value}\n`;
    let len = enc.encode(body).length;
    let total = len + String(len).length;
    if (String(total).length !== String(len).length)
        total = len + String(total).length;
    return `${total}${body}`;
}
function header(name, typeflag, size, mode, mtime, linkname) {
    const h = new Uint8Array(BLOCK);
    putString(h, 0, 100, name);
    putString(h, 100, 8, octal(mode & 0o7777, 8));
    putString(h, 108, 8, octal(0, 8));
    putString(h, 116, 8, octal(0, 8));
    putString(h, 124, 12, octal(size, 12));
    putString(h, 136, 12, octal(Math.max(0, Math.floor(mtime)), 12));
    putString(h, 148, 8, "        ");
    putString(h, 156, 1, typeflag);
    putString(h, 157, 100, linkname);
    putString(h, 257, 6, "ustar\0");
    putString(h, 263, 2, "00");
    let sum = 0;
    for (const b of h)
        sum += b;
    putString(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
    return h;
}
function padded(data) {
    const rem = data.length % BLOCK;
    return rem === 0 ? [data] : [data, new Uint8Array(BLOCK - rem)];
}
/** Writes entries as one tar archive. */
export function tar(entries) {
    const parts = [];
    for (const e of entries) {
        const data = e.type === "file" ? (e.data ?? new Uint8Array()) : new Uint8Array();
        const linkname = e.linkname ?? "";
        const pax = [];
        let name = e.name;
        if (!fits(name, 100)) {
            pax.push(paxRecord("path", name));
            name = name.slice(0, 99).replace(/[^\x20-\x7e]/g, "_");
        }
        let link = linkname;
        if (!fits(link, 100)) {
            pax.push(paxRecord("linkpath", link));
            link = link.slice(0, 99).replace(/[^\x20-\x7e]/g, "_");
        }
        if (data.length > 0o77777777777)
            throw new Error(`${e.name}: too large for a tar entry`);
        if (pax.length) {
            const body = enc.encode(pax.join(""));
            parts.push(header("PaxHeaders/" + basename(name).slice(0, 80), "x", body.length, 0o644, e.mtime, ""));
            parts.push(...padded(body));
        }
        const flag = e.type === "dir" ? "5" : e.type === "symlink" ? "2" : "0";
        parts.push(header(name, flag, data.length, e.mode, e.mtime, link));
        if (data.length)
            parts.push(...padded(data));
    }
    parts.push(new Uint8Array(BLOCK * 2));
    let n = 0;
    for (const p of parts)
        n += p.length;
    const out = new Uint8Array(n);
    let off = 0;
    for (const p of parts) {
        out.set(p, off);
        off += p.length;
    }
    return out;
}
/**
 * Collects the tree at path (a directory, a file or a link) as tar entries
 * named under prefix: a directory's contents go under "prefix/", a file or
 * link is "prefix" itself. Other kinds of file (sockets, devices, FIFOs) are
 * skipped.
 */
export async function collect(path, prefix) {
    const out = [];
    const top = await lstat(path);
    // The top itself may be a symbolic link to the directory or file meant.
    const root = top.isSymbolicLink() ? await realpath(path) : path;
    const walk = async (p, name) => {
        const st = await lstat(p);
        const mtime = Math.floor(st.mtimeMs / 1000);
        const mode = st.mode & 0o7777;
        if (st.isDirectory()) {
            out.push({ name: name + "/", type: "dir", mode, mtime });
            const kids = (await readdir(p)).sort();
            for (const k of kids)
                await walk(join(p, k), name + "/" + k);
        }
        else if (st.isFile()) {
            out.push({ name, type: "file", mode, mtime, data: await readFile(p) });
        }
        else if (st.isSymbolicLink()) {
            out.push({ name, type: "symlink", mode, mtime, linkname: await readlink(p) });
        }
    };
    await walk(root, prefix);
    return out;
}
