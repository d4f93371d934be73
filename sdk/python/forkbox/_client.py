"""The HTTP transport of the SDK: one :class:`Client` per daemon address.

It speaks the daemon's JSON API with urllib (standard library only), turns
every error answer into a typed :mod:`forkbox.errors` exception, and follows
``text/event-stream`` answers for the streaming calls (exec, code, image
builds, chat).
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import __version__
from ._sse import Event, iter_events
from .errors import ConnectionFailedError, ForkboxError, InternalError, error_for_code, error_from_response

DEFAULT_URL = "http://127.0.0.1:8080"
ENV_URL = "FORKBOX_URL"
ENV_API_KEY = "FORKBOX_API_KEY"

# Bounds how much of an error answer is read.
_MAX_ERROR_BODY = 64 << 10
#: How many items a list call asks the daemon for per page: the most it
#: gives (lists are paged: limit and cursor, next_cursor in the answer).
PAGE_SIZE = 1000
#: A list that has not ended after this many pages is an error, not a loop.
_MAX_PAGES = 100000


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would turn a POST into a GET; the daemon never redirects.
    def redirect_request(self, *args, **kwargs):  # noqa: D401
        return None


class Client:
    """A connection to one forkbox daemon.

    ``url`` defaults to ``$FORKBOX_URL`` or http://127.0.0.1:8080, ``api_key``
    to ``$FORKBOX_API_KEY`` (sent as a bearer token; none when empty).
    ``request_timeout`` (seconds, default none) bounds how long a call waits
    for the daemon to send something; leave it unset for long cells and
    builds, which the daemon bounds itself. A Client is safe to share between
    threads: every call opens its own HTTP connection.
    """

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None):
        url = url or os.environ.get(ENV_URL) or DEFAULT_URL
        if "://" not in url:
            url = "http://" + url
        self.url = url.rstrip("/")
        self.api_key = os.environ.get(ENV_API_KEY, "") if api_key is None else api_key
        self.request_timeout = request_timeout
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __repr__(self) -> str:
        return "Client(%r)" % self.url

    # -- requests -----------------------------------------------------------

    def _request(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
                 body: Optional[bytes] = None, content_type: Optional[str] = None,
                 accept: str = "application/json"):
        """Sends a request and returns the open response when it is 2xx;
        raises a typed ForkboxError otherwise."""
        url = self.url + path
        if query:
            pairs = []
            for k, v in query.items():
                if v is None:
                    continue
                if isinstance(v, (list, tuple)):
                    pairs.extend((k, str(x)) for x in v)
                else:
                    pairs.append((k, str(v)))
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs)
        req = urllib.request.Request(url, data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", content_type or "application/json")
        req.add_header("Accept", accept)
        req.add_header("User-Agent", "forkbox-python/" + __version__)
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        kw = {} if self.request_timeout is None else {"timeout": self.request_timeout}
        try:
            return self._opener.open(req, **kw)
        except urllib.error.HTTPError as e:
            try:
                data = e.read(_MAX_ERROR_BODY)
            except Exception:  # a body cut short still has a status
                data = b""
            finally:
                e.close()
            raise error_from_response(e.code, data) from None
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, socket.timeout) or isinstance(reason, TimeoutError):
                raise error_for_code("timeout", "no answer from the forkbox daemon at %s within %ss"
                                     % (self.url, self.request_timeout), 0) from None
            raise ConnectionFailedError("unavailable", "cannot reach the forkbox daemon at %s: %s (is `forkbox serve` running? set FORKBOX_URL)"
                                        % (self.url, reason), 0) from None
        except (socket.timeout, TimeoutError):
            raise error_for_code("timeout", "no answer from the forkbox daemon at %s within %ss"
                                 % (self.url, self.request_timeout), 0) from None
        except (ConnectionError, OSError) as e:
            raise ConnectionFailedError("unavailable", "connection to the forkbox daemon at %s failed: %s" % (self.url, e), 0) from None

    def request_json(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
                     body: Any = None) -> Any:
        """Sends ``body`` (when not None) as JSON and returns the decoded answer
        (None for an empty one, such as 204)."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        resp = self._request(method, path, query, data)
        with resp:
            raw = self._read(resp)
        if not raw.strip():
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except ValueError as e:
            raise InternalError("internal", "decoding the answer of %s %s: %s" % (method, path, e), resp.status) from None

    def list_all(self, path: str, items: str, query: Optional[Mapping[str, Any]] = None,
                 page_size: int = PAGE_SIZE) -> Tuple[List[Any], Dict[str, Any]]:
        """Every item of one of the daemon's paged lists (GET ``path``, the
        items under ``items``): asks for ``page_size`` at a time and follows
        ``next_cursor`` to the last page. Returns the items and the first
        page's document (for what only it carries)."""
        q: Dict[str, Any] = dict(query or {})
        q["limit"] = page_size
        out: List[Any] = []
        first: Optional[Dict[str, Any]] = None
        for _ in range(_MAX_PAGES):
            doc = self.request_json("GET", path, q) or {}
            if first is None:
                first = doc
            out.extend(doc.get(items) or [])
            nxt = doc.get("next_cursor") or ""
            if not nxt:
                return out, first
            if nxt == q.get("cursor"):
                raise InternalError("internal", "GET %s answered the cursor it was sent as the next page's: the list cannot go on" % path)
            q["cursor"] = nxt
        raise InternalError("internal", "GET %s did not end after %d pages" % (path, _MAX_PAGES))

    def request_bytes(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
                      body: Optional[bytes] = None, content_type: Optional[str] = None,
                      accept: str = "application/octet-stream") -> bytes:
        """Sends raw bytes and returns the raw answer."""
        resp = self._request(method, path, query, body, content_type, accept)
        with resp:
            data = self._read(resp)
            length = resp.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) != len(data):
            raise ConnectionFailedError("unavailable", "%s %s: got %d of %s bytes" % (method, path, len(data), length), 0)
        return data

    def _read(self, resp) -> bytes:
        try:
            return resp.read()
        except (socket.timeout, TimeoutError):
            raise error_for_code("timeout", "the forkbox daemon at %s stopped answering for %ss"
                                 % (self.url, self.request_timeout), 0) from None
        except (ConnectionError, OSError) as e:
            raise ConnectionFailedError("unavailable", "reading the daemon's answer failed: %s" % e, 0) from None

    def stream(self, method: str, path: str, body: bytes, content_type: str,
               on_plain: Callable[[Any], Any], on_event: Callable[[Event], Tuple[bool, Any]],
               what: str) -> Any:
        """Sends a request asking for an event stream and hands each event to
        ``on_event`` until it returns ``(True, value)``; value is returned. A
        daemon or proxy that ignores Accept answers with plain JSON, which
        goes to ``on_plain`` (its return is returned). A stream that ends
        before its last event raises ConnectionFailedError."""
        resp = self._request(method, path, None, body, content_type, accept="text/event-stream")
        with resp:
            ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype != "text/event-stream":
                raw = self._read(resp)
                try:
                    doc = json.loads(raw.decode("utf-8"))
                except ValueError as e:
                    raise InternalError("internal", "decoding %s answer: %s" % (what, e)) from None
                return on_plain(doc)
            try:
                for ev in iter_events(resp):
                    done, value = on_event(ev)
                    if done:
                        return value
            except ForkboxError:
                raise
            except (socket.timeout, TimeoutError):
                raise error_for_code("timeout", "the %s stream sent nothing for %ss" % (what, self.request_timeout), 0) from None
            except (ConnectionError, OSError) as e:
                raise ConnectionFailedError("unavailable", "reading %s stream: %s" % (what, e), 0) from None
        raise ConnectionFailedError("unavailable", "%s stream ended before its end (the connection was cut)" % what, 0)

    # -- helpers ------------------------------------------------------------

    def health(self) -> bool:
        """True when GET /healthz answers {"status": "ok"}."""
        doc = self.request_json("GET", "/healthz")
        return isinstance(doc, dict) and doc.get("status") == "ok"


def decode_event(ev: Event) -> Any:
    """Decodes an event's JSON data, naming the event on failure."""
    try:
        return json.loads(ev.data)
    except ValueError as e:
        raise InternalError("internal", "decoding %s event: %s" % (ev.name, e)) from None


def failure_error(ev: Event) -> ForkboxError:
    """The typed error of a stream's failure event (data: {code, message})."""
    try:
        doc = json.loads(ev.data)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("code"):
        return error_for_code(str(doc["code"]), str(doc.get("message") or ""))
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        return error_for_code(str(err.get("code") or "internal"), str(err.get("message") or ""))
    return InternalError("internal", ev.data)


def sandbox_path(sandbox: str, suffix: str = "") -> str:
    return "/v1/sandboxes/" + urllib.parse.quote(sandbox, safe="") + suffix


def quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def resolve_client(client: Optional[Client], url: Optional[str], api_key: Optional[str],
                   request_timeout: Optional[float] = None) -> Client:
    """``client`` when given, else a Client from the arguments and the
    environment (read now, so a changed FORKBOX_URL takes effect)."""
    if client is not None:
        return client
    return Client(url, api_key, request_timeout)


def compact(d: Dict[str, Any]) -> Dict[str, Any]:
    """d without its None values."""
    return {k: v for k, v in d.items() if v is not None}
