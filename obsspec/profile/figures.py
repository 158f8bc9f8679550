"""The figures of a profile: what speculation bought on the same episodes, and why.

    figures = profile_figures(episodes)     # [ArmEpisodes(seq=row, spec=row, oracle=row), ...]

Rows are dataset rows (obsspec.rollout.dataset) of one episode (task, seed) run in each arm.
Latency is an episode's agent seconds (the turns; sandbox start and verifier are reported
apart). Every rate is pooled (a ratio of sums); latency reductions are also given as the
median of per-episode reductions, and with a bootstrap 95% interval over episodes:

    latency_reduction          1 - sum(T_spec) / sum(T_seq)
    oracle_latency_reduction   1 - sum(T_oracle) / sum(T_seq)      (a perfect, instant predictor)
    oracle_fraction            latency_reduction / oracle_latency_reduction
    match_rate_wm              the world model's first guess exact / commands it answered
                               (the paper's figure; match_rate_wm_any: any of its guesses)
    match_rate_attempted       exact (any source, any guess) / attempted  (speculative arm)
    match_rate_used            exact / guesses that arrived in time (the reference's figure)
                               (the three are defined in obsspec.speculation.totals)
    exec_won_rate              real output first / attempted
    predictor_speedup_p50      median of command seconds / prediction seconds, every source
                               (a state-cache or repeat answer takes microseconds)
    wm_speedup_p50             the same over the world model's answers alone (the paper's
                               "predictions arrive ~16x faster than execution")
    tokens_wasted_fraction     discarded policy tokens / committed policy tokens
    lossless_violations        kept replies whose context was not the real one (must be 0)
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from obsspec.speculation.gate import command_family
from obsspec.speculation.predictor import WORLD_MODEL
from obsspec.speculation.totals import SpeculationTotals, pooled_rate


@dataclass(frozen=True)
class ArmEpisodes:
    """One episode (task, seed) as each arm ran it."""

    seq: dict
    spec: dict
    oracle: dict


def reduction(episodes: Sequence[ArmEpisodes], arm: str) -> float | None:
    base = sum(e.seq["agent_s"] for e in episodes)
    if base <= 0:
        return None
    return 1 - sum(getattr(e, arm)["agent_s"] for e in episodes) / base


def median_reduction(episodes: Sequence[ArmEpisodes], arm: str) -> float | None:
    values = [
        1 - getattr(e, arm)["agent_s"] / e.seq["agent_s"] for e in episodes if e.seq["agent_s"] > 0
    ]
    return statistics.median(values) if values else None


def bootstrap(
    statistic: Callable[[Sequence[ArmEpisodes]], float | None],
    episodes: Sequence[ArmEpisodes],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> list[float] | None:
    """A 95% percentile interval, resampling whole episodes."""
    if len(episodes) < 2:
        return None
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        value = statistic([rng.choice(episodes) for _ in episodes])
        if value is not None:
            values.append(value)
    if not values:
        return None
    values.sort()
    return [values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]]


# Below this ceiling (half a percent of latency) the fraction of it is the ratio of two
# numbers within noise of 0: an oracle policy's episodes (no generation to overlap) gave
# -281% of a ceiling of 0.0%. None says there is no ceiling to be a fraction of.
MIN_CEILING = 0.005


def oracle_fraction(episodes: Sequence[ArmEpisodes]) -> float | None:
    possible = reduction(episodes, "oracle")
    achieved = reduction(episodes, "spec")
    if possible is None or achieved is None or possible < MIN_CEILING:
        return None
    return achieved / possible


def command_turns(row: dict):
    return [t for t in row["turns"] if t["action"] == "command"]


def totals(rows: Sequence[dict]) -> SpeculationTotals:
    return sum((SpeculationTotals.of_row(row) for row in rows), SpeculationTotals())


def predictor_speedup_p50(rows: Sequence[dict], source: str | None = None) -> float | None:
    """Over command turns with a prediction (from `source` only, when given)."""
    ratios = [
        t["exec_s"] / t["predict_s"]
        for row in rows
        for t in command_turns(row)
        if (record := t.get("speculation"))
        and record["predictions"]
        and t["predict_s"] > 0
        and (source is None or record.get("source") == source)
    ]
    return statistics.median(ratios) if ratios else None


def tokens_wasted_fraction(rows: Sequence[dict]) -> float | None:
    committed = sum(len(t["action_ids"]) for row in rows for t in row["turns"])
    wasted = totals(rows).tokens_wasted
    return wasted / committed if committed else None


def breakdown(rows: Sequence[dict], key: Callable[[dict], str]) -> dict[str, dict]:
    """Pooled speculation figures per group of command turns (family, or source)."""
    groups: dict[str, SpeculationTotals] = defaultdict(SpeculationTotals)
    for row in rows:
        for turn in command_turns(row):
            record = turn.get("speculation")
            groups[key(turn)].add(record, predict_s=turn["predict_s"], exec_s=turn["exec_s"])
    return {
        name: {
            "command_turns": t.command_turns,
            "attempted": t.attempted,
            "matched": t.matched,
            "wm_asked": t.wm_asked,
            "wm_matched": t.wm_matched,
            **t.match_rates(),
            "exec_won": t.exec_won,
            "mean_exec_s": pooled_rate(t.exec_s, t.command_turns),
        }
        for name, t in sorted(groups.items())
    }


def source_of(turn: dict) -> str:
    record = turn.get("speculation") or {}
    if not record.get("attempted"):
        return "(not attempted)"
    return record.get("source") or "(no answer)"


def phase_means(rows: Sequence[dict]) -> dict:
    n = len(rows)
    return {
        "episodes": n,
        "agent_s_mean": pooled_rate(sum(r["agent_s"] for r in rows), n),
        "sandbox_start_s_mean": pooled_rate(sum(r["sandbox_start_s"] for r in rows), n),
        "verifier_s_mean": pooled_rate(sum(r["verifier_s"] for r in rows), n),
    }


def profile_figures(episodes: Sequence[ArmEpisodes]) -> dict:
    spec_rows = [e.spec for e in episodes]
    spec = totals(spec_rows).summary()
    oracle = totals([e.oracle for e in episodes]).summary()
    return {
        "episodes": len(episodes),
        "latency_reduction": _round(reduction(episodes, "spec")),
        "latency_reduction_median": _round(median_reduction(episodes, "spec")),
        "latency_reduction_ci95": _round_all(bootstrap(lambda es: reduction(es, "spec"), episodes)),
        "oracle_latency_reduction": _round(reduction(episodes, "oracle")),
        "oracle_latency_reduction_median": _round(median_reduction(episodes, "oracle")),
        "oracle_latency_reduction_ci95": _round_all(
            bootstrap(lambda es: reduction(es, "oracle"), episodes)
        ),
        "oracle_fraction": _round(oracle_fraction(episodes)),
        "oracle_fraction_ci95": _round_all(bootstrap(oracle_fraction, episodes)),
        "match_rate_wm": spec["match_rate_wm"],
        "match_rate_wm_any": spec["match_rate_wm_any"],
        "near_miss_rate": spec["near_miss_rate"],
        "match_rate_attempted": spec["match_rate_attempted"],
        "match_rate_used": spec["match_rate_used"],
        "exec_won_rate": spec["exec_won_rate"],
        "predictor_speedup_p50": _round(predictor_speedup_p50(spec_rows)),
        "wm_speedup_p50": _round(predictor_speedup_p50(spec_rows, WORLD_MODEL)),
        "tokens_wasted_fraction": _round(tokens_wasted_fraction(spec_rows)),
        "lossless_violations": spec["lossless_violations"] + oracle["lossless_violations"],
        "by_family": breakdown(spec_rows, lambda t: command_family(t["command"])),
        "by_source": breakdown(spec_rows, source_of),
        "speculation": spec,
        "oracle_speculation": oracle,
        "phases": {
            arm: phase_means([getattr(e, arm) for e in episodes])
            for arm in ("seq", "spec", "oracle")
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _round_all(values: list[float] | None) -> list[float] | None:
    return None if values is None else [round(v, 4) for v in values]
