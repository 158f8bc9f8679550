import itertools
import re

from hypothesis import given
from hypothesis import strategies as st

from obsspec.environments.capture import CappedBuffer, FrameSplitter, MarkedStream
from obsspec.types import TRUNCATION_MARKER

MARKER = re.compile(rb"__END_(\d+)__")


def feed_chunks(data: bytes, cuts: list[int], cap: int = 1 << 20) -> MarkedStream:
    stream = MarkedStream(MARKER, hold=32, cap=cap)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        stream.feed(data[a:b])
    return stream


@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=8), st.binary(max_size=20))
def test_marker_found_wherever_chunks_split(body, cuts, after):
    body = body.replace(b"__END_", b"")
    stream = feed_chunks(body + b"__END_42__" + after, cuts)
    assert stream.done and stream.match.group(1) == b"42"
    assert stream.buffer.text() == body.decode(errors="replace")
    assert stream.leftover == after


def test_without_marker_flush_keeps_everything():
    stream = feed_chunks(b"partial __END_4", [3, 9])
    assert not stream.done
    stream.flush()
    assert stream.buffer.text() == "partial __END_4"


def test_cap_keeps_head_and_tail_only():
    buffer = CappedBuffer(cap=10)
    for i in range(1000):
        buffer.add(f"{i:05d}\n".encode())
    assert buffer.total == 6000 and buffer.truncated
    assert buffer.text() == "00000\n0000" + TRUNCATION_MARKER + "\n00998\n00999\n"[-10:]
    small = CappedBuffer(cap=10)
    small.add(b"0123456789abcdefghij")
    assert not small.truncated and small.text() == "0123456789abcdefghij"


@given(
    st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=40)), max_size=6),
    st.lists(st.integers(0, 400), max_size=8),
)
def test_frames_split_into_streams_wherever_chunks_split(frames, cuts):
    data = b"".join(bytes([k, 0, 0, 0]) + len(p).to_bytes(4, "big") + p for k, p in frames)
    splitter = FrameSplitter()
    got = {1: b"", 2: b""}
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        for kind, piece in splitter.feed(data[a:b]):
            got[kind] += piece
    assert got == {k: b"".join(p for kind, p in frames if kind == k) for k in (1, 2)}
