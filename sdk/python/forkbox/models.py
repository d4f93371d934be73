"""The objects the SDK returns, built from the daemon's JSON (see
/v1/openapi.json). Each keeps the whole JSON object in ``raw``, so fields a
newer daemon adds are not lost.

Each object rests on the wire type of the JSON it is built from: a TypedDict
of forkbox/wire.py, which internal/apigen generates from the API's Go types.
The class names it (``_wire``; a record's ``raw`` is typed as it), and its
attributes are that TypedDict's keys: a record (``_Record``) takes every key
of its wire type as an attribute, so a key the daemon adds is picked up, and
tests/test_wire.py fails, naming the field, when a model has an attribute the
wire lacks (a key renamed or dropped) or leaves a key unreachable. An
attribute that is not a wire key on purpose is listed in the class's
``_aliases`` (another name for a key) or ``_derived`` (computed from keys),
with why in a comment there."""

from __future__ import annotations

import base64
import enum
from typing import (Any, ClassVar, Dict, Generic, List, Literal, Mapping, Optional, Tuple, TypeVar, cast, get_args,
                    get_origin)

from . import wire

__all__ = [
    "CheckpointType",
    "SandboxInfo",
    "CommandResult",
    "Result",
    "Logs",
    "ExecutionError",
    "Execution",
    "FileInfo",
    "WriteInfo",
    "ImageInfo",
    "CodeContext",
    "Pool",
]


class CheckpointType(str, enum.Enum):
    """What a checkpoint saves. FILESYSTEM: the sandbox's writable layer;
    restoring it is a cold boot (cpus and memory may change). MEMORY: the
    filesystem plus memory and every process; restoring it is a warm start
    where kernels keep their variables."""

    # For type checkers: the values, as wire.CheckpointRequest's type takes
    # them (tests/test_wire.py checks that they are the wire's).
    _value_: Literal["filesystem", "memory"]

    FILESYSTEM = "filesystem"
    MEMORY = "memory"

    def __str__(self) -> str:
        return self.value


_W = TypeVar("_W", bound=Mapping[str, Any])

# Attribute names a wire key cannot take: they are the record's own.
_RESERVED = ("raw",)


class _Record(Generic[_W]):
    """A JSON object of wire type _W, with its keys as attributes (None when
    absent, or the value of ``_defaults``). A record names its wire type as
    its base, ``class SandboxInfo(_Record[wire.Sandbox])``, and lists in
    ``_fields`` its first attributes (repr shows the first six of that list
    when they are set); every other key of the wire type follows, in the
    wire's order. So a key the API adds is an attribute with no change here,
    and a name in ``_fields`` that the wire lacks fails tests/test_wire.py. A
    wire key that a method or property of the class already uses is left to
    it (the test names it); a subclass may turn a key's value into an object
    in its __init__ (Cell's execution)."""

    #: The wire TypedDict: the argument of the class's _Record[...] base.
    _wire: ClassVar[Any] = None
    _fields: ClassVar[Tuple[str, ...]] = ()
    #: What repr shows: the first six of the class's own _fields.
    _shown: ClassVar[Tuple[str, ...]] = ()
    _defaults: ClassVar[Dict[str, Any]] = {}
    #: Attribute names that are another name for a wire key (name -> key).
    _aliases: ClassVar[Dict[str, str]] = {}
    #: Attributes (properties) computed from the wire's keys.
    _derived: ClassVar[Tuple[str, ...]] = ()

    raw: _W

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for base in cls.__dict__.get("__orig_bases__", ()):
            if get_origin(base) is _Record:
                (cls._wire,) = get_args(base)
        if cls._wire is None:
            raise TypeError("%s must name its wire type: class %s(_Record[wire.Name])" % (cls.__name__, cls.__name__))
        if "_fields" in cls.__dict__:
            cls._shown = tuple(cls._fields[:6])
        cls._fields = _wire_fields(cls, cls._wire, cls._fields)

    def __init__(self, raw: Optional[Mapping[str, Any]] = None, **kw: Any):
        d: Dict[str, Any] = dict(raw or {})
        d.update(kw)
        self.raw = cast(_W, d)
        for f in self._fields:
            v = d.get(f)
            if v is None and f in self._defaults:
                v = self._defaults[f]
            setattr(self, f, v)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.raw)

    def __repr__(self) -> str:
        shown = ", ".join("%s=%r" % (f, getattr(self, f)) for f in self._shown if getattr(self, f) is not None)
        return "%s(%s)" % (type(self).__name__, shown)

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]


def wire_keys(td: Any) -> Tuple[str, ...]:
    """The keys of a wire TypedDict, in its order (required ones first).
    ``__annotations__`` holds the inherited keys too, from Python 3.8 on, and
    holds them whether or not the annotations are strings."""
    return tuple(td.__annotations__)


def _wire_fields(cls: type, td: Any, first: Tuple[str, ...]) -> Tuple[str, ...]:
    """``first``, then the other keys of ``td`` that ``cls`` leaves free (not
    a method, property or class attribute of its own, nor ``raw``)."""
    rest = tuple(k for k in wire_keys(td) if k not in first and k not in _RESERVED and not hasattr(cls, k))
    return tuple(first) + rest


class SandboxInfo(_Record[wire.Sandbox]):
    """A sandbox as the daemon reports it (GET /v1/sandboxes/{id}): every key
    of wire.Sandbox as an attribute."""

    _fields = ("id", "name", "state", "state_reason", "image", "snapshot_id", "cpus", "memory_mb",
               "disk_mb", "pids_limit", "timeout_secs", "max_lifetime_secs", "allow_internet_access",
               "network", "auto_resume", "env", "labels", "created_at", "last_active_at", "terminated_at", "usage")


class CommandResult(_Record[wire.ExecResult]):
    """The result of ``Sandbox.run``: ``stdout``, ``stderr``, ``exit_code``
    (-1 when a signal killed the process; ``signal`` names it),
    ``duration_ms``, ``timed_out``, ``oom_killed`` and ``error`` (why, in
    words, when the process did not exit by itself). A non-zero exit is a
    result, not an exception."""

    _fields = ("stdout", "stderr", "exit_code", "duration_ms", "signal", "timed_out", "oom_killed", "error")
    _defaults = {"stdout": "", "stderr": "", "exit_code": 0, "duration_ms": 0, "timed_out": False, "oom_killed": False}
    # ok: exit_code == 0, the question most callers ask of a result.
    _derived = ("ok",)

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0


# Keys of wire.Result that are not a format of the value.
_RESULT_NOT_FORMATS = ("extra", "is_main_result")

# The result formats of docs/API.md ("The execution result"), in the order
# formats() lists them: the keys of wire.Result but extra (other MIME types)
# and is_main_result, so a format the API adds is an attribute of Result.
RESULT_FORMATS = tuple(k for k in wire_keys(wire.Result) if k not in _RESULT_NOT_FORMATS)


class Result:
    """One displayed value of a cell, keyed by format like the API: ``text``,
    ``html``, ``markdown``, ``latex``, ``png``, ``jpeg``, ``svg``, ``json``,
    ``javascript``, ``pdf`` (images are base64 strings, as in the API), and
    ``extra`` for other MIME types. ``is_main_result`` marks the value of
    the cell's last expression. ``result["html"]`` and ``"png" in result``
    work too."""

    _wire: ClassVar[Any] = wire.Result

    raw: wire.Result
    text: Optional[str]
    html: Optional[str]
    markdown: Optional[str]
    latex: Optional[str]
    png: Optional[str]
    jpeg: Optional[str]
    svg: Optional[str]
    json: Any
    javascript: Optional[str]
    pdf: Optional[str]

    def __init__(self, raw: Mapping[str, Any]):
        self.raw = cast(wire.Result, dict(raw))
        for f in RESULT_FORMATS:
            setattr(self, f, self.raw.get(f))
        self.extra = self.raw.get("extra")
        self.is_main_result = bool(self.raw.get("is_main_result", False))

    def formats(self) -> List[str]:
        """The formats this result carries, such as ["text", "html"]."""
        out = [f for f in RESULT_FORMATS if self.raw.get(f) is not None]
        out.extend(k for k in self.raw if k not in RESULT_FORMATS and k not in _RESULT_NOT_FORMATS)
        if isinstance(self.extra, dict):
            out.extend(self.extra.keys())
        return out

    def png_bytes(self) -> Optional[bytes]:
        """The decoded PNG image, or None."""
        return base64.b64decode(self.png) if self.png else None

    def jpeg_bytes(self) -> Optional[bytes]:
        """The decoded JPEG image, or None."""
        return base64.b64decode(self.jpeg) if self.jpeg else None

    def __getitem__(self, key: str) -> Any:
        return cast(Mapping[str, Any], self.raw)[key]

    def __contains__(self, key: object) -> bool:
        return key in self.raw

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.raw)

    def __str__(self) -> str:
        return self.text if self.text is not None else repr(self)

    def __repr__(self) -> str:
        return "Result(formats=%r%s, text=%r)" % (
            self.formats(), ", is_main_result=True" if self.is_main_result else "", _short(self.text))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Result) and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]


def _short(s: Optional[str], n: int = 60) -> Optional[str]:
    if s is None or len(s) <= n:
        return s
    return s[:n] + "…"


class Logs:
    """What a cell printed, in order: lists of chunks."""

    _wire: ClassVar[Any] = wire.Logs

    def __init__(self, stdout: Optional[List[str]] = None, stderr: Optional[List[str]] = None):
        self.stdout: List[str] = list(stdout or [])
        self.stderr: List[str] = list(stderr or [])

    def __repr__(self) -> str:
        return "Logs(stdout=%r, stderr=%r)" % (self.stdout, self.stderr)

    def to_dict(self) -> Dict[str, List[str]]:
        return {"stdout": list(self.stdout), "stderr": list(self.stderr)}


class ExecutionError:
    """A cell's error: ``name`` (NameError, SyntaxError, TimeoutError,
    KernelDied, ...), ``value`` (the message) and ``traceback`` (a list of
    lines; ``traceback_text`` joins them)."""

    _wire: ClassVar[Any] = wire.ExecutionError
    # message is value under the name Python's exceptions and the SDK's
    # ForkboxError give the text of an error.
    _aliases: ClassVar[Dict[str, str]] = {"message": "value"}
    # traceback_text: the traceback lines joined, for printing.
    _derived: ClassVar[Tuple[str, ...]] = ("traceback_text",)

    def __init__(self, name: str = "", value: str = "", traceback: Optional[List[str]] = None):
        self.name = name
        self.value = value
        self.traceback: List[str] = list(traceback or [])

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecutionError":
        tb = d.get("traceback") or []
        if isinstance(tb, str):
            tb = tb.splitlines()
        return cls(str(d.get("name") or ""), str(d.get("value") or ""), [str(x) for x in tb])

    @property
    def message(self) -> str:
        return self.value

    @property
    def traceback_text(self) -> str:
        return "\n".join(self.traceback)

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "value": self.value, "traceback": list(self.traceback)}

    def __str__(self) -> str:
        return "%s: %s" % (self.name, self.value) if self.value else self.name

    def __repr__(self) -> str:
        return "ExecutionError(name=%r, value=%r)" % (self.name, self.value)


class Execution:
    """The result of ``run_code`` (docs/API.md, "The execution result"):
    ``results`` (Result objects),
    ``logs`` (``.stdout`` / ``.stderr`` lists), ``error`` (None on success,
    else an ExecutionError), ``execution_count``, ``context_id`` and
    ``duration_ms``. ``text`` is the main result's text (the value of the
    last expression, "215" for ``sum([120, 95])``), or None."""

    _wire: ClassVar[Any] = wire.Execution
    # Shortcuts the API leaves to its clients: text and main_result (the
    # result marked is_main_result), stdout and stderr (logs joined).
    _derived: ClassVar[Tuple[str, ...]] = ("text", "main_result", "stdout", "stderr")

    def __init__(self, results: Optional[List[Result]] = None, logs: Optional[Logs] = None,
                 error: Optional[ExecutionError] = None, execution_count: int = 0,
                 context_id: Optional[str] = None, duration_ms: int = 0):
        self.results: List[Result] = list(results or [])
        self.logs = logs or Logs()
        self.error = error
        self.execution_count = execution_count
        self.context_id = context_id
        self.duration_ms = duration_ms

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Execution":
        logs = d.get("logs") or {}
        err = d.get("error")
        return cls(
            results=[Result(r) for r in (d.get("results") or []) if isinstance(r, dict)],
            logs=Logs(logs.get("stdout"), logs.get("stderr")),
            error=ExecutionError.from_dict(err) if isinstance(err, dict) else None,
            execution_count=int(d.get("execution_count") or 0),
            context_id=d.get("context_id"),
            duration_ms=int(d.get("duration_ms") or 0),
        )

    @property
    def text(self) -> Optional[str]:
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @property
    def main_result(self) -> Optional[Result]:
        for r in self.results:
            if r.is_main_result:
                return r
        return None

    @property
    def stdout(self) -> str:
        """All of stdout as one string."""
        return "".join(self.logs.stdout)

    @property
    def stderr(self) -> str:
        """All of stderr as one string."""
        return "".join(self.logs.stderr)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "logs": self.logs.to_dict(),
            "error": self.error.to_dict() if self.error else None,
            "execution_count": self.execution_count,
            "context_id": self.context_id,
            "duration_ms": self.duration_ms,
        }

    def __repr__(self) -> str:
        return "Execution(results=%r, logs=%r, error=%r, execution_count=%r)" % (
            self.results, self.logs, self.error, self.execution_count)


class FileInfo(_Record[wire.FileInfo]):
    """An entry of ``files.list``: ``name``, ``path``, ``type`` ("file",
    "dir", "symlink", "other"), ``size``, ``mode``, ``modified_at``."""

    _fields = ("name", "path", "type", "size", "mode", "modified_at")
    # is_dir: type == "dir", the common question.
    _derived = ("is_dir",)

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"


class WriteInfo(_Record[wire.WriteFileResult]):
    """The answer of ``files.write``: the absolute ``path`` and ``size``."""

    _fields = ("path", "size")


class ImageInfo(_Record[wire.Image]):
    """An image: ``name``, ``id`` (sha256 of its layers and defaults),
    ``base``, ``layers``, ``env``, ``workdir``, ``user``, ``size_bytes``,
    ``created_at``."""

    _fields = ("name", "id", "base", "layers", "env", "workdir", "user", "uid", "gid", "size_bytes", "created_at")


class CodeContext(_Record[wire.Context]):
    """A code context (a kernel with its own variables): ``id``,
    ``language``, ``kernel``, ``cwd``, ``default``, ``state``,
    ``execution_count``."""

    _fields = ("id", "language", "kernel", "cwd", "default", "state", "execution_count", "created_at")


class Cell(_Record[wire.Cell]):
    """A cell the sandbox ran, as its history keeps it: ``id``, ``seq``,
    ``source`` ("user" for run_code, "model" for the chat model's steps),
    ``code``, ``language``, ``context_id``, ``created_at``, and
    ``execution`` (an Execution with its outputs)."""

    _fields = ("id", "sandbox", "seq", "source", "code", "language", "context_id", "created_at")

    def __init__(self, raw: Optional[Mapping[str, Any]] = None, **kw: Any):
        super().__init__(raw, **kw)
        # The wire's execution, as an Execution.
        ex = self.raw.get("execution")
        self.execution: Optional[Execution] = Execution.from_dict(ex) if ex else None


class NotebookRun(_Record[wire.NotebookRun]):
    """The answer of ``run_notebook``: the ``cells`` that ran (Cell),
    ``ran`` of ``total``, and ``stopped`` (a cell failed; the rest did not
    run)."""

    _fields = ("ran", "total", "stopped")

    def __init__(self, raw: Optional[Mapping[str, Any]] = None, **kw: Any):
        super().__init__(raw, **kw)
        # The wire's cells, as Cell objects.
        self.cells: List[Cell] = [Cell(c) for c in self.raw.get("cells") or []]


class Pool(_Record[wire.Pool]):
    """A warm pool: ``name``, ``snapshot_id`` or ``image``, ``size``,
    ``ready``, and with ``list_pools(members=True)`` its ``members``: the
    sandboxes it keeps ready, as dicts (``id``, ``state``, ``created_at``)."""

    _fields = ("name", "snapshot_id", "image", "size", "ready", "created_at", "members")
