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
import { type CallOptions, type ConnectionOptions } from "./http.js";
import { type BuildEvent, type ImageInfo } from "./types.js";
/** One step of a recipe, as the API takes it: exactly one field is set. */
export interface RecipeStep {
    run?: string;
    env?: Record<string, string>;
    workdir?: string;
    user?: string;
    copy?: {
        src: string;
        dest: string;
    };
}
/** A recipe, as the API takes it. */
export interface Recipe {
    name: string;
    base: string;
    mirror?: string;
    steps: RecipeStep[];
}
/** Options of {@link Image.build}. */
export interface BuildOptions extends ConnectionOptions, CallOptions {
    /** Register the image under this name instead of the builder's name. */
    registeredName?: string;
    /** A Debian mirror for a debian: base. */
    mirror?: string;
    /** Receives the build's progress: step, log and done events. */
    onEvent?: (event: BuildEvent) => void;
}
/** The default base: the daemon's default image (Python and the data stack). */
export declare const DEFAULT_BASE_IMAGE = "python";
/**
 * A recipe builder. Each method adds a step and returns the builder; build()
 * sends the recipe (with the files of its copy steps) to the daemon, which
 * runs the steps in order, serving unchanged steps from its layer cache.
 */
export declare class Image {
    /** The name the image is registered under. */
    readonly name: string;
    /** "debian:<suite>" or the name of an image (built or imported). */
    readonly baseImage: string;
    private readonly steps;
    constructor(name: string, baseImage?: string);
    /** Runs a shell command (/bin/sh -c, as root, with network access). */
    run(command: string): this;
    /** Sets environment variables for later steps and for sandboxes. */
    env(vars: Record<string, string>): this;
    /** Sets the working directory of later steps and of sandboxes. */
    workdir(path: string): this;
    /**
     * Sets who sandbox processes run as: a name from the image's /etc/passwd
     * or uid[:gid]; not root. Run steps stay root.
     */
    user(user: string): this;
    /**
     * Copies a local file or directory (a directory with its contents) to the
     * absolute path dest in the image. A dest ending in "/" takes a file under
     * its own name. The files are read and sent when build() runs.
     */
    copy(localPath: string, dest: string): this;
    /** The recipe this builder describes, with copy sources as build() names them. */
    recipe(registeredName?: string): Recipe;
    /**
     * Builds the image and registers it, replacing an image of that name. A
     * failing step is an InvalidArgumentError whose message carries the step's
     * exit status and the end of its output; an unknown base a NotFoundError.
     * The build context (the files of copy steps) is held in memory.
     */
    build(opts?: BuildOptions): Promise<ImageInfo>;
    /** Lists the daemon's images, by name: every page of its list. */
    static list(opts?: ConnectionOptions & CallOptions): Promise<ImageInfo[]>;
    /** Returns one image by name. */
    static get(name: string, opts?: ConnectionOptions & CallOptions): Promise<ImageInfo>;
    /**
     * Deletes an image and the layers no other image uses; a ConflictError
     * while a sandbox or snapshot uses it.
     */
    static delete(name: string, opts?: ConnectionOptions & CallOptions): Promise<void>;
}
/**
 * Sends a recipe (with a tar of its build context, when it has copy steps)
 * and follows the build's event stream to its end.
 */
export declare function buildRecipe(recipe: Recipe, context: Uint8Array | undefined, opts?: BuildOptions): Promise<ImageInfo>;
