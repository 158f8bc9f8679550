"""Python modules with property tests and known single-line bugs; used by unittest-fix and
git-bisect.

Each module's source and its test file are data files in templates/py_modules/
(`<name>.py.txt`, `test_<name>.py.txt`). Test templates use __PKG__ (the package), __N__
(iterations of the random test) and __SEED__.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources


@functools.cache
def _template(name: str) -> str:
    path = resources.files(__package__) / "templates" / "py_modules" / name
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Bug:
    func: str  # the function the bug is in (for the reference solution's grep)
    old: str  # the correct line fragment, unique in the module
    new: str  # the buggy replacement
    message: str  # a plausible commit message for the change


@dataclass(frozen=True)
class PyModule:
    name: str
    bugs: tuple[Bug, ...]
    per_second: int  # iterations of the random test per second of one CPU (measured)

    @property
    def source(self) -> str:
        return _template(f"{self.name}.py.txt")

    @property
    def test(self) -> str:
        return _template(f"test_{self.name}.py.txt")


PY_MODULES = [
    PyModule(
        "intervals",
        (
            Bug(
                "merge",
                "if merged and start <= merged[-1][1]:",
                "if merged and start < merged[-1][1]:",
                "Use a strict comparison in merge",
            ),
            Bug(
                "merge",
                "merged[-1][1] = max(merged[-1][1], end)",
                "merged[-1][1] = end",
                "Simplify interval extension in merge",
            ),
            Bug(
                "merge",
                "for start, end in sorted(intervals):",
                "for start, end in intervals:",
                "Skip the redundant sort in merge",
            ),
        ),
        per_second=95_000,
    ),
    PyModule(
        "stats",
        (
            Bug(
                "median",
                "return (ordered[mid - 1] + ordered[mid]) / 2",
                "return (ordered[mid] + ordered[mid + 1]) / 2",
                "Tidy median index arithmetic",
            ),
            Bug(
                "percentile",
                "rank = max(1, -(-pct * len(ordered) // 100))",
                "rank = max(1, pct * len(ordered) // 100)",
                "Simplify percentile rank",
            ),
            Bug(
                "median",
                "if len(ordered) % 2:",
                "if len(ordered) % 2 == 0:",
                "Make the parity check in median explicit",
            ),
        ),
        per_second=17_500,
    ),
    PyModule(
        "slugs",
        (
            Bug(
                "slugify",
                "if pending_dash and out:",
                "if pending_dash:",
                "Simplify dash handling in slugify",
            ),
            Bug(
                "slugify",
                "for ch in text.lower():",
                "for ch in text:",
                "Avoid copying the text in slugify",
            ),
            Bug(
                "slugify",
                "if ch.isascii() and ch.isalnum():",
                "if ch.isalnum():",
                "Accept all alphanumerics in slugify",
            ),
        ),
        per_second=64_000,
    ),
    PyModule(
        "money",
        (
            Bug(
                "split",
                "base + 1 if i < extra else base",
                "base + 1 if i <= extra else base",
                "Clarify remainder handling in split",
            ),
            Bug(
                "allocate",
                "key=lambda i: (-(amount * weights[i] % total), i)",
                "key=lambda i: (amount * weights[i] % total, i)",
                "Make the allocation order deterministic",
            ),
            Bug(
                "allocate",
                "shares = [amount * w // total for w in weights]",
                "shares = [round(amount * w / total) for w in weights]",
                "Round shares to the nearest cent",
            ),
        ),
        per_second=41_000,
    ),
    PyModule(
        "dates",
        (
            Bug(
                "is_leap",
                "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
                "return year % 4 == 0 and year % 100 != 0",
                "Simplify the leap year rule",
            ),
            Bug(
                "days_in_month",
                "return 30 if month in (4, 6, 9, 11) else 31",
                "return 30 if month in (4, 6, 9) else 31",
                "Tidy the month length table",
            ),
            Bug(
                "day_of_year",
                "for m in range(1, month)) + day",
                "for m in range(1, month)) + day - 1",
                "Count days of the year from zero",
            ),
            Bug(
                "weekday", "return (h + 5) % 7", "return (h + 6) % 7", "Normalise weekday numbering"
            ),
        ),
        per_second=255_000,
    ),
    PyModule(
        "rle",
        (
            Bug("decode", "count += ch", "count = ch", "Simplify count parsing in decode"),
            Bug(
                "encode",
                "while j < len(text) and text[j] == text[i]:",
                "while j < len(text) and text[j] == text[i] and j - i < 9:",
                "Cap run lengths at 9 for older readers",
            ),
        ),
        per_second=63_000,
    ),
    PyModule(
        "lru",
        (
            Bug(
                "put",
                "self.items.popitem(last=False)",
                "self.items.popitem()",
                "Use the default popitem in cache eviction",
            ),
            Bug(
                "put",
                "if len(self.items) > self.capacity:",
                "if len(self.items) >= self.capacity:",
                "Evict before the cache overflows",
            ),
        ),
        per_second=52_000,
    ),
    PyModule(
        "search",
        (
            Bug(
                "first_at_least",
                "if items[mid] < target:",
                "if items[mid] <= target:",
                "Tighten the binary search comparison",
            ),
            Bug(
                "first_at_least",
                "lo, hi = 0, len(items)",
                "lo, hi = 0, len(items) - 1",
                "Avoid searching past the end",
            ),
            Bug(
                "count_in_range",
                "first_at_least(items, high + 1)",
                "first_at_least(items, high)",
                "Simplify count_in_range",
            ),
        ),
        per_second=84_000,
    ),
    PyModule(
        "roman",
        (
            Bug("to_roman", '(400, "CD")', '(400, "CCCC")', "Use the additive form for 400"),
            Bug(
                "from_roman",
                "values[text[i + 1]] > value",
                "values[text[i + 1]] >= value",
                "Handle equal neighbours in from_roman",
            ),
            Bug(
                "to_roman",
                "if not 0 < number < 4000:",
                "if not 0 < number < 3999:",
                "Tighten the range check in to_roman",
            ),
        ),
        per_second=175_000,
    ),
]


def _module_test(module: PyModule, pkg: str, seconds: float, seed: int) -> str:
    """The module's test file, sized to take about `seconds` on one CPU."""
    n = max(20, int(module.per_second * seconds))
    return (
        module.test.replace("__PKG__", pkg).replace("__N__", str(n)).replace("__SEED__", str(seed))
    )


def _buggy(module: PyModule, bug: Bug) -> str:
    buggy = module.source.replace(bug.old, bug.new)
    # Both unique, so the reference solution's sed can undo the bug exactly.
    assert module.source.count(bug.old) == 1 and buggy.count(bug.new) == 1, bug
    return buggy
