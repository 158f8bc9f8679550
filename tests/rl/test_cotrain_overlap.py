"""Co-training one step behind the rollout: which mode a run resolves to, the bookkeeping of the
update in flight, and the row keys (no Ray: a fake co-trainer whose updates are futures)."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from obsspec.rl.config import PlacementSettings, RLConfig
from obsspec.rl.cotrain_overlap import WorldModelUpdates, cotrain_overlap, resolve_overlap
from obsspec.rl.metrics import CotrainTiming, step_row
from obsspec.rl.run_files import METRIC_KEYS
from tests.rl.test_metrics import POLICY, TIMES, WM, batch

NEW_KEYS = ("cotrain_overlap", "wm_trained_on_step", "wm_wait_s")


def placed(**gpus: float) -> PlacementSettings:
    return PlacementSettings(**gpus)


@pytest.mark.parametrize(
    ("gpus", "behind"),
    [
        ({}, True),  # CPUs: every role shares the cores, as the trainers always have
        ({"rollout_gpus": 1, "trainer_gpus": 1, "wm_trainer_gpus": 1}, True),  # its own GPU
        ({"rollout_gpus": 1, "trainer_gpus": 1}, True),  # the co-trainer on CPUs
        ({"rollout_gpus": 1, "wm_trainer_gpus": 0.5}, True),  # whole GPUs: not an engine's
        ({"rollout_gpus": 0.5, "wm_trainer_gpus": 0.5}, False),  # may land on an engine's GPU
        ({"wm_trainer_gpus": 0.25}, True),  # the engines on CPUs
    ],
)
def test_auto_runs_behind_unless_the_co_trainer_may_share_an_engines_gpu(gpus, behind):
    assert resolve_overlap("auto", placed(**gpus)) is behind


def test_on_and_off_are_what_they_say_wherever_the_roles_go():
    shared = placed(rollout_gpus=0.5, wm_trainer_gpus=0.5)
    assert resolve_overlap("on", shared) is True
    assert resolve_overlap("off", placed()) is False


def test_the_setting_defaults_to_auto_is_checked_and_is_no_part_of_the_identity(tmp_path):
    config = RLConfig(tasks="t", out=tmp_path)
    assert config.cotrain.overlap == "auto" and cotrain_overlap(config) is True
    off = RLConfig(tasks="t", out=tmp_path, cotrain={"overlap": "off"})
    assert cotrain_overlap(off) is False
    assert off.identity() == config.identity()  # a resumed run may change it
    assert cotrain_overlap(RLConfig(tasks="t", out=tmp_path, cotrain={"enabled": False})) is None
    with pytest.raises(ValidationError, match="overlap"):
        RLConfig(tasks="t", out=tmp_path, cotrain={"overlap": "sometimes"})


class FakeCoTrainer:
    """`update.remote(rows)` returns a future the test resolves: an update in flight."""

    def __init__(self) -> None:
        self.launched: list[tuple[list, asyncio.Future]] = []
        self.update = self

    def remote(self, rows: list) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.launched.append((rows, future))
        return future

    def finish(self, index: int, loss: float) -> None:
        self.launched[index][1].set_result({**WM, "wm_loss": loss})


async def call(awaitable, role: str):
    return await awaitable


async def test_behind_an_update_is_reported_and_synced_in_the_step_after_it_launched():
    trainer, updates = FakeCoTrainer(), WorldModelUpdates(behind=True)
    # step 1: nothing finished to sync, so the update starts beside the policy update
    assert await updates.wait(call) is None
    updates.launch_if_ready(trainer, ["rows 1"], 1)
    assert not updates.unsynced
    updates.synced()
    updates.launch_if_ready(trainer, ["rows 1"], 1)  # after the sync: started already
    assert [rows for rows, _ in trainer.launched] == [["rows 1"]]
    assert updates.report() == (None, None)  # step 1's row: none finished
    # step 2: its rollout over, the update on step 1's rows is awaited
    trainer.finish(0, 0.5)
    assert await updates.wait(call) >= 0
    assert updates.unsynced
    updates.launch_if_ready(trainer, ["rows 2"], 2)  # refused: step 1's weights not synced
    assert len(trainer.launched) == 1
    updates.synced()
    updates.launch_if_ready(trainer, ["rows 2"], 2)
    assert [rows for rows, _ in trainer.launched] == [["rows 1"], ["rows 2"]]
    stats, trained_on = updates.report()
    assert (stats["wm_loss"], trained_on) == (0.5, 1)
    assert updates.report() == (None, None)  # reported once


async def test_synchronous_updates_report_their_own_step():
    trainer, updates = FakeCoTrainer(), WorldModelUpdates(behind=False)
    updates.launch_if_ready(trainer, ["rows 3"], 3)
    trainer.finish(0, 0.25)
    assert await updates.wait(call) >= 0
    updates.synced()
    updates.launch_if_ready(trainer, ["rows 3"], 3)
    assert len(trainer.launched) == 1
    stats, trained_on = updates.report()
    assert (stats["wm_loss"], trained_on) == (0.25, 3)


async def test_a_checkpoint_keeps_the_awaited_update_for_the_next_row_resumed_or_not():
    trainer, updates = FakeCoTrainer(), WorldModelUpdates(behind=True)
    updates.launch_if_ready(trainer, ["rows 4"], 4)
    updates.report()
    trainer.finish(0, float("nan"))  # an update with nothing to learn
    await updates.wait(call)  # the checkpoint's
    updates.synced()
    state = json.loads(json.dumps(updates.state()))  # through driver.json
    resumed = WorldModelUpdates(behind=True)
    resumed.restore(state)
    (want, step), (got, got_step) = updates.report(), resumed.report()
    assert step == got_step == 4 and json.dumps(want) == json.dumps(got)
    resumed.launch_if_ready(trainer, ["rows 5"], 5)  # its weights are in the checkpoint
    assert len(trainer.launched) == 2
    assert WorldModelUpdates(behind=True).state() is None  # nothing kept: null


async def test_a_failed_update_raises_where_it_is_awaited_and_an_abandoned_one_is_retrieved():
    trainer, updates = FakeCoTrainer(), WorldModelUpdates(behind=True)
    updates.launch_if_ready(trainer, ["rows 1"], 1)
    trainer.launched[0][1].set_exception(RuntimeError("out of memory"))
    roles = []

    async def naming(awaitable, role: str):
        roles.append(role)
        return await awaitable

    with pytest.raises(RuntimeError, match="out of memory"):
        await updates.wait(naming)
    assert roles == ["the world-model trainer (its update on step 1's rows)"]
    await updates.abandon()  # the run's finally: nothing raised, nothing left
    assert updates.pending is None
    updates = WorldModelUpdates(behind=True)
    updates.launch_if_ready(FakeCoTrainer(), ["rows 2"], 2)
    updates.pending.ref.set_exception(RuntimeError("actor died"))
    await updates.abandon()
    assert updates.pending is None


def test_without_co_training_nothing_launches():
    updates = WorldModelUpdates(behind=None)
    updates.launch_if_ready(None, ["rows"], 1)  # no co-trainer at all
    assert updates.pending is None and updates.report() == (None, None)


def test_every_row_says_which_mode_ran_and_whose_rows_the_update_learned():
    behind = step_row(3, batch(), POLICY, WM, TIMES, speculate=True, weight_version=2,
                      cotrain=CotrainTiming(True, 2, 0.75))  # fmt: skip
    assert set(NEW_KEYS) <= set(METRIC_KEYS) <= behind.keys()
    assert (behind["cotrain_overlap"], behind["wm_trained_on_step"]) == (True, 2)
    assert behind["wm_wait_s"] == 0.75 and behind["wm_loss"] == WM["wm_loss"]
    first = step_row(1, batch(), POLICY, None, TIMES, speculate=True, weight_version=2,
                     cotrain=CotrainTiming(True, None, None))  # fmt: skip
    assert first["cotrain_overlap"] is True and first["wm_trained_on_step"] is None
    assert first["wm_loss"] is None
    without = step_row(1, batch(), POLICY, None, TIMES, speculate=True, weight_version=2)
    assert all(without[key] is None for key in NEW_KEYS)
