"""Capturing output from a byte stream: end-marker detection, a memory cap, Docker framing.

A command's output ends where the shell prints a marker that only this command knows (it
carries a random id). Until then, bytes are kept up to a cap: the first `cap` bytes and the
last `cap` bytes, so that a command printing gigabytes costs at most 2 x cap of memory and the
rendered observation (head and tail) is the same as from the full output.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator

from obsspec.types import TRUNCATION_MARKER


class CappedBuffer:
    """Keeps the head and the tail of a byte stream, at most `cap` bytes of each."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail.append(bytes(data))
        self.tail_len += len(data)
        while self.tail_len - len(self.tail[0]) >= self.cap:
            self.tail_len -= len(self.tail.popleft())

    @property
    def dropped(self) -> int:
        """Bytes neither in the head nor in the last `cap` bytes."""
        return self.total - len(self.head) - min(self.tail_len, self.cap)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        """Decoded text (invalid UTF-8 replaced); TRUNCATION_MARKER where bytes were dropped."""
        tail = b"".join(self.tail)[-self.cap :]
        if not self.truncated:  # decode as one, a character may span head and tail
            return (bytes(self.head) + tail).decode(errors="replace")
        return (
            self.head.decode(errors="replace") + TRUNCATION_MARKER + tail.decode(errors="replace")
        )


class MarkedStream:
    """Feeds stream bytes into a CappedBuffer until `pattern` (the end marker) appears.

    Bytes that may be the start of a marker are held back until it is clear they are not;
    bytes after the marker (e.g. from a background job) are returned as leftover.
    """

    def __init__(self, pattern: re.Pattern[bytes], hold: int, cap: int) -> None:
        self.pattern = pattern
        self.hold = hold  # longest possible marker
        self.buffer = CappedBuffer(cap)
        self.window = bytearray()
        self.match: re.Match[bytes] | None = None
        self.leftover = b""

    @property
    def done(self) -> bool:
        return self.match is not None

    def feed(self, data: bytes) -> None:
        if self.done:
            self.leftover += data
            return
        self.window += data
        match = self.pattern.search(bytes(self.window))  # a copy: the match outlives window
        if match:
            self.buffer.add(bytes(self.window[: match.start()]))
            self.leftover = bytes(self.window[match.end() :])
            self.match = match
            self.window.clear()
            return
        keep = min(len(self.window), self.hold)
        self.buffer.add(bytes(self.window[: len(self.window) - keep]))
        del self.window[: len(self.window) - keep]

    def flush(self) -> None:
        """The stream ended without a marker: everything held back is output."""
        self.buffer.add(bytes(self.window))
        self.window.clear()


class FrameSplitter:
    """Splits Docker's multiplexed stream (attach or exec without a tty) into pieces.

    Each frame is an 8-byte header (stream id: 1 stdout, 2 stderr; three zero bytes; payload
    length, big-endian) and then its payload. Pieces are yielded as bytes arrive, a frame's
    payload possibly in several pieces, so that a huge frame is never held whole.
    """

    def __init__(self) -> None:
        self.header = bytearray()
        self.kind = 0
        self.left = 0  # payload bytes of the current frame still to come

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """(stream id, bytes) pieces of the frames in `data`."""
        view = memoryview(data)
        while view:
            if self.left == 0:
                need = 8 - len(self.header)
                self.header += view[:need]
                view = view[need:]
                if len(self.header) == 8:
                    self.kind = self.header[0]
                    self.left = int.from_bytes(self.header[4:8], "big")
                    self.header.clear()
                continue
            piece = view[: self.left]
            view = view[len(piece) :]
            self.left -= len(piece)
            yield self.kind, bytes(piece)
