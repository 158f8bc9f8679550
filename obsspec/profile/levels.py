"""Concurrency levels of a profile: how items are grouped into waves, and where each level goes.

    levels = parse_levels("1,8")                 # --concurrency; [1, 8]
    for wave in waves(items, 8): ...             # 8 episodes at once in each arm
    orders = arm_orders()                        # next(orders): the next wave's arm order
    arms_dir(8, first=False)                     # "arms/c8": that level's datasets
    peak_at_once([(0.0, 2.0), (1.0, 3.0)])       # 2: episodes that ran at the same time

At level N the items are played in waves of N: the N episodes of one arm at once, then the
same N in the next arm. An arm's episodes share the policy engine with each other only (as the
episodes of an RL step do), and the arms of a wave see the same machine.

The arms' order alternates wave after wave, counted across levels: seq, spec, oracle, then
spec, seq, oracle. Over any two waves seq and spec run A B B A, so a drift in the machine's
load between them cancels instead of always favouring the arm that runs first, and a level
starts with the order the previous level did not end with (so a level of one wave does not
always get the same). The oracle replays the seq arm's outputs, so it runs after seq: last in
both orders, it is the one arm drift is not balanced for, which moves the ceiling, never the
saving. A level whose waves all ran in one order says so (`arm_order_note`).

The first level's datasets stay where a one-level profile puts them (OUT/arms/<arm>), so
readers of a profile (`profile simulate --calibrate`, `train-wm --data`) keep working; every
later level N goes under OUT/arms/c<N>/<arm>, and the report's `by_concurrency[N].arms_dir`
names the directory (relative to OUT).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

from obsspec.errors import ConfigError

T = TypeVar("T")
FLAG = "--concurrency"
# The two orders a wave's arms run in, taken in turn (the oracle always after seq: see above).
ARM_ORDERS = (("seq", "spec", "oracle"), ("spec", "seq", "oracle"))


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


def arm_orders() -> Iterator[tuple[str, ...]]:
    """The arm order of each wave, one after another across every level: ARM_ORDERS in turn."""
    return itertools.cycle(ARM_ORDERS)


def order_name(order: Sequence[str]) -> str:
    """("spec", "seq", "oracle") -> "spec,seq,oracle": the report's key for an order."""
    return ",".join(order)


def arm_order_note(orders: Mapping[str, int], level: int) -> str | None:
    """A warning when every wave of a level ran seq and spec in the same order: whatever the
    load did between them then favours one arm. None when both orders ran (or no wave did)."""
    if len(orders) != 1:
        return None
    (order,) = orders
    first, second = (arm for arm in order.split(",") if arm in ("seq", "spec"))
    waves_run = "the one wave" if orders[order] == 1 else f"all {orders[order]} waves"
    return (
        f"{waves_run} ran {first} before {second}: drift between the arms is not balanced; "
        f"play more than {level} episodes (--episodes-per-task) for two waves"
    )


def waves_first(orders: Mapping[str, int] | None) -> str | None:
    """A level's `arm_orders` as waves that ran seq first / spec first ("2/1"); None for a
    report from before the orders alternated."""
    if not orders:
        return None
    return f"{orders.get(order_name(ARM_ORDERS[0]), 0)}/{orders.get(order_name(ARM_ORDERS[1]), 0)}"


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
