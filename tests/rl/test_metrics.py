"""A step's metrics row, its warning about dropped co-training examples, the live table and
the curves (no engines, no Ray)."""

from __future__ import annotations

from obsspec.cli.rl_view import step_line, steps_table
from obsspec.rl.curves import write_curves
from obsspec.rl.metrics import StepTimes, step_row, too_long_warning
from obsspec.rl.run_files import METRIC_KEYS
from obsspec.rl.steps import StepBatch
from obsspec.speculation.totals import SpeculationTotals
from obsspec.trajectory import SpeculationRecord, Trajectory, Turn

POLICY = {"policy_loss": 0.1, "clip_fraction": 0.05, "logprob_mismatch": 0.001, "kl": 0.0,
          "grad_norm": 1.0, "trained_episodes": 2, "trained_tokens": 10}  # fmt: skip
WM = {"wm_loss": 0.5, "wm_examples": 9, "wm_examples_used": 7, "wm_dropped_too_long": 2,
      "wm_skipped_turns": 1, "wm_forward_tokens": 900, "wm_seconds": 4.5}  # fmt: skip
TIMES = StepTimes(rollout_s=3.0, train_s=1.0, sync_s=0.5, step_s=4.5)
NEW_KEYS = ("spec_exec_won", "spec_overlap_s", "spec_tokens_ahead", "spec_tokens_committed",
            "spec_tokens_wasted", "rollback", "wm_examples_used",
            "wm_dropped_too_long", "wm_skipped_turns")  # fmt: skip


def turn(index: int, record: SpeculationRecord | None, action: str = "command") -> Turn:
    return Turn(index, "reply", action, "ls" if action == "command" else "", "out", [1], [-0.1],
                [2], speculation=record)  # fmt: skip


def batch() -> StepBatch:
    """Two episodes: a kept reply, a rollback, a command that beat its prediction, a turn
    that ran sequentially, and a `done` turn."""
    kept = SpeculationRecord(attempted=True, source="lm", predictions=1, matched=True,
                             tokens_ahead=12, tokens_committed=12, overlap_s=0.75)  # fmt: skip
    missed = SpeculationRecord(attempted=True, source="lm", predictions=1, rollback=True,
                               tokens_ahead=8, tokens_wasted=8)  # fmt: skip
    late = SpeculationRecord(attempted=True, source="lm", exec_won=True)
    first = Trajectory("t", "h", "m", 0, [1], turns=[turn(0, kept), turn(1, missed)])
    second = Trajectory("t", "h", "m", 1, [1], turns=[turn(0, late), turn(1, None),
                                                      turn(2, None, "done")])  # fmt: skip
    return StepBatch(trajectories=[first, second], rewards=[1.0, 0.0])


def row(speculate: bool = True, wm: dict | None = WM) -> dict:
    return step_row(3, batch(), POLICY, wm, TIMES, speculate=speculate, weight_version=2)


def test_the_row_says_where_speculative_work_went_by_the_shared_totals():
    got = row()
    assert set(NEW_KEYS) <= set(METRIC_KEYS) <= got.keys()
    assert (got["spec_exec_won"], got["rollback"]) == (1, 1)
    assert (got["spec_tokens_ahead"], got["spec_tokens_committed"]) == (20, 12)
    assert got["spec_tokens_wasted"] == got["tokens_wasted"] == 8
    assert got["spec_overlap_s"] == 0.75
    # the same sums `profile` makes
    totals = sum((SpeculationTotals.of_turns(t.turns) for t in batch().trajectories),
                 SpeculationTotals())  # fmt: skip
    assert got["spec_tokens_ahead"] == totals.tokens_ahead and totals.command_turns == 4
    assert got["spec_attempted"] == 3 and got["spec_matched"] == 1


def test_without_speculation_or_co_training_their_figures_are_null():
    sequential = row(speculate=False, wm=None)
    assert all(sequential[key] is None for key in NEW_KEYS)
    trained = row()
    assert (trained["wm_examples_used"], trained["wm_dropped_too_long"]) == (7, 2)
    assert trained["wm_skipped_turns"] == 1
    assert (trained["wm_forward_tokens"], trained["wm_seconds"]) == (900, 4.5)
    assert sequential["wm_forward_tokens"] is None and sequential["wm_seconds"] is None


def test_a_step_that_drops_co_training_examples_names_the_key_to_raise():
    assert too_long_warning(3, None, 2048) is None
    assert too_long_warning(3, {**WM, "wm_dropped_too_long": 0}, 2048) is None
    warning = too_long_warning(3, WM, 2048)
    assert warning is not None and warning.startswith("warning: step 3:")
    assert "skipped 2 example(s) longer than cotrain.max_len (2048 tokens)" in warning
    assert "raise [rl.cotrain] max_len" in warning


def test_the_plain_lines_and_the_curves_show_the_new_figures(tmp_path):
    rows = [row(), {**row(speculate=False, wm=None), "step": 4}]
    line = step_line(rows[0])
    assert "exec won 1" in line and "rollback 1" in line and "overlap s 0.8" in line
    assert "wm dropped 2" in line
    assert "rollback -" in step_line(rows[1])  # null, not 0, without speculation
    assert len(steps_table(rows).rows) == 2  # the live table keeps its width
    path = write_curves(rows, tmp_path / "curves.png")
    assert path is not None and path.read_bytes().startswith(b"\x89PNG")


def test_the_driver_warns_once_per_run_however_many_steps_drop(tmp_path):
    from obsspec.rl.config import RLConfig
    from obsspec.rl.driver import Loop
    from obsspec.rl.events import Note
    from obsspec.rl.run_files import RLRunDir

    events = []
    config = RLConfig(tasks="t", out=tmp_path, engine={"max_model_len": 2048})
    loop = Loop(config, RLRunDir(tmp_path), events.append, 0, None, {"t": "hash"})
    for step, wm in ((1, {**WM, "wm_dropped_too_long": 0}), (2, WM), (3, WM), (4, None)):
        loop.step = step
        loop.warn_too_long(wm)
    assert [type(e) for e in events] == [Note]
    assert events[0].text.startswith("warning: step 2:") and "(2048 tokens)" in events[0].text
