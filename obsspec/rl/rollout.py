"""A rollout worker: one RolloutSession (policy engine, world-model engine, sandboxes), kept
across steps.

    worker = RolloutWorker(config, models_dir, tasks, index)
    await worker.start(restore)                    # engines up, task images built
    trajectories = await worker.rollout(episodes, speculate=True)
    await worker.load_policy(weights_dir, version)  # after every policy update
    await worker.load_world_model(weights_dir)      # after every world-model update
    await worker.load_policy_buckets(refs, version) # the same from Ray's object store
    await worker.close()                            # engines stopped, containers removed

Episodes are played by the same session collect and profile use (its retries, the
speculative loop and its predictor cascade), so an RL rollout and a collected episode are the
same thing. Weights are swapped in place (vLLM reloads them; no restart) and every generation
records the weight version that produced it; the runner only keeps a speculative reply made
by the current one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from obsspec.environments.tasks.model import Task
from obsspec.errors import ConfigError
from obsspec.rl.config import RLConfig
from obsspec.rollout.session import RolloutSession
from obsspec.trajectory import Trajectory


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode of a step: its task, its GRPO group, and its sampling seed."""

    task_id: str
    group: int
    seed: int


@dataclass(frozen=True)
class Restore:
    """Weights to start the engines with (a resumed run), and their policy version."""

    policy: Path | None = None
    world_model: Path | None = None
    version: int = 0


@dataclass
class WorkerProgress:
    done: int = 0  # episodes of the current rollout finished (or given up)
    failed_attempts: int = 0


class RolloutWorker:
    def __init__(self, config: RLConfig, models_dir: Path, tasks: list[Task], index: int) -> None:
        if config.engine.server:
            raise ConfigError(
                "engine.server: rl syncs weights into engines it runs itself; "
                "an external OpenAI-compatible server cannot be used"
            )
        self.config = config
        self.progress = WorkerProgress()
        p = config.placement
        local = p.ray_address is None  # a local cluster: the workers share this machine
        self.session = RolloutSession(
            config.session_settings(),
            models_dir,
            tasks,
            name=f"rl-w{index}",
            seed=config.seed,
            share=(index, p.rollout_workers) if local else (0, 1),
        )

    async def start(self, restore: Restore = Restore()) -> dict[str, str]:
        """Start engines and build task images; returns {task id: why it cannot run}. No
        task left is NoRunnableTask, raised before the engines take a minute to load."""
        await self.session.__aenter__()
        if restore.policy is not None:
            await self.load_policy(restore.policy, restore.version)
        if restore.world_model is not None:
            await self.load_world_model(restore.world_model)
        return dict(self.session.skipped)

    def placement(self) -> dict:
        """Where this worker's engines and sandboxes run (obsspec.rollout.cores)."""
        return self.session.opened_placement().as_dict()

    async def rollout(self, episodes: list[EpisodeSpec], *, speculate: bool) -> list:
        """Each episode's (trajectory, attempts that took), in order; None where the
        infrastructure failed it on every attempt (its group is then masked from training)."""
        session = self.session
        self.progress = WorkerProgress()
        session.expect(e.task_id for e in episodes if session.can_play(e.task_id))

        async def one(spec: EpisodeSpec) -> tuple[Trajectory, int] | None:
            if not session.can_play(spec.task_id):
                self.progress.done += 1
                return None  # its image did not build (start() said so); nothing expected
            try:
                return await session.play(
                    session.tasks[spec.task_id],
                    spec.seed,
                    speculate=speculate,
                    on_failure=self._failed,
                )
            finally:
                await session.finished(spec.task_id)
                self.progress.done += 1

        return list(await asyncio.gather(*(one(e) for e in episodes)))

    def _failed(self, _trajectory: Trajectory, _attempt: int, _final: bool) -> None:
        self.progress.failed_attempts += 1

    async def load_policy(self, weights: Path, version: int) -> None:
        await self.session.load_policy(weights, version)

    async def load_world_model(self, weights: Path) -> None:
        await self.session.load_world_model(weights)

    async def load_policy_buckets(self, refs: list, version: int) -> None:
        """The policy's weights from Ray's object store (obsspec.rl.weight_sync), fetched a
        bucket at a time while they load, so a worker never holds more than one."""
        await self.session.load_policy_buckets(fetched(refs), version)

    async def load_world_model_buckets(self, refs: list) -> None:
        await self.session.load_world_model_buckets(fetched(refs))

    async def score_policy(self, token_ids: list[int]) -> list[float | None]:
        return await self.session.score_policy(token_ids)

    async def policy_checksums(self) -> dict | None:
        return await self.session.policy_checksums()

    async def close(self) -> None:
        await self.session.aclose()


def fetched(refs: list):
    """Each object of `refs` in turn. Blocking is fine: the engine pauses generation while
    weights load, so nothing else of this worker is waiting to run."""
    import ray

    for ref in refs:
        yield ray.get(ref)
