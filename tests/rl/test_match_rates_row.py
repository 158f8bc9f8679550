"""A step's metrics row from hand-made trajectories: the three match rates side by side."""

from __future__ import annotations

import pytest

from obsspec.rl.metrics import StepTimes, step_row
from obsspec.rl.run_files import METRIC_KEYS
from obsspec.rl.steps import StepBatch
from obsspec.trajectory import SpeculationRecord, Trajectory, Turn

POLICY = dict.fromkeys(
    ("policy_loss", "clip_fraction", "logprob_mismatch", "trained_episodes", "trained_tokens"), 0
) | {"grad_norm": None, "kl": None}


def command(record: SpeculationRecord | None) -> Turn:
    return Turn(0, "r", "command", "ls", "a\n[exit code: 0]", [1], [0.0], [2], speculation=record)


def batch() -> StepBatch:
    records = [
        # breadth 2: the world model's second guess was right, its first was not
        SpeculationRecord(attempted=True, source="lm", matched=True, predictions=2,
                          wm_asked=True, wm_guesses=2, wm_matched_any=True),
        # a cache hit: the world model never asked
        SpeculationRecord(attempted=True, source="cache", matched=True, predictions=1),
        # the world model's greedy guess right
        SpeculationRecord(attempted=True, source="lm", matched=True, predictions=1,
                          wm_asked=True, wm_guesses=1, wm_matched=True, wm_matched_any=True),
        SpeculationRecord(attempted=True, exec_won=True),  # the real output came first
        None,  # not speculated
    ]  # fmt: skip
    trajectory = Trajectory("t", "h", "m", 0, [0], turns=[command(r) for r in records])
    return StepBatch(rewards=[1.0], trajectories=[trajectory])


def row(speculate: bool = True) -> dict:
    times = StepTimes(1.0, 1.0, 1.0, 3.0)
    return step_row(1, batch(), POLICY, None, times, speculate=speculate, weight_version=1)


def test_the_three_match_rates_are_in_every_row():
    metrics = row()
    assert set(METRIC_KEYS) <= metrics.keys()
    assert metrics["spec_match_rate_wm"] == pytest.approx(1 / 2)  # the cache hit is not in it
    assert metrics["spec_match_rate_attempted"] == pytest.approx(3 / 4)
    assert metrics["spec_match_rate"] == metrics["spec_match_rate_attempted"]  # the old name
    assert metrics["spec_match_rate_used"] == pytest.approx(3 / 3)  # exec-won left out
    assert metrics["spec_wm_asked"] == 2


def test_without_speculation_the_rates_are_null():
    metrics = row(speculate=False)
    assert metrics["spec_match_rate_wm"] is None and metrics["spec_match_rate_used"] is None
