import io
import unittest

from forkbox._sse import Event, SSEDecoder, iter_events


def decode_all(data: bytes, step: int):
    dec = SSEDecoder()
    out = []
    for i in range(0, len(data), step):
        out.extend(dec.feed(data[i:i + step]))
    return out


class SSETest(unittest.TestCase):
    STREAM = (b": comment\n"
              b"event: stdout\ndata: {\"data\": \"a\"}\n\n"
              b"event: result\r\ndata: line1\r\ndata: line2\r\n\r\n"
              b"data:no-space\rid: 7\rretry: 10\r\r"
              b"event: empty\n\n"
              b"event: done\ndata: {}\n\n")
    WANT = [Event("stdout", '{"data": "a"}'), Event("result", "line1\nline2"),
            Event("message", "no-space"), Event("done", "{}")]

    def test_whole_and_split_at_every_byte(self):
        for step in (len(self.STREAM), 1, 2, 3, 7):
            with self.subTest(step=step):
                self.assertEqual(decode_all(self.STREAM, step), self.WANT)

    def test_cr_at_chunk_end_then_lf(self):
        dec = SSEDecoder()
        self.assertEqual(dec.feed(b"data: x\r"), [])
        # The LF completes the CRLF; the next CR is a blank line: dispatch.
        self.assertEqual(dec.feed(b"\n\r"), [Event("message", "x")])
        # This LF belongs to that CR: no second blank line, nothing more.
        self.assertEqual(dec.feed(b"\n"), [])
        self.assertEqual(dec.feed(b"data: y\n\n"), [Event("message", "y")])

    def test_event_name_does_not_leak_into_next(self):
        evs = decode_all(b"event: a\ndata: 1\n\ndata: 2\n\n", 1)
        self.assertEqual(evs, [Event("a", "1"), Event("message", "2")])

    def test_unterminated_last_event_is_dropped(self):
        evs = list(iter_events(io.BytesIO(b"event: a\ndata: 1\n\nevent: b\ndata: 2\n")))
        self.assertEqual(evs, [Event("a", "1")])

    def test_utf8_split_across_chunks(self):
        data = "data: héllo ✓\n\n".encode("utf-8")
        self.assertEqual(decode_all(data, 1), [Event("message", "héllo ✓")])


if __name__ == "__main__":
    unittest.main()
