"""Images: build one from a recipe, list and delete them.

An :class:`Image` is a recipe written in Python, built by the daemon::

    from forkbox.sandbox import Image, Sandbox

    image = (
        Image(name="code-interpreter", base_image="python")
        .run("mkdir -p /workspace/data")
        .env({"MPLBACKEND": "Agg"})
        .copy("./helpers.py", "/opt/helpers/helpers.py")
        .workdir("/workspace")
    )
    image.build(registered_name="code-interpreter", on_log=print)
    sandbox = Sandbox.create(image="code-interpreter")

``base_image`` is the name of a forkbox image ("python", the default, or
any built or imported one) or ``debian:<suite>``. Docker Hub's ``python:<tag>``
names, which recipes written for other services use, are taken as forkbox's
"python" image (with a warning), the nearest thing it has. ``run`` steps run
as root with network access; ``copy`` sources are local files or directories
that are sent with the build.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import tarfile
import uuid
import warnings
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Union, cast

from . import wire
from ._client import Client, decode_event, failure_error, quote, resolve_client
from .models import ImageInfo

__all__ = ["Image", "BuildEvent"]


class BuildEvent:
    """One event of a build: ``type`` ("step", "log", "done"), ``step`` and
    ``total``, ``kind`` (run, env, copy, ...), ``detail``, ``cached``,
    ``line`` (for log events) and ``image`` (for done)."""

    _wire: ClassVar[Any] = wire.BuildEvent

    raw: wire.BuildEvent

    def __init__(self, raw: Mapping[str, Any]):
        self.raw = cast(wire.BuildEvent, raw)
        self.type: str = raw.get("type", "")
        self.step: int = int(raw.get("step") or 0)
        self.total: int = int(raw.get("total") or 0)
        self.kind: Optional[str] = raw.get("kind")
        self.detail: Optional[str] = raw.get("detail")
        self.cached: bool = bool(raw.get("cached"))
        self.line: Optional[str] = raw.get("line")
        self.image: Optional[ImageInfo] = ImageInfo(raw["image"]) if isinstance(raw.get("image"), dict) else None

    def __repr__(self) -> str:
        return "BuildEvent(type=%r, step=%r, kind=%r, detail=%r, line=%r)" % (
            self.type, self.step, self.kind, self.detail, self.line)


def _base_name(base: str) -> str:
    if base.startswith("python:"):
        warnings.warn("base image %r is a Docker Hub name; forkbox builds on its own \"python\" image instead" % base,
                      stacklevel=3)  # the caller of Image()
        return "python"
    return base


class Image:
    """A recipe: a base image and steps, built with :meth:`build`. Every
    step method returns the Image, so steps chain."""

    def __init__(self, name: str, base_image: str = "python", *, mirror: Optional[str] = None):
        if not name:
            raise ValueError("an image needs a name")
        self.name = name
        self.base_image = base_image
        self._base = _base_name(base_image)
        self.mirror = mirror
        self._steps: List[wire.RecipeStep] = []
        self._copies: List[Tuple[str, str]] = []  # (local source, name in the context)

    def run(self, command: Union[str, Sequence[str]]) -> "Image":
        """A shell command run as root by /bin/sh -c in a build sandbox that
        has network access; its changes become a layer. A list is quoted and
        joined."""
        if not isinstance(command, str):
            command = shlex.join([str(c) for c in command])
        self._steps.append({"run": command})
        return self

    def env(self, variables: Optional[Mapping[str, str]] = None, **more: str) -> "Image":
        """Environment variables for later steps and for sandboxes."""
        v = dict(variables or {})
        v.update(more)
        if v:
            self._steps.append({"env": {str(k): str(x) for k, x in v.items()}})
        return self

    def workdir(self, path: str) -> "Image":
        """The working directory of later steps and of sandboxes."""
        self._steps.append({"workdir": path})
        return self

    def user(self, user: str) -> "Image":
        """Who sandbox processes run as (a user of the image or uid[:gid],
        not root); run steps stay root."""
        self._steps.append({"user": str(user)})
        return self

    def copy(self, src: str, dest: str) -> "Image":
        """Copies a local file or directory (with its contents) to ``dest``, an
        absolute path in the image."""
        if not os.path.exists(src):
            raise FileNotFoundError("copy source %s does not exist" % src)
        arc = "%d/%s" % (len(self._copies), os.path.basename(os.path.normpath(src)) or "root")
        self._copies.append((src, arc))
        copy: wire.CopyStep = {"src": arc, "dest": dest}
        self._steps.append({"copy": copy})
        return self

    @property
    def steps(self) -> List[Dict[str, Any]]:
        return [dict(s) for s in self._steps]

    def recipe(self, registered_name: Optional[str] = None) -> Dict[str, Any]:
        """The recipe as the daemon takes it (POST /v1/images)."""
        r: wire.Recipe = {"name": registered_name or self.name, "base": self._base,
                          "steps": [cast(wire.RecipeStep, s) for s in self.steps]}
        if self.mirror:
            r["mirror"] = self.mirror
        return cast(Dict[str, Any], r)

    def context_tar(self) -> Optional[bytes]:
        """The build context (a tar of the copy sources), or None without copy
        steps."""
        if not self._copies:
            return None

        def clean(ti: tarfile.TarInfo) -> tarfile.TarInfo:
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            return ti

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for src, arc in self._copies:
                tf.add(src, arcname=arc, recursive=True, filter=clean)
        return buf.getvalue()

    def build(self, registered_name: Optional[str] = None, on_log: Optional[Callable[[str], Any]] = None,
              on_event: Optional[Callable[[BuildEvent], Any]] = None, *, url: Optional[str] = None,
              api_key: Optional[str] = None, client: Optional[Client] = None) -> ImageInfo:
        """Builds the image and registers it as ``registered_name`` (default:
        its name), replacing an image of that name; steps whose layer is
        cached are not run again. ``on_log`` gets each line of output,
        ``on_event`` every event. A failing step raises InvalidArgumentError
        with its exit status and the end of its output."""
        c = resolve_client(client, url, api_key)
        recipe = json.dumps(self.recipe(registered_name)).encode("utf-8")
        ctx = self.context_tar()
        if ctx is None:
            body, ctype = recipe, "application/json"
        else:
            body, ctype = multipart([("recipe", None, "application/json", recipe),
                                     ("context", "context.tar", "application/x-tar", ctx)])

        def on_plain(doc: Dict[str, Any]) -> ImageInfo:
            return ImageInfo(doc)

        def handle(ev):
            if ev.name == "error":
                raise failure_error(ev)
            doc = decode_event(ev)
            if not isinstance(doc, dict):
                return False, None
            doc.setdefault("type", ev.name)
            be = BuildEvent(doc)
            if on_event:
                on_event(be)
            if on_log and be.type == "log" and be.line is not None:
                on_log(be.line)
            if ev.name == "done":
                if be.image is None:
                    from .errors import InternalError

                    raise InternalError("internal", "build finished without an image")
                return True, be.image
            return False, None

        return c.stream("POST", "/v1/images", body, ctype, on_plain, handle, "build")

    @staticmethod
    def list(*, url: Optional[str] = None, api_key: Optional[str] = None,
             client: Optional[Client] = None) -> List[ImageInfo]:
        """Every image, by name: every page of the daemon's list."""
        c = resolve_client(client, url, api_key)
        items, _ = c.list_all("/v1/images", "images")
        return [ImageInfo(i) for i in items]

    @staticmethod
    def get(name: str, *, url: Optional[str] = None, api_key: Optional[str] = None,
            client: Optional[Client] = None) -> ImageInfo:
        c = resolve_client(client, url, api_key)
        return ImageInfo(c.request_json("GET", "/v1/images/" + quote(name)))

    def delete(self_or_name: Union["Image", str], *, url: Optional[str] = None, api_key: Optional[str] = None,
               client: Optional[Client] = None) -> None:
        """Deletes an image: ``image.delete()`` or ``Image.delete("name")``.
        ConflictError while a sandbox or snapshot uses it."""
        name = self_or_name.name if isinstance(self_or_name, Image) else str(self_or_name)
        c = resolve_client(client, url, api_key)
        c.request_json("DELETE", "/v1/images/" + quote(name))

    def __repr__(self) -> str:
        return "Image(name=%r, base_image=%r, steps=%d)" % (self.name, self.base_image, len(self._steps))


def multipart(parts: List[Tuple[str, Optional[str], str, bytes]]) -> Tuple[bytes, str]:
    """Encodes (name, filename, content type, data) parts as
    multipart/form-data; returns the body and its Content-Type."""
    boundary = "forkbox-" + uuid.uuid4().hex
    out = io.BytesIO()
    for name, filename, ctype, data in parts:
        out.write(b"--" + boundary.encode() + b"\r\n")
        disp = 'form-data; name="%s"' % name
        if filename:
            disp += '; filename="%s"' % filename
        out.write(("Content-Disposition: %s\r\nContent-Type: %s\r\n\r\n" % (disp, ctype)).encode())
        out.write(data)
        out.write(b"\r\n")
    out.write(b"--" + boundary.encode() + b"--\r\n")
    return out.getvalue(), "multipart/form-data; boundary=" + boundary
