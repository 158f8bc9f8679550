"""Speculation counted over turns, episodes and runs: sums of counts, rates only at the end.

    totals = SpeculationTotals.of_turns(trajectory.turns)      # one episode
    run = sum((SpeculationTotals.of_row(row) for row in rows), SpeculationTotals())
    run.summary()["match_rate_wm"]

Rates are pooled (a sum of hits over a sum of attempts), never means of per-episode ratios,
so a short episode weighs what its turns weigh. Three match rates, because they answer three
questions (every report uses these names with these meanings):

    match_rate_wm        = wm_matched / wm_asked          the world model alone: its first
                                                          (greedy) guess, over every command
                                                          it was asked about and answered
                                                          (the paper's "66.4% of attempts")
    match_rate_wm_any    = wm_matched_any / wm_asked      the same, any of its guesses (differs
                                                          from match_rate_wm only at breadth > 1)
    near_miss_rate       = wm_near_miss / wm_asked        its first guess not exact but within a
                                                          tenth by edit distance (a timing, a
                                                          hash): never a match, shown apart
    match_rate_attempted = matched / attempted            the cascade as used: a guess from
                                                          any source (cache, rules, repeats,
                                                          world model), any of the breadth,
                                                          over every command the gate let
                                                          through
    match_rate_used      = matched / (attempted - exec_won - failed - empty)
                                                          as attempted, but only guesses that
                                                          arrived in time (the reference
                                                          implementation's "exact fraction";
                                                          it flatters)

The world model is asked only when the cache and the rules had no confident answer; a query
cancelled because the real output came first, or that failed, has no answer to score and is
not in wm_asked (it is in exec_won or failed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields

from obsspec.trajectory import SpeculationRecord, Turn


@dataclass
class SpeculationTotals:
    command_turns: int = 0  # turns that ran a command (speculated on or not)
    attempted: int = 0
    matched: int = 0
    exec_won: int = 0
    failed: int = 0
    empty: int = 0  # the predictor answered, with nothing to offer
    gated: int = 0
    rollbacks: int = 0
    kept: int = 0  # speculative replies committed
    tokens_ahead: int = 0
    tokens_committed: int = 0
    tokens_wasted: int = 0
    wm_tokens: int = 0
    overlap_s: float = 0.0
    predict_s: float = 0.0  # summed over turns with a prediction
    exec_s: float = 0.0  # summed over command turns
    lossless_violations: int = 0
    wm_asked: int = 0  # commands the world model answered (see the module docstring)
    wm_guesses: int = 0  # its distinct guesses
    wm_matched: int = 0  # its first guess was exact
    wm_matched_any: int = 0  # one of its guesses was exact
    wm_near_miss: int = 0  # its first guess was not exact but near (obsspec.speculation.near_miss)
    resubmitted: int = 0  # kept replies resubmitted at priority 0 (still queued when promoted)
    # The gate's decisions about the world model, by reason (obsspec.speculation.gate)
    gate_reasons: Counter = field(default_factory=Counter)

    def add(self, record: SpeculationRecord | Mapping | None, *, predict_s=0.0, exec_s=0.0):
        """One command turn and its record (None: the turn ran sequentially)."""
        self.command_turns += 1
        self.exec_s += exec_s
        if record is None:
            return
        r = record if isinstance(record, Mapping) else asdict(record)
        self.attempted += bool(r.get("attempted"))
        self.matched += bool(r.get("matched"))
        self.exec_won += bool(r.get("exec_won"))
        self.failed += bool(r.get("failed"))
        self.empty += bool(
            r.get("attempted")
            and not r.get("exec_won")
            and not r.get("failed")
            and not r.get("predictions")
        )
        self.gated += bool(r.get("gated"))
        self.rollbacks += bool(r.get("rollback"))
        self.kept += bool(r.get("tokens_committed"))
        self.tokens_ahead += r.get("tokens_ahead") or 0
        self.tokens_committed += r.get("tokens_committed") or 0
        self.tokens_wasted += r.get("tokens_wasted") or 0
        self.wm_tokens += r.get("wm_tokens") or 0
        self.overlap_s += r.get("overlap_s") or 0.0
        self.lossless_violations += bool(r.get("lossless_violation"))
        # missing in datasets written before these fields: 0
        self.wm_asked += bool(r.get("wm_asked"))
        self.wm_guesses += r.get("wm_guesses") or 0
        self.wm_matched += bool(r.get("wm_matched"))
        self.wm_matched_any += bool(r.get("wm_matched_any"))
        self.wm_near_miss += bool(r.get("wm_near_miss"))
        self.predict_s += predict_s
        self.resubmitted += bool(r.get("resubmitted"))
        if r.get("gate"):  # missing in datasets written before the gate said why
            self.gate_reasons[r["gate"]] += 1

    @classmethod
    def of_turns(cls, turns: Iterable[Turn]) -> SpeculationTotals:
        totals = cls()
        for turn in turns:
            if turn.action == "command":
                totals.add(turn.speculation, predict_s=turn.predict_s, exec_s=turn.exec_s)
        return totals

    @classmethod
    def of_row(cls, row: Mapping) -> SpeculationTotals:
        """The same from a dataset row (obsspec.rollout.dataset)."""
        totals = cls()
        for turn in row["turns"]:
            if turn["action"] == "command":
                totals.add(
                    turn.get("speculation"),
                    predict_s=turn.get("predict_s") or 0.0,
                    exec_s=turn.get("exec_s") or 0.0,
                )
        return totals

    def __add__(self, other: SpeculationTotals) -> SpeculationTotals:
        return SpeculationTotals(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    @property
    def used(self) -> int:
        return self.attempted - self.exec_won - self.failed - self.empty

    def summary(self) -> dict:
        return {
            **{
                f.name: round(v, 3) if isinstance(v := getattr(self, f.name), float) else v
                for f in fields(self)
                if f.name != "gate_reasons"
            },
            "gate_reasons": dict(sorted(self.gate_reasons.items())),
            **self.match_rates(),
            "exec_won_rate": pooled_rate(self.exec_won, self.attempted),
            "failed_rate": pooled_rate(self.failed, self.attempted),
            "attempt_rate": pooled_rate(self.attempted, self.command_turns),
            "tokens_wasted_per_committed": pooled_rate(self.tokens_wasted, self.tokens_committed),
        }

    def match_rates(self) -> dict:
        """The three match rates of the module docstring (and the world model's any-guess)."""
        return {
            "match_rate_wm": pooled_rate(self.wm_matched, self.wm_asked),
            "match_rate_wm_any": pooled_rate(self.wm_matched_any, self.wm_asked),
            "near_miss_rate": pooled_rate(self.wm_near_miss, self.wm_asked),
            "match_rate_attempted": pooled_rate(self.matched, self.attempted),
            "match_rate_used": pooled_rate(self.matched, self.used),
        }


def pooled_rate(part: float, whole: float) -> float | None:
    """A ratio of sums, rounded for reports; None when there is nothing to divide by."""
    return round(part / whole, 4) if whole else None
