"""Near misses: right except for a few characters no model can know; the bounded edit
distance agrees with the textbook one."""

from __future__ import annotations

import random
import time

from obsspec.speculation.near_miss import (
    NEAR_MISS_THRESHOLD,
    edit_distance_within,
    first_difference,
    is_near_miss,
)

TIMED = "\n".join(f"step {i}: compiled module_{i}.o ok" for i in range(5)) + (
    "\nreal\t0m0.013s\nuser\t0m0.004s\nsys\t0m0.002s\n[exit code: 0]"
)


def levenshtein(a: str, b: str) -> int:
    """The textbook O(n*m) table, to check the fast one against."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def test_an_exact_prediction_is_not_a_near_miss():
    assert not is_near_miss(TIMED, TIMED)


def test_a_changed_timing_in_a_200_character_output_is_a_near_miss():
    assert 180 <= len(TIMED) <= 220
    assert is_near_miss(TIMED.replace("0.013s", "0.021s"), TIMED)


def test_a_different_output_is_not_a_near_miss():
    other = "ls: cannot access 'build': No such file or directory\n[exit code: 2]"
    assert not is_near_miss(other, TIMED)
    assert not is_near_miss("a\n[exit code: 0]", "b\n[exit code: 1]")  # 2 of 16 differ


def test_empty_texts_are_never_near_misses():
    assert not is_near_miss("", TIMED)
    assert not is_near_miss(TIMED, "")
    assert not is_near_miss("", "")


def test_the_threshold_is_a_share_of_the_longer_text():
    observation = "x" * 100
    assert is_near_miss("x" * 90, observation)  # 10 deletions of 100
    assert not is_near_miss("x" * 89, observation)
    assert NEAR_MISS_THRESHOLD == 0.1


def test_the_bounded_distance_agrees_with_the_textbook_one():
    chance = random.Random(7)
    for _ in range(300):
        a = "".join(chance.choices("abc\n", k=chance.randint(0, 30)))
        b = "".join(chance.choices("abc\n", k=chance.randint(0, 30)))
        true = levenshtein(a, b)
        for limit in (0, true - 1, true, true + 3):
            if limit < 0:
                continue
            expected = true if true <= limit else None
            assert edit_distance_within(a, b, limit) == expected, (a, b, limit)


def test_the_first_differing_lines_are_shown():
    assert first_difference("a\nb 1\nc", "a\nb 2\nc") == ("b 1", "b 2")
    assert first_difference("a", "a\n[exit code: 0]") == ("", "[exit code: 0]")


def test_200_pairs_of_4_kb_observations_are_quick():
    """Not a timed assert: prints the measure (about 1 s on 2 cores). Half the pairs differ
    by digits scattered over the text (the worst case: the shared ends cannot be dropped),
    half are other outputs of the same shape (the bound on the distance stops them early)."""
    chance = random.Random(3)

    def listing(seed: int, name: str) -> str:
        local = random.Random(seed)
        sizes = [local.randint(1, 99999) for _ in range(90)]
        return "\n".join(f"-rw-r--r-- 1 root {size:>6} {name}_{i}" for i, size in enumerate(sizes))

    pairs = []
    for index in range(100):
        text = listing(index, "file.txt")
        retimed = "".join(
            str(chance.randint(0, 9)) if c.isdigit() and chance.random() < 0.05 else c for c in text
        )
        pairs.append((retimed, text))
        pairs.append((listing(1000 + index, "report.csv"), text))
    started = time.perf_counter()
    near = [is_near_miss(prediction, observation) for prediction, observation in pairs]
    elapsed = time.perf_counter() - started
    print(f"200 pairs of ~4 KB: {elapsed:.3f} s, {sum(near)} near misses")
    assert near == [True, False] * 100
