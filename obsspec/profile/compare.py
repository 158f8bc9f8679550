"""Two profile reports side by side: per figure, NEW - OLD with a 95% interval, and whether it
is a significant regression.

    result = compare_reports(old_report, new_report)   # {"levels": {...}, "regressions": [...]}

The intervals come from the reports alone, since what a CI job keeps is often report.json:
- a latency figure's difference uses each report's bootstrap interval read as normal (half
  its width over 1.96 is a standard error), the two errors added in quadrature;
- a rate's uses its counts (the `speculation` block), with the Agresti-Caffo interval for a
  difference of proportions (one success and one failure added to each side), which behaves
  at rates of 0 and 1 where the plain normal interval collapses.
A difference is significant when its interval excludes 0, a regression when it is
significant and in the figure's bad direction. A figure either report lacks (null, or no
interval to judge by) is shown, never judged. Levels of concurrency both reports measured are
compared each; reports with none in common are refused (different regimes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from obsspec.errors import ConfigError

Z95 = 1.96


@dataclass(frozen=True)
class Figure:
    key: str
    better: str  # "higher" or "lower"
    # the figure's (difference, standard error of the difference) from OLD and NEW's levels
    spread: Callable[[Mapping, Mapping], tuple[float, float] | None] | None


def from_intervals(key: str) -> Callable[[Mapping, Mapping], tuple[float, float] | None]:
    def spread(old: Mapping, new: Mapping) -> tuple[float, float] | None:
        errors = [standard_error(level.get(f"{key}_ci95")) for level in (old, new)]
        if None in errors or old.get(key) is None or new.get(key) is None:
            return None
        return new[key] - old[key], math.hypot(*errors)

    return spread


def standard_error(interval) -> float | None:
    if not interval or len(interval) != 2 or None in interval:
        return None
    return (interval[1] - interval[0]) / (2 * Z95)


def from_counts(
    part: str, whole: Callable[[Mapping], int]
) -> Callable[[Mapping, Mapping], tuple[float, float] | None]:
    def spread(old: Mapping, new: Mapping) -> tuple[float, float] | None:
        counts = [(level["speculation"][part], whole(level["speculation"])) for level in (old, new)]
        if any(n <= 0 for _, n in counts):
            return None
        (x0, n0), (x1, n1) = counts
        p0, p1 = (x0 + 1) / (n0 + 2), (x1 + 1) / (n1 + 2)
        error = math.sqrt(p0 * (1 - p0) / (n0 + 2) + p1 * (1 - p1) / (n1 + 2))
        return p1 - p0, error

    return spread


def used(speculation: Mapping) -> int:
    s = speculation
    return s["attempted"] - s["exec_won"] - s["failed"] - s["empty"]


FIGURES = (
    Figure("latency_reduction", "higher", from_intervals("latency_reduction")),
    Figure("oracle_fraction", "higher", from_intervals("oracle_fraction")),
    Figure("match_rate_wm", "higher", from_counts("wm_matched", lambda s: s["wm_asked"])),
    Figure("match_rate_attempted", "higher", from_counts("matched", lambda s: s["attempted"])),
    Figure("match_rate_used", "higher", from_counts("matched", used)),
    Figure("exec_won_rate", "lower", from_counts("exec_won", lambda s: s["attempted"])),
    # the ceiling: a change says the workload or the machine changed, not speculation
    Figure("oracle_latency_reduction", "higher", from_intervals("oracle_latency_reduction")),
    Figure("tokens_wasted_fraction", "lower", None),
)
CONTEXT = {"oracle_latency_reduction"}  # shown and judged, never a regression


def compare_reports(old: Mapping, new: Mapping) -> dict:
    levels = common_levels(old, new)
    compared = {level: compare_level(old, new, level) for level in levels}
    regressions = [
        f"{row['key']} at concurrency {level}"
        for level, rows in compared.items()
        for row in rows
        if row["regression"]
    ]
    return {"levels": compared, "regressions": regressions, "notes": setting_notes(old, new)}


SETTINGS = ("tasks", "policy", "speculation.world_model", "limits", "episodes_per_task", "seed")


def setting_notes(old: Mapping, new: Mapping) -> list[str]:
    """What the two profiles ran with that differs: a change there, not in speculation, may
    explain a difference."""
    notes = []
    for key in SETTINGS:
        before, after = (setting(report.get("config") or {}, key) for report in (old, new))
        if before != after:
            notes.append(f"{key} differs: OLD {before!r}, NEW {after!r}")
    return notes


def setting(config: Mapping, key: str):
    value = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def compare_level(old: Mapping, new: Mapping, level: str) -> list[dict]:
    before, after = old["by_concurrency"][level], new["by_concurrency"][level]
    return [compare_figure(figure, before, after) for figure in FIGURES]


def common_levels(old: Mapping, new: Mapping) -> list[str]:
    for name, report in (("OLD", old), ("NEW", new)):
        if not isinstance(report.get("by_concurrency"), Mapping) or not report["by_concurrency"]:
            raise ConfigError(f"{name} is not a profile report (it has no by_concurrency)")
    levels = [level for level in old["by_concurrency"] if level in new["by_concurrency"]]
    if not levels:
        raise ConfigError(
            f"OLD was profiled at concurrency {', '.join(old['by_concurrency'])} and NEW at "
            f"{', '.join(new['by_concurrency'])}: no level in common to compare",
            hint="profile both with the same --concurrency",
        )
    return sorted(levels, key=int)


def compare_figure(figure: Figure, old: Mapping, new: Mapping) -> dict:
    before, after = old.get(figure.key), new.get(figure.key)
    row = {
        "key": figure.key,
        "better": figure.better,
        "old": before,
        "new": after,
        "diff": None if before is None or after is None else round(after - before, 4),
        "diff_ci95": None,
        "significant": False,
        "regression": False,
    }
    spread = figure.spread(old, new) if figure.spread is not None else None
    if row["diff"] is None or spread is None:
        return row
    center, error = spread
    low, high = center - Z95 * error, center + Z95 * error
    row["diff_ci95"] = [round(low, 4), round(high, 4)]
    row["significant"] = low > 0 or high < 0
    worse = high < 0 if figure.better == "higher" else low > 0
    row["regression"] = row["significant"] and worse and figure.key not in CONTEXT
    return row
