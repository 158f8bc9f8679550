"""Concurrency levels of a profile: how items are grouped into waves, and where each level goes.

    levels = parse_levels("1,8")                 # --concurrency; [1, 8]
    for wave in waves(items, 8): ...             # 8 episodes at once in each arm
    arms_dir(8, first=False)                     # "arms/c8": that level's datasets
    peak_at_once([(0.0, 2.0), (1.0, 3.0)])       # 2: episodes that ran at the same time

At level N the items are played in waves of N: the N sequential episodes at once, then the N
speculative ones, then the N oracle ones. An arm's episodes share the policy engine with each
other only (as the episodes of an RL step do), and the arms of a wave see the same machine.

The first level's datasets stay where a one-level profile puts them (OUT/arms/<arm>), so
readers of a profile (`profile simulate --calibrate`, `train-wm --data`) keep working; every
later level N goes under OUT/arms/c<N>/<arm>, and the report's `by_concurrency[N].arms_dir`
names the directory (relative to OUT).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from obsspec.errors import ConfigError

T = TypeVar("T")
FLAG = "--concurrency"


def parse_levels(text: str, flag: str = FLAG) -> list[int]:
    """ "1,8" -> [1, 8]; a level that is not a whole number >= 1, or one given twice, is an
    error naming the flag."""
    levels: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            level = int(part)
        except ValueError:
            raise ConfigError(
                f"{flag} {text!r}: {part!r} is not a whole number (e.g. {flag} 1,8)"
            ) from None
        if level < 1:
            raise ConfigError(f"{flag} {text!r}: a level is episodes at once, at least 1")
        if level in levels:
            raise ConfigError(f"{flag} {text!r}: level {level} is given twice")
        levels.append(level)
    return levels


def waves(items: Sequence[T], size: int) -> list[list[T]]:
    """The items in order, in groups of `size` (the last may be smaller)."""
    if size < 1:
        raise ValueError(f"a wave holds at least one item, not {size}")
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def arms_dir(level: int, *, first: bool) -> str:
    """Where a level's arm datasets go, relative to --out (the arm's name is appended)."""
    return "arms" if first else f"arms/c{level}"


def peak_at_once(spans: Iterable[tuple[float, float]]) -> int:
    """The most (start, end) spans open at one instant; one ending as another starts does not
    overlap it."""
    spans = list(spans)
    edges = sorted(
        [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
        key=lambda edge: (edge[0], edge[1]),  # at a tie, ends (-1) before starts
    )
    peak = running = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak
