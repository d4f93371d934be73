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
export { ForkboxClient } from "./client.js";
export { AuthenticationError, BusyError, codeForStatus, ConflictError, ConnectionError, errorFromResponse, FailedPreconditionError, ForkboxError, InsufficientStorageError, InternalError, InvalidArgumentError, NotFoundError, PermissionDeniedError, ResourceExhaustedError, TimeoutError, TooLargeError, UnavailableError, } from "./errors.js";
export { DEFAULT_URL, PAGE_SIZE, Transport, VERSION } from "./http.js";
export { buildRecipe, DEFAULT_BASE_IMAGE, Image } from "./image.js";
export { Files, Sandbox, } from "./sandbox.js";
export { readSSE, SSEParser } from "./sse.js";
export { CheckpointType, Execution, } from "./types.js";
