"""One metrics row per step, from the step's batch and what the trainers and syncs reported.

Rates are pooled over turns (matched / attempted over every speculated command of the
step), not averaged over episodes. A figure that does not apply is None (null in JSON): no
speculation this step, no co-training, nothing to train on.

The three match rates are those of obsspec.speculation.totals, over the step's turns:
`spec_match_rate_wm` (the world model alone, first guess: the paper's figure),
`spec_match_rate_attempted` (any source, any guess; `spec_match_rate` is the same figure under
its older name) and `spec_match_rate_used` (guesses that arrived in time).

The `wm_*` figures are those of the world model's co-training update that the step reports
(obsspec.rl.cotrain_overlap): synchronous (`cotrain_overlap` false), the step's own update, on
its own rows; one step behind (`cotrain_overlap` true), the update that finished during the
step, trained on the previous step's rows while this one rolled out, so step 1 has none (null)
and the step after a checkpoint reports the update the checkpoint awaited. `wm_trained_on_step`
names the step whose rows it learned (the row's step when synchronous; null when none
finished); `wm_wait_s` is how long the step waited on co-training alone: behind, after its
rollout, for the update still running; synchronous, after its policy update (null when it
awaited none).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from obsspec.rl.steps import StepBatch
from obsspec.speculation.totals import SpeculationTotals


@dataclass(frozen=True)
class StepTimes:
    rollout_s: float
    train_s: float  # the policy update, and the world-model update or the wait for it
    sync_s: float  # weights saved and reloaded into every engine
    step_s: float


@dataclass(frozen=True)
class CotrainTiming:
    """When the row's world-model update ran (see the module docstring)."""

    overlap: bool | None = None  # one step behind the rollout; None without co-training
    trained_on_step: int | None = None  # the step whose rows the reported update learned
    wait_s: float | None = None  # seconds the step waited on co-training alone

    def figures(self) -> dict:
        return {
            "cotrain_overlap": self.overlap,
            "wm_trained_on_step": self.trained_on_step,
            "wm_wait_s": self.wait_s,
        }


def matches_by_source(batch: StepBatch) -> dict[str, int]:
    """The step's matches by the predictor that made them."""
    by_source: dict[str, int] = {}
    for trajectory in batch.trajectories:
        for turn in trajectory.turns:
            record = turn.speculation
            if record is not None and record.matched:
                by_source[record.source] = by_source.get(record.source, 0) + 1
    return by_source


def step_totals(batch: StepBatch) -> SpeculationTotals:
    """The step's command turns summed by SpeculationTotals (the same sums as `profile`)."""
    return sum(
        (SpeculationTotals.of_turns(t.turns) for t in batch.trajectories), SpeculationTotals()
    )


def speculation_work(totals: SpeculationTotals, *, speculate: bool) -> dict:
    """Where the step's speculative work went; null when the step did not speculate."""
    figures = {
        "spec_exec_won": totals.exec_won,  # the command finished before any prediction
        "spec_overlap_s": round(totals.overlap_s, 3),  # kept replies made while commands ran
        "spec_tokens_ahead": totals.tokens_ahead,  # policy tokens generated on predictions
        "spec_tokens_committed": totals.tokens_committed,  # of them, kept
        "spec_tokens_wasted": totals.tokens_wasted,  # discarded
        "rollback": totals.rollbacks,  # command turns whose speculative work was discarded
    }
    return figures if speculate else dict.fromkeys(figures)


def world_model_data(wm: dict | None) -> dict:
    """What co-training learned from: null without co-training."""
    keys = ("wm_examples_used", "wm_dropped_too_long", "wm_skipped_turns")
    return {key: None if wm is None else wm[key] for key in keys}


def too_long_warning(step: int, wm: dict | None, max_len: int) -> str | None:
    """The warning a step gives when co-training dropped examples (the driver shows the
    first one of a run): they are counted, but the fix is a setting."""
    dropped = 0 if wm is None else wm["wm_dropped_too_long"]
    if not dropped:
        return None
    return (
        f"warning: step {step}: the world model's co-training skipped {dropped} example(s) "
        f"longer than cotrain.max_len ({max_len} tokens); raise [rl.cotrain] max_len to train "
        "on them (and [rl.engine] max_model_len, the world-model engine's context, to "
        "predict them); wm_dropped_too_long counts them every step"
    )


def match_rates(totals: SpeculationTotals, speculate: bool) -> dict:
    """The step's three match rates, unrounded (None without speculation or attempts)."""

    def rate(part: int, whole: int) -> float | None:
        return part / whole if speculate and whole else None

    return {
        "spec_match_rate_wm": rate(totals.wm_matched, totals.wm_asked),
        "spec_near_miss_rate": rate(totals.wm_near_miss, totals.wm_asked),
        "spec_match_rate_attempted": rate(totals.matched, totals.attempted),
        "spec_match_rate_used": rate(totals.matched, totals.used),
        "spec_wm_asked": totals.wm_asked,
    }


def step_row(
    step: int,
    batch: StepBatch,
    policy: dict,
    wm: dict | None,
    times: StepTimes,
    *,
    speculate: bool,
    weight_version: int,
    cotrain: CotrainTiming = CotrainTiming(),  # frozen: one shared default is safe
) -> dict:
    rewards = batch.rewards
    totals = step_totals(batch)
    turns = sum(len(t.turns) for t in batch.trajectories)
    rates = match_rates(totals, speculate)
    return {
        "step": step,
        "reward_mean": statistics.fmean(rewards) if rewards else None,
        "reward_std": statistics.pstdev(rewards) if rewards else None,
        "success_rate": sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else None,
        "spec_match_rate": rates["spec_match_rate_attempted"],
        # the three match rates side by side (spec_match_rate = spec_match_rate_attempted)
        "spec_match_rate_wm": rates["spec_match_rate_wm"],
        "spec_near_miss_rate": rates["spec_near_miss_rate"],  # never a match: shown apart
        "spec_match_rate_attempted": rates["spec_match_rate_attempted"],
        "spec_match_rate_used": rates["spec_match_rate_used"],
        "tokens_wasted": totals.tokens_wasted,
        "wm_loss": None if wm is None else wm["wm_loss"],
        "policy_loss": policy["policy_loss"],
        "clip_fraction": policy["clip_fraction"],
        "logprob_mismatch": policy["logprob_mismatch"],
        "rollout_seconds": times.rollout_s,
        "train_seconds": times.train_s,
        "sync_seconds": times.sync_s,
        **speculation_work(totals, speculate=speculate),
        **world_model_data(wm),
        **cotrain.figures(),
        # beyond the required keys
        "step_seconds": times.step_s,
        "speculated": speculate,
        "spec_attempted": totals.attempted,
        "spec_matched": totals.matched,
        "spec_wm_asked": rates["spec_wm_asked"],  # match_rate_wm's denominator
        # which predictor made the matches: cache (a context seen before), rules, lm (the WM)
        "spec_matched_by_source": matches_by_source(batch),
        # the gate's decisions about the world model, by reason (asked, late, slowdown...)
        "spec_gate": dict(sorted(totals.gate_reasons.items())) if speculate else None,
        "lossless_violations": totals.lossless_violations,
        "episodes": len(batch.trajectories),
        "failed_episodes": batch.failed_episodes,
        "masked_groups": batch.masked_groups,
        "flat_groups": batch.flat_groups,
        "turns_mean": turns / len(batch.trajectories) if batch.trajectories else None,
        "done_rate": (
            sum(t.declared_done for t in batch.trajectories) / len(batch.trajectories)
            if batch.trajectories
            else None
        ),
        "trained_episodes": policy["trained_episodes"],
        "trained_tokens": policy["trained_tokens"],
        "grad_norm": policy["grad_norm"],
        "kl": policy["kl"],
        "wm_examples": None if wm is None else wm["wm_examples"],
        # the co-trainer's cost: tokens through the model (shared prefixes counted once)
        "wm_forward_tokens": None if wm is None else wm["wm_forward_tokens"],
        "wm_seconds": None if wm is None else wm["wm_seconds"],
        "weight_version": weight_version,
    }


class TensorBoard:
    """Every numeric figure of each row as a scalar (purged past `start` on a resume)."""

    def __init__(self, log_dir, start_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(log_dir), purge_step=start_step + 1)

    def add(self, row: dict) -> None:
        for key, value in row.items():
            if key != "step" and isinstance(value, int | float) and value is not None:
                self.writer.add_scalar(f"rl/{key}", value, row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
