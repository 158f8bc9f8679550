"""The world model's co-training, synchronous or one step behind the rollout
(`[rl.cotrain] overlap`).

    behind = cotrain_overlap(config)            # True, False, or None without co-training
    updates = WorldModelUpdates(behind)         # the driver's, one per run
    waited = await updates.wait(call)           # the update in flight, if any: its stats kept
    updates.launch_if_ready(trainer, rows, step)
    world_model=updates.unsynced ... updates.synced()   # its weights went into the engines
    stats, trained_on = updates.report()        # for the step's row, once

Synchronous (off), step N: the policy update and the world-model update on step N's rows run
side by side, both trainers' weights are synced, and row N reports that update.

Behind (on), step N: the update launched at step N-1 ran during this step's rollout; it is
awaited after the rollout (the seconds the driver still waited: `wm_wait_s`), then the
policy update runs, both are synced, and the update on step N's rows is launched only after
the sync. Ray runs an actor's calls in the order they were submitted, so an update submitted
before the sync's `weight_refs`/`save_weights` call would run first: the engines would get
weights other than the update just awaited, and the sync would wait for a whole update.
When no finished update waits to be synced (step 1, or the step after a checkpoint) the new
one starts beside the policy update, as in synchronous mode. Row N reports the update that
finished during step N, trained on step N-1's rows (`wm_trained_on_step`). The world-model
engine speculates one update behind, which changes which predictions match, never what is
kept: the policy's episodes, and so every update of both models, are those of the
synchronous mode.

A checkpoint awaits the update in flight before it saves, syncs its weights and keeps its
stats in driver.json (`state()`), so the next row, resumed or not, reports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from obsspec.rl.config import PlacementSettings, RLConfig

ABANDON_TIMEOUT_S = 30  # an interrupted run's update: its actor is killed, so it ends at once


def resolve_overlap(setting: str, placement: PlacementSettings) -> bool:
    """Whether co-training runs behind the rollout. `auto` is on wherever the co-trainer's
    compute does not take an engine's: on CPUs (the trainers have always shared the cores with
    the engines, and the engines mostly wait on sandboxes), when the co-trainer runs on CPUs
    beside GPU engines, and when it has whole GPUs of its own. Off only when it asks for a
    fraction of a GPU while the rollout workers do too: Ray may then put it on a rollout
    worker's GPU, and training there during the rollout would slow the engines that the
    rollout waits on (its memory is held in either mode)."""
    if setting != "auto":
        return setting == "on"
    return not (0 < placement.wm_trainer_gpus < 1 and 0 < placement.rollout_gpus < 1)


def cotrain_overlap(config: RLConfig) -> bool | None:
    """The run's mode: None without co-training."""
    if not config.cotrain.enabled:
        return None
    return resolve_overlap(config.cotrain.overlap, config.placement)


@dataclass(frozen=True)
class Launched:
    ref: object  # the Ray reference of the co-trainer's `update`
    step: int  # whose rows it learns


@dataclass(frozen=True)
class Finished:
    stats: dict  # CoTrainer.update's figures
    step: int  # whose rows it learned


Call = Callable[[object, str], Awaitable]  # awaits a Ray reference; a failure: RLRunError


class WorldModelUpdates:
    """The update in flight, the last one finished (until a row reports it), and whether its
    weights still have to reach the engines."""

    def __init__(self, behind: bool | None) -> None:
        self.behind = behind  # None: no co-training
        self.pending: Launched | None = None
        self.finished: Finished | None = None
        self.unsynced = False
        self.last_launched = 0

    def launch_if_ready(self, trainer, rows: list[dict], step: int) -> None:
        """Start the update on step's rows, unless started already, one is in flight, or a
        finished one's weights are still to be synced (see the module docstring)."""
        if self.behind is None or self.pending or self.unsynced or self.last_launched == step:
            return
        self.pending = Launched(trainer.update.remote(rows), step)
        self.last_launched = step

    async def wait(self, call: Call) -> float | None:
        """Await the update in flight (nothing: None); its stats are kept for the next row
        and its weights marked to sync. The seconds waited."""
        if self.pending is None:
            return None
        launched = self.pending
        started = time.monotonic()
        stats = await call(
            launched.ref, f"the world-model trainer (its update on step {launched.step}'s rows)"
        )
        self.pending = None  # only once awaited: one cancelled midway is abandon()'s
        self.finished = Finished(stats, launched.step)
        self.unsynced = True
        return time.monotonic() - started

    def synced(self) -> None:
        self.unsynced = False

    def report(self) -> tuple[dict | None, int | None]:
        """(stats, the step whose rows they learned) of the update finished since the last
        row, or (None, None); each is reported once."""
        finished, self.finished = self.finished, None
        return (None, None) if finished is None else (finished.stats, finished.step)

    def state(self) -> dict | None:
        """For the checkpoint (after `wait`): the finished update a row has yet to report."""
        if self.finished is None:
            return None
        return {"stats": self.finished.stats, "trained_on_step": self.finished.step}

    def restore(self, state: dict | None) -> None:
        """A resumed run reports what the checkpoint kept (its weights are in the checkpoint
        the engines load)."""
        if state is not None:
            self.finished = Finished(state["stats"], int(state["trained_on_step"]))

    async def abandon(self) -> None:
        """An interrupted run's update in flight (its actor killed by now): retrieved, so that
        Ray does not report its error as unhandled, and dropped."""
        if self.pending is None:
            return
        ref, self.pending = self.pending.ref, None
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ref, ABANDON_TIMEOUT_S)
