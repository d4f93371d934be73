/**
 * ForkboxClient: the calls that are not about one sandbox (health,
 * snapshots, warm pools), plus shortcuts to the sandbox and image calls with
 * one connection.
 *
 * @module
 */

import { UnavailableError } from "./errors.js";
import { Transport, type CallOptions, type ConnectionOptions } from "./http.js";
import { Image } from "./image.js";
import { Sandbox, type SandboxCreateOptions, type SandboxListOptions } from "./sandbox.js";
import { toPoolInfo, toSnapshot, type ImageInfo, type PoolInfo, type SandboxInfo, type Snapshot, type Wire } from "./types.js";

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
export class ForkboxClient {
  readonly transport: Transport;
  private readonly opts: ConnectionOptions;

  /** Address and key from the options, else FORKBOX_URL and FORKBOX_API_KEY. */
  constructor(opts: ConnectionOptions = {}) {
    this.transport = new Transport(opts);
    this.opts = { apiUrl: this.transport.apiUrl, apiKey: this.transport.apiKey ?? "", ...(opts.fetch ? { fetch: opts.fetch } : {}) };
  }

  /** The daemon's address. */
  get apiUrl(): string {
    return this.transport.apiUrl;
  }

  /** Checks that the daemon is up; throws when it is not. */
  async health(opts: CallOptions = {}): Promise<void> {
    const h = await this.transport.json<{ status?: string }>({ method: "GET", path: "/healthz", signal: opts.signal });
    if (h?.status !== "ok") throw new UnavailableError("unavailable", 503, `daemon is not healthy: status ${JSON.stringify(h?.status)}`);
  }

  /** Creates a sandbox with this client's connection. */
  createSandbox(opts: Omit<SandboxCreateOptions, keyof ConnectionOptions> = {}): Promise<Sandbox> {
    return Sandbox.create({ ...opts, ...this.opts });
  }

  /** Connects to a sandbox by name or id. */
  connect(nameOrId: string, opts: CallOptions = {}): Promise<Sandbox> {
    return Sandbox.connect(nameOrId, { ...opts, ...this.opts });
  }

  /** Lists sandboxes, newest first (terminated ones only when asked for): every page of the daemon's list. */
  listSandboxes(opts: Omit<SandboxListOptions, keyof ConnectionOptions> = {}): Promise<SandboxInfo[]> {
    return Sandbox.list({ ...opts, ...this.opts });
  }

  /** Lists snapshots, newest first: every one, or those of one sandbox; every page of the daemon's list. */
  async listSnapshots(opts: CallOptions & { sandbox?: string } = {}): Promise<Snapshot[]> {
    const { items } = await this.transport.listAll<Wire>(
      { method: "GET", path: "/v1/snapshots", query: { sandbox: opts.sandbox || undefined }, signal: opts.signal },
      "snapshots",
    );
    return items.map(toSnapshot);
  }

  /** Returns one snapshot by id. */
  async getSnapshot(id: string, opts: CallOptions = {}): Promise<Snapshot> {
    return toSnapshot(await this.transport.json<Wire>({ method: "GET", path: snapshotPath(id), signal: opts.signal }));
  }

  /** Deletes a snapshot; sandboxes restored from it are not affected. */
  async deleteSnapshot(id: string, opts: CallOptions = {}): Promise<void> {
    await (await this.transport.send({ method: "DELETE", path: snapshotPath(id), signal: opts.signal })).arrayBuffer();
  }

  /** Creates a warm pool; Sandbox.create({pool}) takes from it. */
  async createPool(opts: CreatePoolOptions): Promise<PoolInfo> {
    const body: Wire = { name: opts.name, size: opts.size };
    if (opts.snapshotId) body.snapshot_id = opts.snapshotId;
    if (opts.image) body.image = opts.image;
    return toPoolInfo(await this.transport.json<Wire>({ method: "POST", path: "/v1/pools", json: body, signal: opts.signal }));
  }

  /**
   * Lists the warm pools; with `members: true` each with the sandboxes it
   * keeps ready (an admin key also gets the daemon's default pool, `_default`).
   */
  async listPools(opts: CallOptions & { members?: boolean } = {}): Promise<PoolInfo[]> {
    const path = opts.members ? "/v1/pools?members=true" : "/v1/pools";
    const w = await this.transport.json<Wire>({ method: "GET", path, signal: opts.signal });
    return (w.pools ?? []).map(toPoolInfo);
  }

  /** Deletes a warm pool and its ready sandboxes. */
  async deletePool(name: string, opts: CallOptions = {}): Promise<void> {
    await (await this.transport.send({ method: "DELETE", path: "/v1/pools/" + encodeURIComponent(name), signal: opts.signal })).arrayBuffer();
  }

  /** Lists the images. */
  listImages(opts: CallOptions = {}): Promise<ImageInfo[]> {
    return Image.list({ ...opts, ...this.opts });
  }

  /** Returns one image by name. */
  getImage(name: string, opts: CallOptions = {}): Promise<ImageInfo> {
    return Image.get(name, { ...opts, ...this.opts });
  }

  /** Deletes an image. */
  deleteImage(name: string, opts: CallOptions = {}): Promise<void> {
    return Image.delete(name, { ...opts, ...this.opts });
  }
}

function snapshotPath(id: string): string {
  return "/v1/snapshots/" + encodeURIComponent(id);
}
