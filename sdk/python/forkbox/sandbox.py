"""Sandboxes: create, connect, run commands and code, files, checkpoints,
forks, suspend and resume.

A :class:`Sandbox` is a handle on one sandbox of the daemon, by id. Creating
one starts it; the handle holds no connection, so it can be kept, pickled by
id, or rebuilt with :meth:`Sandbox.connect`::

    from forkbox.sandbox import Sandbox, CheckpointType

    with Sandbox.create() as sb:                  # terminated at the end
        sb.run_code("sales = [120, 95]")
        print(sb.run_code("sum(sales)").text)     # 215
        snap = sb.checkpoint(checkpoint_type=CheckpointType.MEMORY)
    again = Sandbox.create(snapshot_id=snap.snapshot_id)
    print(again.run_code("sales").text)           # [120, 95]

Ephemeral (unnamed) sandboxes are terminated when their idle timeout fires;
named ones are suspended instead and keep their state. ``close()`` follows
the same rule: it terminates an unnamed sandbox and leaves a named one to
the daemon (it suspends when idle; ``terminate()`` removes it for good).
"""

from __future__ import annotations

import json
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Mapping, Optional, Union, cast

from . import wire
from ._client import Client, compact, decode_event, failure_error, quote, resolve_client, sandbox_path
from .errors import CellTimeoutError, ConflictError, KernelDiedError, NotFoundError
from .image import Image
from .models import (Cell, CheckpointType, CodeContext, CommandResult, Execution, ExecutionError, FileInfo,
                     NotebookRun, Pool, Result, SandboxInfo, WriteInfo)

__all__ = ["Sandbox", "Snapshot", "Files", "ForkResult", "CheckpointType", "Image"]

OutputHandler = Callable[[str], Any]


class Snapshot:
    """A saved state of a sandbox (``snap_…``). ``snapshot_id`` (also ``id``)
    is what ``Sandbox.create(snapshot_id=…)`` restores; ``type`` is
    "filesystem" or "memory". Snapshots survive daemon restarts and can be
    restored any number of times.

    ``Snapshot.list()``, ``Snapshot.get(id)`` and ``Snapshot.delete(id)`` (or
    ``snap.delete()``) manage them."""

    _wire: ClassVar[Any] = wire.Snapshot
    # snapshot_id is id under the name Sandbox.create(snapshot_id=...) and
    # create_pool take, so that snap.snapshot_id reads as what it is for;
    # checkpoint_type is type as a CheckpointType, the enum checkpoint()
    # takes (FILESYSTEM for a type this SDK does not know).
    _aliases: ClassVar[Dict[str, str]] = {"snapshot_id": "id", "checkpoint_type": "type"}

    raw: wire.Snapshot

    def __init__(self, raw: Mapping[str, Any], client: Optional[Client] = None):
        self.raw = cast(wire.Snapshot, dict(raw))
        self._client = client or Client()
        self.id: str = self.raw.get("id", "")
        self.type: str = self.raw.get("type", "")
        self.name: Optional[str] = self.raw.get("name")
        self.sandbox_id: Optional[str] = self.raw.get("sandbox_id")
        self.parent_id: Optional[str] = self.raw.get("parent_id")
        self.image: Optional[str] = self.raw.get("image")
        self.size_bytes: int = int(self.raw.get("size_bytes") or 0)
        self.paused_ms: int = int(self.raw.get("paused_ms") or 0)
        self.created_at: Optional[str] = self.raw.get("created_at")

    @property
    def snapshot_id(self) -> str:
        return self.id

    @property
    def checkpoint_type(self) -> CheckpointType:
        return CheckpointType(self.type) if self.type in ("filesystem", "memory") else CheckpointType.FILESYSTEM

    @staticmethod
    def list(sandbox: Union[str, "Sandbox", None] = None, *, url: Optional[str] = None, api_key: Optional[str] = None,
             client: Optional[Client] = None) -> List["Snapshot"]:
        """Every snapshot, or those of one sandbox (id, name or Sandbox), newest
        first: every page of the daemon's list."""
        c = resolve_client(client, url, api_key)
        ref = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        items, _ = c.list_all("/v1/snapshots", "snapshots", {"sandbox": ref} if ref else None)
        return [Snapshot(s, c) for s in items]

    @staticmethod
    def get(snapshot_id: str, *, url: Optional[str] = None, api_key: Optional[str] = None,
            client: Optional[Client] = None) -> "Snapshot":
        """One snapshot by id; NotFoundError when there is none."""
        c = resolve_client(client, url, api_key)
        return Snapshot(c.request_json("GET", "/v1/snapshots/" + quote(snapshot_id)), c)

    def delete(self_or_id: Union["Snapshot", str], *, url: Optional[str] = None, api_key: Optional[str] = None,
               client: Optional[Client] = None) -> None:
        """Deletes a snapshot and frees its space: ``snap.delete()`` or
        ``Snapshot.delete("snap_…")``. Sandboxes restored from it are not
        affected."""
        if isinstance(self_or_id, Snapshot):
            c = client or self_or_id._client
            sid = self_or_id.id
        else:
            c = resolve_client(client, url, api_key)
            sid = str(self_or_id)
        c.request_json("DELETE", "/v1/snapshots/" + quote(sid))

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.raw)

    def __repr__(self) -> str:
        return "Snapshot(id=%r, type=%r, sandbox_id=%r, size_bytes=%r)" % (
            self.id, self.type, self.sandbox_id, self.size_bytes)


class ForkResult(list):
    """The branches of ``Sandbox.fork``: a list of Sandbox, with the memory
    snapshot they were restored from as ``snapshot``."""

    _wire: ClassVar[Any] = wire.ForkResult
    # The wire key whose elements are the list's items (as Sandbox handles).
    _items: ClassVar[str] = "sandboxes"

    def __init__(self, sandboxes: Iterable["Sandbox"], snapshot: Optional[Snapshot]):
        super().__init__(sandboxes)
        self.snapshot = snapshot


class Files:
    """The files of a sandbox (``sandbox.files``). Paths are sandbox paths; a
    relative path is relative to /workspace."""

    def __init__(self, sandbox: "Sandbox"):
        self._sb = sandbox

    def read(self, path: str, format: str = "text") -> Union[str, bytes]:
        """The content of a file: ``format="text"`` (default) decodes it as
        UTF-8 into a str, ``format="bytes"`` returns bytes."""
        data = self._sb._client.request_bytes("GET", sandbox_path(self._sb.id, "/files"), {"path": path})
        if format == "bytes":
            return data
        if format != "text":
            raise ValueError('format must be "text" or "bytes", not %r' % (format,))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError("invalid_argument", "%s is not UTF-8 text; read it with format=\"bytes\"" % path, 400) from None

    def read_bytes(self, path: str) -> bytes:
        return self._sb._client.request_bytes("GET", sandbox_path(self._sb.id, "/files"), {"path": path})

    def write(self, path: str, data: Union[str, bytes, bytearray, memoryview, Any], mode: Optional[int] = None) -> WriteInfo:
        """Writes a file (str as UTF-8, bytes, or a binary file object read to
        its end), creating parent directories and replacing the file.
        ``mode`` sets its permission bits (default 0644)."""
        if isinstance(data, str):
            body = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read"):
            body = data.read()
            if isinstance(body, str):
                body = body.encode("utf-8")
        else:
            raise TypeError("data must be str, bytes or a file object, not %s" % type(data).__name__)
        q: Dict[str, Any] = {"path": path}
        if mode is not None:
            q["mode"] = "%04o" % (mode & 0o777)
        raw = self._sb._client.request_bytes("PUT", sandbox_path(self._sb.id, "/files"), q, body,
                                             "application/octet-stream", accept="application/json")
        return WriteInfo(json.loads(raw.decode("utf-8")) if raw.strip() else {"path": path, "size": len(body)})

    def list(self, path: str = "/workspace") -> List[FileInfo]:
        """The entries of a directory."""
        doc = self._sb._client.request_json("GET", sandbox_path(self._sb.id, "/files/list"), {"path": path}) or {}
        return [FileInfo(e) for e in doc.get("entries") or []]

    def exists(self, path: str) -> bool:
        """True when path names a file or directory."""
        import posixpath

        parent, base = posixpath.split(path.rstrip("/") or "/")
        if not base:
            return True
        try:
            return any(e.name == base for e in self.list(parent or "."))
        except NotFoundError:
            return False

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file or an empty directory; with ``recursive`` a
        directory and everything in it."""
        q: Dict[str, Any] = {"path": path}
        if recursive:
            q["recursive"] = "true"
        self._sb._client.request_json("DELETE", sandbox_path(self._sb.id, "/files"), q)


def _is_cell_failure(err: Optional[ExecutionError]) -> bool:
    # The daemon's own TimeoutError and KernelDied come without a traceback;
    # a TimeoutError that the user's code raised has one.
    return err is not None and err.name in ("TimeoutError", "KernelDied") and not err.traceback


def raise_for_cell_failure(ex: Execution) -> None:
    """Raises CellTimeoutError or KernelDiedError when the daemon reported
    that the cell timed out or its kernel died."""
    err = ex.error
    if not _is_cell_failure(err):
        return
    assert err is not None
    if err.name == "TimeoutError":
        raise CellTimeoutError("timeout", err.value, 200, execution=ex)
    raise KernelDiedError("kernel_died", err.value, 200, execution=ex)


class Sandbox:
    """A handle on one sandbox of a forkbox daemon. Make one with
    :meth:`create` or :meth:`connect`; see the module doc."""

    def __init__(self, info: Union[SandboxInfo, Dict[str, Any]], client: Optional[Client] = None):
        if isinstance(info, dict):
            info = SandboxInfo(info)
        self._client = client or Client()
        self._info = info
        self.id: str = info.id
        self.name: Optional[str] = info.name or None
        self._closed = False

    # -- construction -------------------------------------------------------

    @classmethod
    def create(cls, name: Optional[str] = None, image: Union[str, Image, None] = None,
               snapshot_id: Union[str, Snapshot, None] = None, cpus: Optional[float] = None,
               memory_mb: Optional[int] = None, disk_mb: Optional[int] = None,
               timeout_secs: Optional[int] = None, allow_internet_access: bool = False,
               env: Optional[Mapping[str, str]] = None, labels: Optional[Mapping[str, str]] = None,
               pool: Optional[str] = None, *, pids_limit: Optional[int] = None,
               max_lifetime_secs: Optional[int] = None, auto_resume: Optional[bool] = None,
               network: Optional[Mapping[str, Any]] = None,
               url: Optional[str] = None, api_key: Optional[str] = None, client: Optional[Client] = None,
               request_timeout: Optional[float] = None) -> "Sandbox":
        """Starts a sandbox and returns it running.

        From ``image`` (default "python") or from ``snapshot_id`` (a Snapshot
        or its id: a memory snapshot is a warm start with the kernels'
        variables, a filesystem one a cold boot with the files). ``name``
        makes it a named sandbox, suspended rather than terminated when idle
        for ``timeout_secs``; ``pool`` takes a ready one from a warm pool.
        ``network`` ({"allow_out": [...], "deny_out": [...]}) is the egress
        policy of a sandbox with ``allow_internet_access`` (default: the
        public internet only).
        ``url`` and ``api_key`` default to FORKBOX_URL and FORKBOX_API_KEY."""
        c = resolve_client(client, url, api_key, request_timeout)
        if isinstance(snapshot_id, Snapshot):
            snapshot_id = snapshot_id.id
        if image is not None and not isinstance(image, str):
            image = image.name  # an Image or an ImageInfo
        # Only what is set: the daemon fills the defaults. Typed as the wire's
        # request, so that a type checker catches a misspelt key.
        body: wire.CreateSandboxRequest = {}
        if name is not None:
            body["name"] = name
        if image is not None:
            body["image"] = image
        if snapshot_id is not None:
            body["snapshot_id"] = snapshot_id
        if cpus is not None:
            body["cpus"] = cpus
        if memory_mb is not None:
            body["memory_mb"] = memory_mb
        if disk_mb is not None:
            body["disk_mb"] = disk_mb
        if timeout_secs is not None:
            body["timeout_secs"] = timeout_secs
        if pids_limit is not None:
            body["pids_limit"] = pids_limit
        if max_lifetime_secs is not None:
            body["max_lifetime_secs"] = max_lifetime_secs
        if env:
            body["env"] = dict(env)
        if labels:
            body["labels"] = dict(labels)
        if pool is not None:
            body["pool"] = pool
        if auto_resume is not None:
            body["auto_resume"] = auto_resume
        if network is not None:
            body["network"] = cast(wire.NetworkPolicy, dict(network))
        if allow_internet_access:
            body["allow_internet_access"] = True
        return cls(SandboxInfo(c.request_json("POST", "/v1/sandboxes", None, body)), c)

    @classmethod
    def connect(cls, name_or_id: str, *, resume: bool = False, url: Optional[str] = None,
                api_key: Optional[str] = None, client: Optional[Client] = None,
                request_timeout: Optional[float] = None) -> "Sandbox":
        """A handle on an existing sandbox, by id or name; NotFoundError when
        there is none. A suspended sandbox is resumed by the first call that
        needs it running (or now, with ``resume=True``; ``resume()`` does the
        same)."""
        c = resolve_client(client, url, api_key, request_timeout)
        sb = cls(SandboxInfo(c.request_json("GET", sandbox_path(name_or_id))), c)
        if resume:
            sb.resume()
        return sb

    @staticmethod
    def list(state: Optional[str] = None, name: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
             *, include_terminated: bool = False, url: Optional[str] = None, api_key: Optional[str] = None,
             client: Optional[Client] = None) -> List[SandboxInfo]:
        """The sandboxes, newest first, filtered by state, name and labels (all
        must match): every page of the daemon's list. Terminated sandboxes are
        left out unless ``state="terminated"`` (them alone) or
        ``include_terminated=True``."""
        c = resolve_client(client, url, api_key)
        q: Dict[str, Any] = compact({"state": state, "name": name})
        if include_terminated:
            q["include_terminated"] = "true"
        if labels:
            q["label"] = ["%s:%s" % (k, v) for k, v in sorted(labels.items())]
        items, _ = c.list_all("/v1/sandboxes", "sandboxes", q)
        return [SandboxInfo(s) for s in items]

    # -- state --------------------------------------------------------------

    def info(self) -> SandboxInfo:
        """The sandbox as the daemon reports it now (state, limits, usage)."""
        self._info = SandboxInfo(self._client.request_json("GET", sandbox_path(self.id)))
        self.name = self._info.name or None
        return self._info

    @property
    def state(self) -> str:
        """The current state: creating, running, suspending, suspended,
        resuming, terminated or error (asks the daemon)."""
        return self.info().state

    @property
    def sandbox_id(self) -> str:
        return self.id

    @property
    def client(self) -> Client:
        return self._client

    @property
    def files(self) -> Files:
        return Files(self)

    def __repr__(self) -> str:
        return "Sandbox(id=%r%s)" % (self.id, ", name=%r" % self.name if self.name else "")

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- commands and code --------------------------------------------------

    def run(self, cmd: str, args: Optional[Iterable[str]] = None, env: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, timeout: Optional[float] = None, *, stdin: Optional[Union[str, bytes]] = None,
            on_stdout: Optional[OutputHandler] = None, on_stderr: Optional[OutputHandler] = None) -> CommandResult:
        """Runs a command and waits for it: ``run("python3", ["-c", code])``.
        With ``args`` None, a ``cmd`` with spaces is a shell line
        (``run("ls -la /workspace")`` runs ``sh -c``). ``timeout`` (seconds)
        kills it then (``timed_out`` is set). With ``on_stdout`` /
        ``on_stderr`` the output is also handed over as it is produced. A
        non-zero exit is a result, not an exception."""
        if args is None and any(ch.isspace() for ch in cmd.strip()):
            cmd, args = "sh", ["-c", cmd]
        if isinstance(stdin, bytes):
            stdin = stdin.decode("utf-8")
        body: wire.ExecRequest = {"cmd": cmd}
        if args is not None:
            body["args"] = [str(a) for a in args]
        if env:
            body["env"] = dict(env)
        if cwd is not None:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        if timeout is not None:
            body["timeout_secs"] = float(timeout)
        path = sandbox_path(self.id, "/exec")
        if on_stdout is None and on_stderr is None:
            return CommandResult(self._client.request_json("POST", path, None, body))
        out: List[str] = []
        err: List[str] = []

        def on_plain(doc: Dict[str, Any]) -> CommandResult:
            if on_stdout and doc.get("stdout"):
                on_stdout(doc["stdout"])
            if on_stderr and doc.get("stderr"):
                on_stderr(doc["stderr"])
            return CommandResult(doc)

        def on_event(ev):
            if ev.name in ("stdout", "stderr"):
                chunk = (decode_event(ev) or {}).get("data") or ""
                if chunk:
                    (out if ev.name == "stdout" else err).append(chunk)
                    fn = on_stdout if ev.name == "stdout" else on_stderr
                    if fn:
                        fn(chunk)
            elif ev.name == "exit":
                doc = decode_event(ev) or {}
                doc["stdout"] = "".join(out)
                doc["stderr"] = "".join(err)
                return True, CommandResult(doc)
            elif ev.name == "error":
                raise failure_error(ev)
            return False, None

        return self._client.stream("POST", path, json.dumps(body).encode("utf-8"), "application/json",
                                   on_plain, on_event, "exec")

    def run_code(self, code: str, context: Union[str, CodeContext, None] = None, language: Optional[str] = None,
                 timeout: Optional[float] = None, on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None, on_result: Optional[Callable[[Result], Any]] = None,
                 on_error: Optional[Callable[[ExecutionError], Any]] = None, *,
                 env: Optional[Mapping[str, str]] = None, raise_on_failure: bool = True) -> Execution:
        """Runs a cell of code in a context (the language's default context
        unless ``context`` names one) and returns its Execution: results,
        logs, error, execution_count. Variables persist between calls.

        An exception raised by the code (NameError, ...) is in
        ``execution.error``, not raised. When the cell cannot finish, the call
        raises, with the partial execution on the exception: past ``timeout``
        seconds the cell is interrupted and CellTimeoutError is raised (the
        variables are kept); when the kernel dies (out of memory, killed)
        KernelDiedError is raised (the next call starts a fresh kernel). With
        ``raise_on_failure=False`` both come back in ``execution.error``
        instead, named TimeoutError and KernelDied.

        With any of the ``on_*`` callbacks the cell's output, results and
        error are handed over as they are produced (server-sent events)."""
        context_id: Optional[str] = context.id if isinstance(context, CodeContext) else context
        body: wire.RunCodeRequest = {"code": code}
        if language is not None:
            body["language"] = language
        if context_id is not None:
            body["context"] = context_id
        if env:
            body["env"] = dict(env)
        if timeout is not None:
            body["timeout_ms"] = max(1, int(round(float(timeout) * 1000)))
        path = sandbox_path(self.id, "/code")
        if not (on_stdout or on_stderr or on_result or on_error):
            ex = Execution.from_dict(self._client.request_json("POST", path, None, body) or {})
        else:
            ex = self._client.stream("POST", path, json.dumps(body).encode("utf-8"), "application/json",
                                     lambda doc: _replay(Execution.from_dict(doc), on_stdout, on_stderr, on_result, on_error),
                                     _code_event_handler(on_stdout, on_stderr, on_result, on_error), "code")
        if raise_on_failure:
            raise_for_cell_failure(ex)
        return ex

    def create_code_context(self, language: Optional[str] = None, cwd: Optional[str] = None,
                            env: Optional[Mapping[str, str]] = None) -> CodeContext:
        """Starts a new context (a kernel with its own variables, working
        directory and environment); pass it as ``run_code(context=…)``."""
        body: wire.CreateContextRequest = {}
        if language is not None:
            body["language"] = language
        if cwd is not None:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        return CodeContext(self._client.request_json("POST", sandbox_path(self.id, "/contexts"), None, body))

    def list_code_contexts(self) -> List[CodeContext]:
        doc = self._client.request_json("GET", sandbox_path(self.id, "/contexts")) or {}
        return [CodeContext(c) for c in doc.get("contexts") or []]

    def restart_code_context(self, context: Union[str, CodeContext]) -> CodeContext:
        """Restarts a context's kernel: its variables are gone."""
        return CodeContext(self._client.request_json("POST", self._context_path(context, "/restart")))

    def interrupt_code_context(self, context: Union[str, CodeContext]) -> CodeContext:
        """Interrupts the cell running in a context; variables are kept."""
        return CodeContext(self._client.request_json("POST", self._context_path(context, "/interrupt")))

    def remove_code_context(self, context: Union[str, CodeContext]) -> None:
        self._client.request_json("DELETE", self._context_path(context, ""))

    def _context_path(self, context: Union[str, CodeContext], suffix: str) -> str:
        cid = context.id if isinstance(context, CodeContext) else str(context)
        if not cid:
            raise ValueError("context id is empty")
        return sandbox_path(self.id, "/contexts/" + quote(cid) + suffix)

    # -- cell history and notebooks -----------------------------------------

    def cells(self) -> List[Cell]:
        """Every cell this sandbox ran, oldest first, with its outputs (the
        last 1000; kept across suspend and resume)."""
        doc = self._client.request_json("GET", sandbox_path(self.id, "/cells")) or {}
        return [Cell(c) for c in doc.get("cells") or []]

    def notebook(self) -> bytes:
        """The cells as a Jupyter notebook (.ipynb, nbformat 4.5) with their
        outputs; write it to a file to open it in Jupyter."""
        return self._client.request_bytes("GET", sandbox_path(self.id, "/notebook"), accept="application/x-ipynb+json")

    def run_notebook(self, notebook: Union[bytes, str, Mapping[str, Any]]) -> NotebookRun:
        """Runs a notebook's code cells here, in order, stopping at the first
        that fails (``stopped``). ``notebook`` is the .ipynb's bytes or text,
        or its decoded JSON."""
        if isinstance(notebook, Mapping):
            data = json.dumps(notebook).encode("utf-8")
        elif isinstance(notebook, str):
            data = notebook.encode("utf-8")
        else:
            data = bytes(notebook)
        raw = self._client.request_bytes("POST", sandbox_path(self.id, "/notebook"), None, data,
                                         "application/x-ipynb+json", "application/json")
        return NotebookRun(json.loads(raw.decode("utf-8")))

    # -- snapshots and lifecycle --------------------------------------------

    def checkpoint(self, checkpoint_type: Union[CheckpointType, str] = CheckpointType.FILESYSTEM,
                   name: Optional[str] = None) -> Snapshot:
        """Saves the sandbox's state as a snapshot; the sandbox keeps
        running. FILESYSTEM (default) saves the disk; MEMORY also saves
        memory and processes, so a restore is a warm start."""
        body: wire.CheckpointRequest = {"type": CheckpointType(checkpoint_type).value}
        if name is not None:
            body["name"] = name
        return Snapshot(self._client.request_json("POST", sandbox_path(self.id, "/checkpoint"), None, body), self._client)

    def snapshots(self) -> List[Snapshot]:
        """This sandbox's snapshots, newest first."""
        return Snapshot.list(self.id, client=self._client)

    def port(self, port: int, public: Optional[bool] = None) -> Dict[str, Any]:
        """How to reach a server listening on ``port`` inside the sandbox:
        ``{"url", "token", "public", ...}``. Requests to the URL are proxied
        into the sandbox (resuming it when suspended) and need the API key,
        or the token (header X-Forkbox-Token or ``?forkbox_token=``), unless
        the port is public; ``public`` changes that first."""
        path = sandbox_path(self.id, "/ports/%d" % int(port))
        if public is None:
            return self._client.request_json("GET", path) or {}
        body: wire.UpdatePortRequest = {"public": bool(public)}
        return self._client.request_json("PUT", path, None, body) or {}

    def get_host(self, port: int) -> str:
        """The URL that reaches ``port`` inside the sandbox (see ``port``):
        its own host name when the daemon has a ports domain, else the
        daemon's path for it."""
        p = self.port(port)
        return p.get("host_url") or p["url"]

    def set_network(self, allow_out: Optional[Iterable[str]] = None,
                    deny_out: Optional[Iterable[str]] = None) -> SandboxInfo:
        """Replaces the egress policy (both empty: the default, the public
        internet only). IPv4 addresses and CIDRs in either list, domain
        names (``*.pypi.org``) in ``allow_out``, which make it an
        allow-list. A running sandbox follows it at once."""
        policy: wire.NetworkPolicy = {}
        if allow_out:
            policy["allow_out"] = list(allow_out)
        if deny_out:
            policy["deny_out"] = list(deny_out)
        body: wire.UpdateSandboxRequest = {"network": policy}
        self._info = SandboxInfo(self._client.request_json("PATCH", sandbox_path(self.id), None, body))
        return self._info

    def fork(self, n: int = 1, names: Optional[Iterable[str]] = None,
             network: Optional[Mapping[str, Any]] = None) -> ForkResult:
        """Takes a memory snapshot and starts ``n`` new sandboxes from it
        (named by ``names`` when given), each then diverging on its own.
        They keep this sandbox's egress policy unless ``network`` gives one.
        Returns them as a list with the snapshot as ``.snapshot``."""
        body: wire.ForkRequest = {"count": int(n)}
        if names is not None:
            body["names"] = list(names)
        if network is not None:
            body["network"] = cast(wire.NetworkPolicy, dict(network))
        doc = self._client.request_json("POST", sandbox_path(self.id, "/fork"), None, body) or {}
        snap = Snapshot(doc["snapshot"], self._client) if doc.get("snapshot") else None
        return ForkResult((Sandbox(SandboxInfo(s), self._client) for s in doc.get("sandboxes") or []), snap)

    def suspend(self) -> SandboxInfo:
        """Saves the sandbox to disk with memory and processes and frees its
        CPU and RAM. Suspending a suspended sandbox does nothing."""
        try:
            self._info = SandboxInfo(self._client.request_json("POST", sandbox_path(self.id, "/suspend")))
        except ConflictError:
            info = self.info()
            if info.state != "suspended":
                raise
        return self._info

    def resume(self) -> SandboxInfo:
        """Brings a suspended sandbox back with its files, processes and
        variables, under the same id and name. Resuming a running sandbox
        does nothing (so ``connect(name)`` then ``resume()`` always works)."""
        try:
            self._info = SandboxInfo(self._client.request_json("POST", sandbox_path(self.id, "/resume")))
        except ConflictError:
            info = self.info()
            if info.state != "running":
                raise
        return self._info

    def terminate(self) -> SandboxInfo:
        """Terminates the sandbox and frees everything it holds, named or not.
        Its snapshots stay."""
        self._info = SandboxInfo(self._client.request_json("DELETE", sandbox_path(self.id)))
        self._closed = True
        return self._info

    kill = terminate

    def close(self) -> None:
        """Done with this handle: an unnamed (ephemeral) sandbox is
        terminated; a named one is left to the daemon, which suspends it when
        idle so that ``connect(name)`` finds it later. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.name:
            return
        try:
            self.terminate()
        except (NotFoundError, ConflictError):
            pass


def _code_event_handler(on_stdout, on_stderr, on_result, on_error):
    def on_event(ev):
        if ev.name in ("stdout", "stderr"):
            chunk = (decode_event(ev) or {}).get("data") or ""
            fn = on_stdout if ev.name == "stdout" else on_stderr
            if fn and chunk:
                fn(chunk)
        elif ev.name == "result":
            doc = decode_event(ev)
            if on_result and isinstance(doc, dict):
                on_result(Result(doc))
        elif ev.name == "error":
            doc = decode_event(ev)
            if on_error and isinstance(doc, dict):
                on_error(ExecutionError.from_dict(doc))
        elif ev.name == "done":
            return True, Execution.from_dict(decode_event(ev) or {})
        elif ev.name == "failure":
            raise failure_error(ev)
        # Other events are from a newer daemon.
        return False, None

    return on_event


def _replay(ex: Execution, on_stdout, on_stderr, on_result, on_error) -> Execution:
    """Hands a whole execution to the callbacks (a daemon that ignored the
    request for a stream)."""
    for s in ex.logs.stdout:
        if on_stdout and s:
            on_stdout(s)
    for s in ex.logs.stderr:
        if on_stderr and s:
            on_stderr(s)
    for r in ex.results:
        if on_result:
            on_result(r)
    if on_error and ex.error:
        on_error(ex.error)
    return ex


def create_pool(name: str, size: int, snapshot_id: Union[str, Snapshot, None] = None, image: Optional[str] = None,
                *, url: Optional[str] = None, api_key: Optional[str] = None, client: Optional[Client] = None) -> Pool:
    """Creates a warm pool of ``size`` ready sandboxes restored from a golden
    snapshot (or started from an image); ``Sandbox.create(pool=name)`` then
    hands one out at once."""
    c = resolve_client(client, url, api_key)
    if isinstance(snapshot_id, Snapshot):
        snapshot_id = snapshot_id.id
    body: wire.CreatePoolRequest = {"name": name, "size": size}
    if snapshot_id is not None:
        body["snapshot_id"] = snapshot_id
    if image is not None:
        body["image"] = image
    return Pool(c.request_json("POST", "/v1/pools", None, body))


def list_pools(*, members: bool = False, url: Optional[str] = None, api_key: Optional[str] = None,
               client: Optional[Client] = None) -> List[Pool]:
    """The warm pools; with ``members=True`` each with the sandboxes it keeps
    ready (``Pool.members``; an admin key also gets the daemon's default
    pool, ``_default``)."""
    c = resolve_client(client, url, api_key)
    path = "/v1/pools?members=true" if members else "/v1/pools"
    return [Pool(p) for p in (c.request_json("GET", path) or {}).get("pools") or []]


def delete_pool(name: str, *, url: Optional[str] = None, api_key: Optional[str] = None,
                client: Optional[Client] = None) -> None:
    c = resolve_client(client, url, api_key)
    c.request_json("DELETE", "/v1/pools/" + quote(name))



def __getattr__(name: str) -> Any:
    # forkbox.sandbox.AsyncSandbox, as other SDKs place it (aio imports this
    # module, so it is looked up lazily).
    if name in ("AsyncSandbox", "AsyncFiles", "AsyncSnapshot"):
        from . import aio

        return getattr(aio, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
