/**
 * Images: a builder for recipes (the Python SDK's `Image(...).run(...).build()`)
 * and the image registry of the daemon.
 *
 * ```ts
 * const image = new Image("code-interpreter", "python")
 *   .run("mkdir -p /workspace/data")
 *   .env({ MPLBACKEND: "Agg" })
 *   .copy("./data", "/workspace/data")
 *   .workdir("/workspace");
 * await image.build({ onEvent: (e) => e.line && console.log(e.line) });
 * const sb = await Sandbox.create({ image: "code-interpreter" });
 * ```
 *
 * @module
 */
import { basename } from "node:path";
import { errorFromEventData, InternalError, InvalidArgumentError } from "./errors.js";
import { eventData, Transport } from "./http.js";
import { collect, tar } from "./tar.js";
import { toBuildEvent, toImageInfo } from "./types.js";
/** The default base: the daemon's default image (Python and the data stack). */
export const DEFAULT_BASE_IMAGE = "python";
/**
 * A recipe builder. Each method adds a step and returns the builder; build()
 * sends the recipe (with the files of its copy steps) to the daemon, which
 * runs the steps in order, serving unchanged steps from its layer cache.
 */
export class Image {
    /** The name the image is registered under. */
    name;
    /** "debian:<suite>" or the name of an image (built or imported). */
    baseImage;
    steps = [];
    constructor(name, baseImage = DEFAULT_BASE_IMAGE) {
        this.name = name;
        this.baseImage = baseImage;
    }
    /** Runs a shell command (/bin/sh -c, as root, with network access). */
    run(command) {
        this.steps.push({ run: command });
        return this;
    }
    /** Sets environment variables for later steps and for sandboxes. */
    env(vars) {
        this.steps.push({ env: { ...vars } });
        return this;
    }
    /** Sets the working directory of later steps and of sandboxes. */
    workdir(path) {
        this.steps.push({ workdir: path });
        return this;
    }
    /**
     * Sets who sandbox processes run as: a name from the image's /etc/passwd
     * or uid[:gid]; not root. Run steps stay root.
     */
    user(user) {
        this.steps.push({ user });
        return this;
    }
    /**
     * Copies a local file or directory (a directory with its contents) to the
     * absolute path dest in the image. A dest ending in "/" takes a file under
     * its own name. The files are read and sent when build() runs.
     */
    copy(localPath, dest) {
        this.steps.push({ copyFrom: localPath, dest });
        return this;
    }
    /** The recipe this builder describes, with copy sources as build() names them. */
    recipe(registeredName) {
        let i = 0;
        const steps = this.steps.map((s) => {
            if ("copyFrom" in s)
                return { copy: { src: copySrcName(i++, s.copyFrom), dest: s.dest } };
            return s;
        });
        return { name: registeredName ?? this.name, base: this.baseImage, steps };
    }
    /**
     * Builds the image and registers it, replacing an image of that name. A
     * failing step is an InvalidArgumentError whose message carries the step's
     * exit status and the end of its output; an unknown base a NotFoundError.
     * The build context (the files of copy steps) is held in memory.
     */
    async build(opts = {}) {
        const recipe = this.recipe(opts.registeredName);
        if (opts.mirror)
            recipe.mirror = opts.mirror;
        const entries = [];
        let i = 0;
        for (const [n, s] of this.steps.entries()) {
            if (!("copyFrom" in s))
                continue;
            const src = copySrcName(i, s.copyFrom);
            // Each source goes under a directory of its own (c0/, c1/, …), so that
            // sources of one name from different places do not collide.
            entries.push({ name: `c${i}/`, type: "dir", mode: 0o755, mtime: 0 });
            i++;
            let tree;
            try {
                tree = await collect(s.copyFrom, src);
            }
            catch (err) {
                throw new InvalidArgumentError("invalid_argument", 400, `copy ${s.copyFrom}: ${err.message}`, { cause: err });
            }
            entries.push(...tree);
            // A file copied to a dest ending in "/" goes under its own name: say
            // so in the recipe, so the daemon need not guess from the slash.
            if (s.dest.endsWith("/") && tree[0]?.type !== "dir") {
                recipe.steps[n] = { copy: { src, dest: s.dest + basename(src) } };
            }
        }
        entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
        return buildRecipe(recipe, entries.length ? tar(entries) : undefined, opts);
    }
    /** Lists the daemon's images, by name: every page of its list. */
    static async list(opts = {}) {
        const { items } = await new Transport(opts).listAll({ method: "GET", path: "/v1/images", signal: opts.signal }, "images");
        return items.map(toImageInfo);
    }
    /** Returns one image by name. */
    static async get(name, opts = {}) {
        return toImageInfo(await new Transport(opts).json({ method: "GET", path: imagePath(name), signal: opts.signal }));
    }
    /**
     * Deletes an image and the layers no other image uses; a ConflictError
     * while a sandbox or snapshot uses it.
     */
    static async delete(name, opts = {}) {
        const resp = await new Transport(opts).send({ method: "DELETE", path: imagePath(name), signal: opts.signal });
        await resp.arrayBuffer();
    }
}
function copySrcName(i, localPath) {
    const base = basename(localPath.replace(/\/+$/, "")) || "root";
    return `c${i}/${base}`;
}
function imagePath(name) {
    return "/v1/images/" + encodeURIComponent(name);
}
/**
 * Sends a recipe (with a tar of its build context, when it has copy steps)
 * and follows the build's event stream to its end.
 */
export async function buildRecipe(recipe, context, opts = {}) {
    const t = new Transport(opts);
    const json = JSON.stringify(recipe);
    let body;
    let contentType;
    if (context) {
        const fd = new FormData();
        fd.append("recipe", new Blob([json], { type: "application/json" }), "recipe.json");
        fd.append("context", new Blob([context], { type: "application/x-tar" }), "context.tar");
        body = fd;
    }
    else {
        body = json;
        contentType = "application/json";
    }
    let image;
    await t.stream({ method: "POST", path: "/v1/images", body, contentType, signal: opts.signal }, "build", (plain) => {
        image = toImageInfo(plain);
    }, (ev) => {
        if (ev.event === "error")
            throw errorFromEventData(ev.data);
        const be = toBuildEvent(eventData(ev), ev.event);
        opts.onEvent?.(be);
        if (ev.event === "done") {
            if (!be.image)
                throw new InternalError("internal", 500, "done event without an image");
            image = be.image;
            return true;
        }
        return;
    });
    return image;
}
