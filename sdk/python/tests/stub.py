"""A scripted HTTP server for the SDK's unit tests: each route answers what
the test sets, and every request is recorded. Real HTTP over loopback, so
the SDK's real transport is what is tested."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit


class Recorded:
    def __init__(self, method: str, path: str, query: Dict[str, List[str]], headers: Dict[str, str], body: bytes):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


# A route answer: (status, headers, body bytes) or a callable writing to the handler.
Answer = Tuple[int, Dict[str, str], bytes]


def json_answer(status: int, doc: Any) -> Answer:
    return status, {"Content-Type": "application/json"}, json.dumps(doc).encode()


def error_answer(status: int, code: str, message: str) -> Answer:
    return json_answer(status, {"error": {"code": code, "message": message}})


def sse_answer(events: List[Tuple[str, Any]], chunk: Optional[int] = None) -> Callable[["Handler"], None]:
    """Writes events as text/event-stream, chunked, in pieces of `chunk` bytes."""

    def write(h: "Handler") -> None:
        body = b"".join(("event: %s\ndata: %s\n\n" % (n, d if isinstance(d, str) else json.dumps(d))).encode()
                        for n, d in events)
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        step = chunk or len(body) or 1
        for i in range(0, len(body), step):
            piece = body[i:i + step]
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")

    return write


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "StubServer"

    def log_message(self, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        rec = Recorded(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()), body)
        self.server.requests.append(rec)
        ans = self.server.routes.get((self.command, parts.path))
        if ans is None:
            ans = error_answer(404, "not_found", "no route for %s %s" % (self.command, parts.path))
        if isinstance(ans, list):  # a sequence of answers, one per call; the last repeats
            ans = ans.pop(0) if len(ans) > 1 else ans[0]
        if callable(ans):
            ans(self)
            return
        status, headers, data = ans
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes: Dict[Tuple[str, str], Any] = {}
        self.requests: List[Recorded] = []
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.server_address[1]

    def close(self) -> None:
        self.shutdown()
        self.server_close()
