"""asyncio versions of the SDK's classes: :class:`AsyncSandbox` has the
methods of :class:`~forkbox.sandbox.Sandbox` as coroutines::

    import asyncio
    from forkbox import AsyncSandbox

    async def main():
        async with await AsyncSandbox.create() as sb:
            ex = await sb.run_code("sum([120, 95])")
            print(ex.text)  # 215

    asyncio.run(main())

Each call runs the blocking client in the loop's default thread pool, so
many sandboxes can be driven at once with ``asyncio.gather``. Callbacks
(``on_stdout``, ``on_result``, ...) run on the event loop thread, in order;
they may be plain functions or coroutine functions.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Callable, Iterable, List, Mapping, Optional, Union

from ._client import Client
from .image import Image
from .models import (Cell, CheckpointType, CodeContext, CommandResult, Execution, FileInfo, ImageInfo, NotebookRun,
                     SandboxInfo, WriteInfo)
from .sandbox import ForkResult, Sandbox, Snapshot

__all__ = ["AsyncSandbox", "AsyncFiles", "AsyncSnapshot", "build_image"]


async def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args, **kwargs))


def _on_loop(loop: asyncio.AbstractEventLoop, cb: Optional[Callable[..., Any]]) -> Optional[Callable[..., Any]]:
    """Wraps a callback so that the worker thread runs it on the loop and
    waits for it (keeping the order of events)."""
    if cb is None:
        return None

    async def run(*args: Any) -> None:
        r = cb(*args)
        if inspect.isawaitable(r):
            await r

    def call(*args: Any) -> None:
        asyncio.run_coroutine_threadsafe(run(*args), loop).result()

    return call


class AsyncFiles:
    """``sandbox.files`` of an AsyncSandbox."""

    def __init__(self, sb: Sandbox):
        self._f = sb.files

    async def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        return await _call(self._f.read, path, format)

    async def write(self, path: str, data: Any, mode: Optional[int] = None) -> WriteInfo:
        return await _call(self._f.write, path, data, mode)

    async def list(self, path: str = "/workspace") -> List[FileInfo]:
        return await _call(self._f.list, path)

    async def exists(self, path: str) -> bool:
        return await _call(self._f.exists, path)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await _call(self._f.remove, path, recursive)


class AsyncSnapshot:
    """Snapshot listing and deletion as coroutines (snapshot objects
    themselves are the plain :class:`~forkbox.sandbox.Snapshot`)."""

    @staticmethod
    async def list(sandbox: Optional[str] = None, **kw: Any) -> List[Snapshot]:
        return await _call(Snapshot.list, sandbox, **kw)

    @staticmethod
    async def get(snapshot_id: str, **kw: Any) -> Snapshot:
        return await _call(Snapshot.get, snapshot_id, **kw)

    @staticmethod
    async def delete(snapshot: Union[str, Snapshot], **kw: Any) -> None:
        await _call(Snapshot.delete, snapshot, **kw)


async def build_image(image: Image, registered_name: Optional[str] = None,
                      on_log: Optional[Callable[[str], Any]] = None, **kw: Any) -> ImageInfo:
    """``image.build(...)`` as a coroutine; on_log runs on the loop."""
    loop = asyncio.get_running_loop()
    return await _call(image.build, registered_name, _on_loop(loop, on_log), **kw)


class AsyncSandbox:
    """The asyncio twin of :class:`~forkbox.sandbox.Sandbox`: the same
    methods, awaited. ``async with`` closes it at the end (terminating an
    unnamed sandbox, as ``close()`` does)."""

    def __init__(self, sandbox: Sandbox):
        self._sb = sandbox
        self.id = sandbox.id
        self.name = sandbox.name

    @classmethod
    async def create(cls, *args: Any, **kwargs: Any) -> "AsyncSandbox":
        """As ``Sandbox.create``."""
        return cls(await _call(Sandbox.create, *args, **kwargs))

    @classmethod
    async def connect(cls, name_or_id: str, **kwargs: Any) -> "AsyncSandbox":
        """As ``Sandbox.connect``."""
        return cls(await _call(Sandbox.connect, name_or_id, **kwargs))

    @staticmethod
    async def list(*args: Any, **kwargs: Any) -> List[SandboxInfo]:
        return await _call(Sandbox.list, *args, **kwargs)

    @property
    def sync(self) -> Sandbox:
        """The blocking Sandbox behind this one."""
        return self._sb

    @property
    def client(self) -> Client:
        return self._sb.client

    @property
    def files(self) -> AsyncFiles:
        return AsyncFiles(self._sb)

    def __repr__(self) -> str:
        return "Async" + repr(self._sb)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def info(self) -> SandboxInfo:
        info = await _call(self._sb.info)
        self.name = self._sb.name
        return info

    async def state(self) -> str:
        """The current state (a coroutine here, a property on Sandbox)."""
        return (await self.info()).state

    async def run(self, cmd: str, args: Optional[Iterable[str]] = None, env: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, timeout: Optional[float] = None, *, stdin: Any = None,
                  on_stdout: Optional[Callable[[str], Any]] = None,
                  on_stderr: Optional[Callable[[str], Any]] = None) -> CommandResult:
        loop = asyncio.get_running_loop()
        return await _call(self._sb.run, cmd, list(args) if args is not None else None, env, cwd, timeout,
                           stdin=stdin, on_stdout=_on_loop(loop, on_stdout), on_stderr=_on_loop(loop, on_stderr))

    async def run_code(self, code: str, context: Union[str, CodeContext, None] = None,
                       language: Optional[str] = None, timeout: Optional[float] = None,
                       on_stdout: Optional[Callable[..., Any]] = None, on_stderr: Optional[Callable[..., Any]] = None,
                       on_result: Optional[Callable[..., Any]] = None, on_error: Optional[Callable[..., Any]] = None,
                       *, env: Optional[Mapping[str, str]] = None, raise_on_failure: bool = True) -> Execution:
        loop = asyncio.get_running_loop()
        return await _call(self._sb.run_code, code, context, language, timeout,
                           _on_loop(loop, on_stdout), _on_loop(loop, on_stderr), _on_loop(loop, on_result),
                           _on_loop(loop, on_error), env=env, raise_on_failure=raise_on_failure)

    async def create_code_context(self, language: Optional[str] = None, cwd: Optional[str] = None,
                                  env: Optional[Mapping[str, str]] = None) -> CodeContext:
        return await _call(self._sb.create_code_context, language, cwd, env)

    async def list_code_contexts(self) -> List[CodeContext]:
        return await _call(self._sb.list_code_contexts)

    async def restart_code_context(self, context: Union[str, CodeContext]) -> CodeContext:
        return await _call(self._sb.restart_code_context, context)

    async def interrupt_code_context(self, context: Union[str, CodeContext]) -> CodeContext:
        return await _call(self._sb.interrupt_code_context, context)

    async def remove_code_context(self, context: Union[str, CodeContext]) -> None:
        await _call(self._sb.remove_code_context, context)

    async def cells(self) -> List[Cell]:
        return await _call(self._sb.cells)

    async def notebook(self) -> bytes:
        return await _call(self._sb.notebook)

    async def run_notebook(self, notebook: Any) -> NotebookRun:
        return await _call(self._sb.run_notebook, notebook)

    async def checkpoint(self, checkpoint_type: Union[CheckpointType, str] = CheckpointType.FILESYSTEM,
                         name: Optional[str] = None) -> Snapshot:
        return await _call(self._sb.checkpoint, checkpoint_type, name)

    async def snapshots(self) -> List[Snapshot]:
        return await _call(self._sb.snapshots)

    async def fork(self, n: int = 1, names: Optional[Iterable[str]] = None) -> List["AsyncSandbox"]:
        """As ``Sandbox.fork``: a list of AsyncSandbox with ``.snapshot``."""
        res: ForkResult = await _call(self._sb.fork, n, list(names) if names is not None else None)
        out = _AsyncForkResult(AsyncSandbox(s) for s in res)
        out.snapshot = res.snapshot
        return out

    async def suspend(self) -> SandboxInfo:
        return await _call(self._sb.suspend)

    async def resume(self) -> SandboxInfo:
        return await _call(self._sb.resume)

    async def terminate(self) -> SandboxInfo:
        return await _call(self._sb.terminate)

    kill = terminate

    async def close(self) -> None:
        await _call(self._sb.close)


class _AsyncForkResult(list):
    snapshot: Optional[Snapshot] = None
