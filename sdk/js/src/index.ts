/**
 * The TypeScript SDK of forkbox, the self-hosted stateful code-interpreter
 * sandbox daemon: fetch-based, for Node 20 and later.
 *
 * ```ts
 * import { Sandbox, CheckpointType } from "@forkbox/sdk";
 *
 * const sb = await Sandbox.create({ name: "session-alice", memoryMb: 2048 });
 * await sb.runCode("import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})");
 * const ex = await sb.runCode("df.x.sum()");
 * console.log(ex.text); // "6"
 * const snap = await sb.checkpoint({ type: CheckpointType.MEMORY });
 * const restored = await Sandbox.create({ snapshotId: snap.snapshotId });
 * ```
 *
 * The daemon's address and API key come from the options ({ apiUrl, apiKey })
 * or from FORKBOX_URL and FORKBOX_API_KEY. Errors are typed: see
 * {@link ForkboxError} and its subclasses.
 *
 * @module
 */

export { ForkboxClient, type CreatePoolOptions } from "./client.js";
export {
  AuthenticationError,
  BusyError,
  codeForStatus,
  ConflictError,
  ConnectionError,
  errorFromResponse,
  FailedPreconditionError,
  ForkboxError,
  InsufficientStorageError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  PermissionDeniedError,
  ResourceExhaustedError,
  TimeoutError,
  TooLargeError,
  UnavailableError,
  type ErrorCode,
} from "./errors.js";
export { DEFAULT_URL, PAGE_SIZE, Transport, VERSION, type CallOptions, type ConnectionOptions, type RequestBody } from "./http.js";
export { buildRecipe, DEFAULT_BASE_IMAGE, Image, type BuildOptions, type Recipe, type RecipeStep } from "./image.js";
export {
  Files,
  Sandbox,
  type CheckpointOptions,
  type CreateContextOptions,
  type FileData,
  type ForkedSandboxes,
  type ForkOptions,
  type RemoveOptions,
  type RunCodeOptions,
  type RunOptions,
  type SandboxCreateOptions,
  type SandboxListOptions,
  type WriteOptions,
} from "./sandbox.js";
export { readSSE, SSEParser, type SSEEvent } from "./sse.js";
/** The API's JSON wire types (snake_case), generated from /v1/openapi.json. */
export type * as wire from "./wire.js";
export {
  CheckpointType,
  Execution,
  type BuildEvent,
  type CheckpointKind,
  type CodeContext,
  type CommandResult,
  type ExecutionError,
  type FileInfo,
  type ImageInfo,
  type Logs,
  type NetworkPolicy,
  type PoolInfo,
  type PoolMember,
  type PortInfo,
  type Result,
  type SandboxInfo,
  type SandboxState,
  type Snapshot,
  type Usage,
  type WriteInfo,
} from "./types.js";
