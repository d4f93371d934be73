"""A server-sent events parser (the WHATWG text/event-stream format).

Lines end in LF, CRLF or a lone CR; ``data`` lines of one event are joined
with LF; lines starting with ``:`` are comments; a blank line dispatches the
event. ``id`` and ``retry`` are accepted and ignored (nothing reconnects). A
last event without its blank line is dropped, so a cut connection never
yields half an event.
"""

from __future__ import annotations

from typing import IO, Iterator, List, NamedTuple, Optional


class Event(NamedTuple):
    """One dispatched event: its name ("message" when the stream gave none)
    and its data."""

    name: str
    data: str


class SSEDecoder:
    """Incremental decoder: feed() bytes as they arrive, get whole events."""

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False  # the last byte fed was a CR: a following LF belongs to it
        self._name = ""
        self._data: List[str] = []
        self._has_data = False

    def feed(self, chunk: bytes) -> List[Event]:
        out: List[Event] = []
        if self._cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._cr = False
        buf = self._buf + chunk
        start = 0
        n = len(buf)
        i = 0
        while i < n:
            c = buf[i]
            if c == 0x0A or c == 0x0D:
                line = buf[start:i]
                if c == 0x0D:
                    if i + 1 < n:
                        if buf[i + 1] == 0x0A:
                            i += 1
                    else:
                        self._cr = True
                ev = self._line(line)
                if ev is not None:
                    out.append(ev)
                start = i + 1
            i += 1
        self._buf = buf[start:]
        return out

    def _line(self, raw: bytes) -> Optional[Event]:
        line = raw.decode("utf-8", "replace")
        if line == "":
            if not self._has_data:
                self._name = ""
                return None
            ev = Event(self._name or "message", "\n".join(self._data))
            self._name, self._data, self._has_data = "", [], False
            return ev
        if line.startswith(":"):
            return None
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._name = value
        elif field == "data":
            self._data.append(value)
            self._has_data = True
        return None


def iter_events(stream: IO[bytes]) -> Iterator[Event]:
    """Yields the events of a binary stream (an HTTP response) until it ends."""
    dec = SSEDecoder()
    read = getattr(stream, "read1", None) or stream.read
    while True:
        try:
            chunk = read(65536)
        except ValueError:  # read on a closed response
            return
        if not chunk:
            return
        for ev in dec.feed(chunk):
            yield ev
