/**
 * ForkboxClient: the calls that are not about one sandbox (health,
 * snapshots, warm pools), plus shortcuts to the sandbox and image calls with
 * one connection.
 *
 * @module
 */
import { Transport, type CallOptions, type ConnectionOptions } from "./http.js";
import { Sandbox, type SandboxCreateOptions, type SandboxListOptions } from "./sandbox.js";
import { type ImageInfo, type PoolInfo, type SandboxInfo, type Snapshot } from "./types.js";
/** Options of {@link ForkboxClient.createPool}. */
export interface CreatePoolOptions extends CallOptions {
    name: string;
    /** Restore the pool's sandboxes from this (golden) snapshot… */
    snapshotId?: string;
    /** …or start them from this image: exactly one of the two. */
    image?: string;
    /** How many sandboxes to keep ready. */
    size: number;
}
/** A connection to one forkbox daemon. */
export declare class ForkboxClient {
    readonly transport: Transport;
    private readonly opts;
    /** Address and key from the options, else FORKBOX_URL and FORKBOX_API_KEY. */
    constructor(opts?: ConnectionOptions);
    /** The daemon's address. */
    get apiUrl(): string;
    /** Checks that the daemon is up; throws when it is not. */
    health(opts?: CallOptions): Promise<void>;
    /** Creates a sandbox with this client's connection. */
    createSandbox(opts?: Omit<SandboxCreateOptions, keyof ConnectionOptions>): Promise<Sandbox>;
    /** Connects to a sandbox by name or id. */
    connect(nameOrId: string, opts?: CallOptions): Promise<Sandbox>;
    /** Lists sandboxes, newest first (terminated ones only when asked for): every page of the daemon's list. */
    listSandboxes(opts?: Omit<SandboxListOptions, keyof ConnectionOptions>): Promise<SandboxInfo[]>;
    /** Lists snapshots, newest first: every one, or those of one sandbox; every page of the daemon's list. */
    listSnapshots(opts?: CallOptions & {
        sandbox?: string;
    }): Promise<Snapshot[]>;
    /** Returns one snapshot by id. */
    getSnapshot(id: string, opts?: CallOptions): Promise<Snapshot>;
    /** Deletes a snapshot; sandboxes restored from it are not affected. */
    deleteSnapshot(id: string, opts?: CallOptions): Promise<void>;
    /** Creates a warm pool; Sandbox.create({pool}) takes from it. */
    createPool(opts: CreatePoolOptions): Promise<PoolInfo>;
    /**
     * Lists the warm pools; with `members: true` each with the sandboxes it
     * keeps ready (an admin key also gets the daemon's default pool, `_default`).
     */
    listPools(opts?: CallOptions & {
        members?: boolean;
    }): Promise<PoolInfo[]>;
    /** Deletes a warm pool and its ready sandboxes. */
    deletePool(name: string, opts?: CallOptions): Promise<void>;
    /** Lists the images. */
    listImages(opts?: CallOptions): Promise<ImageInfo[]>;
    /** Returns one image by name. */
    getImage(name: string, opts?: CallOptions): Promise<ImageInfo>;
    /** Deletes an image. */
    deleteImage(name: string, opts?: CallOptions): Promise<void>;
}
