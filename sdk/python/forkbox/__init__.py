"""forkbox: the Python SDK of forkbox, a self-hosted stateful
code-interpreter sandbox.

Standard library only. The daemon's address and API key come from the
arguments (``url=``, ``api_key=``) or from FORKBOX_URL (default
http://127.0.0.1:8080) and FORKBOX_API_KEY::

    from forkbox import Sandbox, CheckpointType

    sandbox = Sandbox.create(cpus=1.0, memory_mb=2048, timeout_secs=600)
    sandbox.run_code("import pandas as pd; df = pd.DataFrame({'x': [1, 2, 3]})")
    print(sandbox.run_code("df.x.sum()").text)           # 6
    snap = sandbox.checkpoint(checkpoint_type=CheckpointType.MEMORY)
    branch = Sandbox.create(snapshot_id=snap.snapshot_id)
    print(branch.run_code("len(df)").text)              # 3
    sandbox.terminate()

Errors are typed exceptions (:mod:`forkbox.errors`) carrying the API's
``code`` and the server's ``message``.
"""

__version__ = "0.1.0"

from ._client import DEFAULT_URL, Client  # noqa: E402
from .aio import AsyncFiles, AsyncSandbox, AsyncSnapshot, build_image  # noqa: E402
from .chat import ChatResponse, chat  # noqa: E402
from .errors import (AuthenticationError, BusyError, CellTimeoutError, ConflictError, ConnectionFailedError,  # noqa: E402
                     FailedPreconditionError, ForkboxError, InsufficientStorageError, InternalError,
                     InvalidArgumentError, KernelDiedError,
                     NotFoundError, PermissionDeniedError, ResourceExhaustedError, SandboxTimeoutError,
                     TooLargeError, UnavailableError)
from .image import BuildEvent, Image  # noqa: E402
from .models import (Cell, CheckpointType, CodeContext, CommandResult, Execution, ExecutionError, FileInfo,  # noqa: E402
                     ImageInfo, Logs, NotebookRun, Pool, Result, SandboxInfo, WriteInfo)
from .sandbox import Files, ForkResult, Sandbox, Snapshot, create_pool, delete_pool, list_pools  # noqa: E402

__all__ = [
    "__version__", "DEFAULT_URL", "Client",
    "Sandbox", "AsyncSandbox", "Files", "AsyncFiles", "Snapshot", "AsyncSnapshot", "ForkResult",
    "Image", "BuildEvent", "build_image", "CheckpointType",
    "CommandResult", "Execution", "Result", "Logs", "ExecutionError", "SandboxInfo", "FileInfo", "WriteInfo",
    "ImageInfo", "CodeContext", "Cell", "NotebookRun", "Pool", "create_pool", "list_pools", "delete_pool", "chat", "ChatResponse",
    "ForkboxError", "InvalidArgumentError", "AuthenticationError", "PermissionDeniedError", "NotFoundError",
    "ConflictError", "FailedPreconditionError", "BusyError", "InsufficientStorageError", "TooLargeError", "ResourceExhaustedError", "SandboxTimeoutError",
    "UnavailableError", "InternalError", "ConnectionFailedError", "CellTimeoutError", "KernelDiedError",
]
