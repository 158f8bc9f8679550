"""Near misses: predictions right except for what no model can know (timings, pids, dates).

    is_near_miss("real 0.021s\\n...", "real 0.013s\\n...")     # True: a few characters differ
    edit_distance_within("kitten", "sitting", limit=3)       # 3; None when more than limit
    first_difference(prediction, observation)                # the first lines that differ

A near miss still never matches (exact match is what keeps speculation lossless); it is
counted apart so a report shows how much of the miss rate is what no model could predict.
A prediction is a near miss when it is not exactly the observation, both are non-empty, and
their Levenshtein distance is at most NEAR_MISS_THRESHOLD of the longer text's length.

Speed: only "is the distance within the limit" is asked, never the distance itself, so the
work is bounded by the limit (the band): a length difference over the limit answers at once,
so does a character-count difference over it; a shared head and tail are dropped (slice
compares in C), and what is left runs Myers' bit-parallel algorithm (one Python big-int step
per character instead of one per cell) that stops as soon as the distance can no longer come
back under the limit. Measured on 2 CPU cores, ~3.3 KB listings: a different output of the
same shape ~1 ms (stopped early), a difference confined to one place ~25 us (the ends are
dropped), and the worst case, a few digits changed all over the text so nothing is dropped,
~10 ms (the whole column advanced once per character). tests/speculation/test_near_miss.py
prints the measure for 200 pairs (~1 s, most of it the worst case).
"""

from __future__ import annotations

from collections import Counter

from obsspec.types import first_differing_line

NEAR_MISS_THRESHOLD = 0.1  # edit distance / length of the longer text


def is_near_miss(prediction: str, observation: str, threshold: float = NEAR_MISS_THRESHOLD) -> bool:
    """Not exact, both non-empty, and at most `threshold` of the longer text differs."""
    if not prediction or not observation or prediction == observation:
        return False
    limit = int(threshold * max(len(prediction), len(observation)))
    return edit_distance_within(prediction, observation, limit) is not None


def edit_distance_within(a: str, b: str, limit: int) -> int | None:
    """The Levenshtein distance of a and b when it is at most `limit`, else None."""
    if abs(len(a) - len(b)) > limit:
        return None  # every extra character is at least one edit
    a, b = strip_common_ends(a, b)
    if not a or not b:
        return max(len(a), len(b))  # what is left is pure insertion (within the limit above)
    if character_count_bound(a, b) > limit:
        return None
    return bit_parallel_within(a, b, limit)


def strip_common_ends(a: str, b: str) -> tuple[str, str]:
    """a and b without their shared prefix and suffix (they cost no edit)."""
    head = common_prefix_length(a, b)
    a, b = a[head:], b[head:]
    tail = common_prefix_length(a[::-1], b[::-1])
    return a[: len(a) - tail], b[: len(b) - tail]


def common_prefix_length(a: str, b: str) -> int:
    """By bisection over slice equality: O(log n) compares done in C."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def character_count_bound(a: str, b: str) -> int:
    """A lower bound on the distance: an edit changes at most one character's count on each
    side, so the larger of the surplus and the deficit needs that many edits."""
    counts = Counter(a)
    counts.subtract(b)
    surplus = sum(n for n in counts.values() if n > 0)
    deficit = -sum(n for n in counts.values() if n < 0)
    return max(surplus, deficit)


def bit_parallel_within(a: str, b: str, limit: int) -> int | None:
    """Myers (1999) as Hyyrö (2001) gives it for the global distance: a's column of the
    dynamic-programming table is held as vertical +1/-1 deltas in two integers (bit i: row
    i), and each character of b advances the whole column at once."""
    if len(a) > len(b):
        a, b = b, a  # the shorter text is the column: narrower integers
    full = (1 << len(a)) - 1
    last = 1 << (len(a) - 1)
    positions: dict[str, int] = {}
    for i, char in enumerate(a):
        positions[char] = positions.get(char, 0) | (1 << i)
    plus, minus, score = full, 0, len(a)  # column 0: distances 1..len(a), all +1 steps
    remaining = len(b)
    for char in b:
        remaining -= 1
        equal = positions.get(char, 0)
        across = equal | minus
        down = (((equal & plus) + plus) ^ plus) | equal
        h_plus = minus | (~(down | plus) & full)
        h_minus = plus & down
        if h_plus & last:
            score += 1
        elif h_minus & last:
            score -= 1
        # why: each remaining character can lower the bottom cell by at most one
        if score - remaining > limit:
            return None
        h_plus = ((h_plus << 1) | 1) & full  # row 0 grows by one per character of b
        h_minus = (h_minus << 1) & full
        plus = h_minus | (~(across | h_plus) & full)
        minus = h_plus & across
    return score if score <= limit else None


def first_difference(prediction: str, observation: str) -> tuple[str, str]:
    """The first line where the two texts differ: (prediction's, observation's); "" for a
    line one of them lacks (obsspec.types.first_differing_line, without the line number)."""
    found = first_differing_line(prediction, observation)
    return ("", "") if found is None else found[1:]
