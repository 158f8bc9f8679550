"""A rollout worker: one policy engine, one world-model engine and sandboxes, kept across steps.

    worker = RolloutWorker(config, models_dir, tasks, index)
    await worker.start(restore)                    # engines up, task images built
    trajectories = await worker.rollout(episodes, speculate=True)
    await worker.load_policy(weights_dir, version)  # after every policy update
    await worker.load_world_model(weights_dir)      # after every world-model update
    await worker.close()                            # engines stopped, containers removed

Episodes are played by collect's own code (`play_with_retries`, the speculative loop and its
predictor cascade), so an RL rollout and a collected episode are the same thing. Weights are
swapped in place (vLLM reloads them; no restart) and every generation records the weight
version that produced it; the runner only keeps a speculative reply made by the current one.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path

from environments.gc import gc_containers, run_scope
from environments.tasks.model import Task
from obsspec.errors import ConfigError, EngineError
from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
from obsspec.rl.config import RLConfig
from obsspec.rollout.plan import WorkItem
from obsspec.rollout.policy import Policy, open_policy, policy_model
from obsspec.rollout.speculation import open_speculation
from obsspec.rollout.worker import Runner, TaskPools, build_images, play_with_retries
from obsspec.speculation.runner import SpeculativeLoop
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
        self.collect = config.collect_config()
        self.models_dir = models_dir
        self.tasks = {task.id: task for task in tasks}
        self.index = index
        self.progress = WorkerProgress()
        self._stack = contextlib.AsyncExitStack()
        self._images: dict[str, str] = {}
        self.policy: Policy | None = None
        self.policy_engine: LocalVLLMEngine | None = None
        self.wm_engine: LocalVLLMEngine | None = None
        self.loop: SpeculativeLoop | None = None

    async def start(self, restore: Restore = Restore()) -> dict[str, str]:
        """Start engines and build task images; returns {task id: why it cannot run}."""
        client, run_id = self._stack.enter_context(run_scope(f"rl-w{self.index}"))
        self._client, self._run_id = client, run_id
        await asyncio.to_thread(gc_containers, client)
        skipped: dict[str, str] = {}
        items = [WorkItem(task_id, 0, 0) for task_id in self.tasks]
        self._images = await build_images(
            client,
            self.tasks,
            items,
            False,
            lambda e: skip(skipped, e),
            self.config.images.map,
            self.config.network,
        )
        check_runnable(skipped, len(self.tasks))  # before the engines take a minute to load
        policy_dir = policy_model(self.collect, self.models_dir)
        engine = self.collect.engine
        self.policy_engine = await self._engine(policy_dir, engine.kv_cache_gb, engine.cpu_cores)
        self.policy = await self._stack.enter_async_context(
            open_policy(self.collect, self.models_dir, engine=self.policy_engine)
        )
        self.wm_engine = await self._engine(
            self.wm_dir(), self.config.wm_kv_cache_gb, self.config.wm_cpu_cores
        )
        self.loop = await self._stack.enter_async_context(
            open_speculation(self.collect, self.models_dir, self.policy, wm_engine=self.wm_engine)
        )
        if restore.policy is not None:
            await self.load_policy(restore.policy, restore.version)
        if restore.world_model is not None:
            await self.load_world_model(restore.world_model)
        return skipped

    def wm_dir(self) -> Path:
        from obsspec.models.registry import resolve_model

        return resolve_model(self.collect.speculation.world_model, self.models_dir)

    async def _engine(
        self, model: Path, kv_cache_gb: float, cpu_cores: str | None
    ) -> LocalVLLMEngine:
        options = self.collect.engine
        settings = EngineSettings(
            model=model,
            max_model_len=options.max_model_len,
            kv_cache_gb=kv_cache_gb,
            max_num_seqs=max(64, 2 * self.config.concurrency * self.config.speculation.breadth),
            seed=self.config.seed,
            cpu_cores=cpu_cores,
        )
        return await self._stack.enter_async_context(LocalVLLMEngine(settings))

    async def rollout(self, episodes: list[EpisodeSpec], *, speculate: bool) -> list:
        """Each episode's (trajectory, attempts that took), in order; None where the
        infrastructure failed it on every attempt (its group is then masked from training)."""
        assert self.policy is not None, "start() first"
        runnable = [e for e in episodes if e.task_id in self._images]
        items = [WorkItem(e.task_id, i, e.seed) for i, e in enumerate(runnable)]
        runner = Runner(self.policy, self.loop if speculate else None)
        gate = asyncio.Semaphore(self.config.concurrency)
        self.progress = WorkerProgress()
        async with TaskPools(
            self._client,
            self._run_id,
            self.tasks,
            self._images,
            items,
            self.config.sandbox_cpuset,
            self.config.network,
        ) as pools:

            async def one(item: WorkItem) -> tuple[Trajectory, int] | None:
                async with gate:
                    played = await play_with_retries(
                        self.tasks[item.task_id], item, runner, pools, self.collect, self._failed
                    )
                await pools.finished(item.task_id)
                self.progress.done += 1
                return played

            results = await asyncio.gather(*(one(item) for item in items))
        by_spec = dict(zip(runnable, results, strict=True))
        return [by_spec.get(e) for e in episodes]

    def _failed(self, _trajectory: Trajectory, _attempt: int, _final: bool) -> None:
        self.progress.failed_attempts += 1

    async def load_policy(self, weights: Path, version: int) -> None:
        assert self.policy_engine is not None
        await self.policy_engine.load_weights(weights)
        self.policy_engine.weight_version = version

    async def load_world_model(self, weights: Path) -> None:
        assert self.wm_engine is not None
        await self.wm_engine.load_weights(weights)

    async def close(self) -> None:
        await self._stack.aclose()


def skip(skipped: dict[str, str], event) -> None:
    """build_images reports a task whose image failed as an event; keep its reason."""
    reason = getattr(event, "reason", None)
    if reason is not None:
        skipped[event.task_id] = reason


def check_runnable(skipped: dict[str, str], tasks: int) -> None:
    if len(skipped) == tasks:
        first = next(iter(skipped.items()), ("", ""))
        raise EngineError(
            f"no task can run: every task image failed to build (e.g. {first[0]}: {first[1]})",
            hint="check the tasks with `obsspec env validate`",
        )
