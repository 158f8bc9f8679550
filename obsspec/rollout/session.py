"""RolloutSession: everything that plays episodes, opened once, for collect, rl and profile.

    async with RolloutSession(settings, models_dir, tasks, name="collect-w0") as session:
        played = await session.play(task, seed)          # (trajectory, attempts) or None
        await session.finished(task.id)                  # the task's sandbox pool may close
        await session.load_policy(weights, version)      # rl, after every policy update

Opening it reads top to bottom:

    place the engines it will start and the sandboxes on this machine's cores, unless the
    settings do (obsspec.rollout.cores), and say where (a Note)
    connect to Docker under a fresh run id (its containers are removed however it ends), and
    remove the containers that dead runs on this host left behind (e.g. a killed collect)
    build the images of the planned tasks; a task whose image fails is reported through
    `emit` (TaskSkipped) and kept in `skipped`; none left (or none planned) is
    NoRunnableTask, raised before any engine starts
    the policy: its tokenizer, and its engine (OpenAI-compatible server or vLLM here), or
    the oracle, which replays each task's reference solution
    with speculation on: the predictor cascade (state cache, rules, and the world model on its
    own engine when one is named) and the speculative loop every episode shares
    the per-task sandbox pools

Engines can be handed in (`engine=`, `wm_engine=`): the session then uses them and leaves
them open (tests share one vLLM engine; a user may bring any Engine). The session is the one
owner of the weight versions: engines stamp generations with the version it gives them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from obsspec.agent.episode import EpisodeLimits, context_builder, run_episode
from obsspec.environments.gc import gc_containers, run_scope
from obsspec.environments.tasks.model import Task
from obsspec.environments.verifier_kit.attach import kit_plans, with_kit
from obsspec.environments.verifier_kit.plan import KitPlan
from obsspec.errors import ConfigError, ObsspecError
from obsspec.inference.base import Engine
from obsspec.models.registry import resolve_model
from obsspec.models.tokenizer import load_tokenizer
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.cores import CorePlan, engines_here, place
from obsspec.rollout.engines import (
    open_engine,
    open_world_model_engine,
    require_priority_scheduling,
)
from obsspec.rollout.events import Event, Note
from obsspec.rollout.policy import Policy, policy_model
from obsspec.rollout.sandboxes import NoRunnableTask, TaskPools, build_images, require_images
from obsspec.rollout.speculation import speculative_loop
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.trajectory import Trajectory

__all__ = ["NoRunnableTask", "RolloutSession"]

Emit = Callable[[Event], None]
OnFailure = Callable[[Trajectory, int, bool], None]


class RolloutSession:
    def __init__(
        self,
        settings: RolloutSettings,
        models_dir: Path,
        tasks: Iterable[Task],
        *,
        name: str,
        planned: Mapping[str, int] | None = None,
        emit: Emit = lambda _event: None,
        strict: bool = False,
        seed: int = 0,
        engine: Engine | None = None,
        wm_engine: Engine | None = None,
        on_build_log: Callable[[str], None] = lambda _line: None,
        share: tuple[int, int] = (0, 1),
    ) -> None:
        """settings: what to play with. tasks: those it may play. name: the Docker run id's
        prefix. planned: task id -> episodes to come (images are built, and sandbox pools
        sized, for these; default: every task, episodes announced later with `expect`).
        strict: a failed image build is raised, not skipped. seed: the engines' seed.
        engine, wm_engine: the policy's and the world model's engines, when the caller owns
        them; otherwise the session starts them from settings and stops them on exit.
        share: (index, count) of the sessions sharing this machine's cores (collect's local
        Ray workers): each places its engines and sandboxes in its own slice."""
        self.settings = settings
        self.models_dir = models_dir
        self.tasks = {task.id: task for task in tasks}
        self.name = name
        self.planned = Counter(planned) if planned is not None else None
        self.emit = emit
        self.strict = strict
        self.seed = seed
        self.on_build_log = on_build_log
        self.share = share
        self.placement: CorePlan | None = None  # where the roles run, once open
        self._engine = engine
        self._wm_engine = wm_engine
        self.images: dict[str, str] = {}
        self.kits: dict[str, KitPlan] = {}  # task id -> what the verifier kit serves it
        self.skipped: dict[str, str] = {}  # task id -> why it cannot run
        self.policy: Policy | None = None
        self.loop: SpeculativeLoop | None = None  # None: speculation off
        self.weight_version = 0  # of the policy's weights
        self.wm_version = 0  # of the world model's weights
        self._pools: TaskPools | None = None
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> RolloutSession:
        try:
            await self._open()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._stack.aclose()

    async def _open(self) -> None:
        self.settings, self.placement = place(
            self.settings,
            engines_platform(self.settings, self._engine, self._wm_engine),
            share=self.share,
            given=(self._engine is not None, self._wm_engine is not None),
        )
        self.emit(Note(self.placement.describe()))
        settings = self.settings
        client, run_id = self._stack.enter_context(run_scope(self.name))
        # A run killed with SIGKILL leaves its containers; resuming it is the moment to go.
        leftovers = await asyncio.to_thread(gc_containers, client)
        if leftovers.removed:
            self.emit(Note(f"removed {len(leftovers.removed)} containers of dead runs"))
        planned = (
            self.planned if self.planned is not None else Counter(dict.fromkeys(self.tasks, 0))
        )
        self.images = await build_images(
            client,
            self.tasks,
            planned,
            self.strict,
            self._note_skipped,
            settings.images.map,
            settings.network,
            self.on_build_log,
            ceiling=settings.sandbox,
        )
        require_images(self.images, planned, self.skipped)  # before the engines
        self.kits = await kit_plans(
            self.tasks.values(),
            settings.verifier_kit,
            settings.network,
            self.models_dir.parent,  # the cache directory: the kit lives beside the models
            lambda message: self.emit(Note(message)),
        )
        self.policy = await self._open_policy()
        self.loop = await self._open_speculation(self.policy)
        expected = Counter(self.planned or {})
        self._pools = await self._stack.enter_async_context(
            TaskPools(
                client,
                run_id,
                self.tasks,
                self.images,
                expected,
                settings.sandbox_cpuset,
                settings.network,
                ceiling=settings.sandbox,
            )
        )

    def _note_skipped(self, event: Event) -> None:
        reason = getattr(event, "reason", None)
        if reason is not None:
            self.skipped[event.task_id] = reason
        self.emit(event)

    async def _open_policy(self) -> Policy:
        """The tokenizer, and the engine (unless given, or the policy is the oracle)."""
        settings = self.settings
        model_dir = policy_model(settings, self.models_dir)
        fmt = settings.limits.action_format
        builder = context_builder(load_tokenizer(model_dir), settings.limits)
        engine = self._engine
        if engine is None and not settings.is_oracle:
            engine = await self._stack.enter_async_context(
                open_engine(settings, model_dir, seed=self.seed)
            )
            await require_priority_scheduling(engine, settings)
        self._engine = engine
        return Policy(settings.policy, builder, engine, fmt)

    async def _open_speculation(self, policy: Policy) -> SpeculativeLoop | None:
        """The world model's engine (unless given) and the loop; None with speculation off."""
        spec = self.settings.speculation
        if not spec.enabled:
            return None
        if spec.world_model and self._wm_engine is None:
            wm_dir = resolve_model(spec.world_model, self.models_dir)
            self._wm_engine = await self._stack.enter_async_context(
                open_world_model_engine(self.settings, wm_dir, seed=self.seed)
            )
        return self._speculative_loop(policy)

    def _speculative_loop(self, policy: Policy) -> SpeculativeLoop:
        """A loop with a new cascade (state cache, rules, world model on its engine) and gate."""
        spec = self.settings.speculation
        return speculative_loop(
            policy.builder,
            self._wm_engine if spec.world_model else None,
            spec,
            threshold=spec.threshold,
            answer_tokens=self.settings.wm_answer_tokens,
        )

    def reset_speculation(self) -> None:
        """Replace the speculative loop with a new one on the same engines: its cache and
        gate know nothing of the episodes played so far (profile starts each concurrency
        level so, or a level would be answered from the cache of another's episodes)."""
        if self.loop is None:
            raise ConfigError("this session does not speculate: nothing to reset")
        self.loop = self._speculative_loop(self._opened_policy())

    def can_play(self, task_id: str) -> bool:
        """The task is known and its image built."""
        return task_id in self.images

    def expect(self, task_ids: Iterable[str]) -> None:
        """Episodes of these tasks are coming (one per id): their sandboxes stay warm."""
        self._opened_pools().expect(task_ids)

    async def finished(self, task_id: str) -> None:
        """One expected episode of the task is over; after its last, its pool closes."""
        await self._opened_pools().finished(task_id)

    async def forget_prefixes(self) -> str | None:
        """Reset the prefix caches of the engines this session plays on, so that what runs
        next computes its prompts anew; None when every engine did, else why one could not (a
        server started without VLLM_SERVER_DEV_MODE, say). A profile's arms each start so."""
        for engine in (self._engine, self._wm_engine):
            if engine is None:
                continue
            try:
                await engine.reset_prefix_cache()
            except ObsspecError as e:
                return str(e)
        return None

    async def settle(self) -> None:
        """Wait for the sandboxes being started in the background to be ready (the warm
        refills that the episodes just played set off), so the next work begins on a quiet
        machine: a profile's arms each start so."""
        await self._opened_pools().settle()

    async def play(
        self,
        task: Task,
        seed: int,
        *,
        speculate: bool = True,
        loop: SpeculativeLoop | None = None,
        on_failure: OnFailure = lambda _trajectory, _attempt, _final: None,
    ) -> tuple[Trajectory, int] | None:
        """One episode, run again while the infrastructure fails (up to max_attempts): the
        trajectory and the attempt that gave it, or None. A broken task (error_kind "task",
        e.g. a VerifierError) is not retried: its one attempt is final, and None.
        on_failure(trajectory, attempt, final) hears of every failed attempt. speculate=False
        plays sequentially; `loop` replaces the session's speculative loop (profile's oracle
        arm). At most `concurrency` episodes play at once."""
        chosen = loop if loop is not None else (self.loop if speculate else None)
        attempts = self.settings.max_attempts
        async with self._slots:
            for attempt in range(1, attempts + 1):
                trajectory = await self.episode(task, seed, loop=chosen)
                if trajectory.error_kind == "task":
                    on_failure(trajectory, attempt, True)  # the same task fails the same way
                    return None
                if trajectory.error_kind != "infra":
                    return trajectory, attempt
                on_failure(trajectory, attempt, attempt == attempts)
        return None

    async def episode(
        self, task: Task, seed: int, *, loop: SpeculativeLoop | None = None
    ) -> Trajectory:
        """One attempt, whatever its outcome (a failed one says why in its error fields)."""
        policy = self._opened_policy()
        return await run_episode(
            with_kit(task, self.kits.get(task.id)),
            await self._opened_pools().pool(task),
            policy.engine_for(task),
            policy.builder,
            self.limits_for(task),
            seed=seed,
            model=policy.name,
            loop=loop,
        )

    def limits_for(self, task: Task) -> EpisodeLimits:
        """The configured limits (the oracle gets a turn per solution command, plus one)."""
        return self._opened_policy().limits_for(task, self.settings.limits)

    async def load_policy(self, weights: Path, version: int) -> None:
        """The policy's engine reloads its weights in place; replies from now on carry
        `version`, and a speculative reply begun under another version is not kept."""
        await self._policy_engine().load_weights(weights, version)
        self.weight_version = version

    async def load_policy_buckets(self, buckets: Iterable, version: int) -> None:
        """As load_policy, from weights in memory: buckets of (name, tensor) pairs, loaded as
        one in-place reload (obsspec.rl.weight_sync makes them)."""
        await self._policy_engine().load_weight_buckets(buckets, version)
        self.weight_version = version

    async def score_policy(self, token_ids: list[int]) -> list[float | None]:
        """The policy engine's log-probability of each token after its prefix (None first)."""
        return await self._policy_engine().score(token_ids)

    async def policy_checksums(self) -> dict | None:
        """The policy engine's weight checksums (obsspec.inference.weight_checksums), or None
        for an engine that cannot give them (a server, a tensor-parallel engine)."""
        checksums = getattr(self._policy_engine(), "weight_checksums", None)
        return None if checksums is None else await checksums()

    async def load_world_model_buckets(self, buckets: Iterable) -> None:
        """As load_world_model, from weights in memory."""
        if self._wm_engine is None:
            raise ConfigError("this session has no world model (speculation.world_model)")
        await self._wm_engine.load_weight_buckets(buckets, self.wm_version + 1)
        self.wm_version += 1

    def _policy_engine(self):
        engine = self._opened_policy().engine
        if engine is None:
            raise ConfigError("the oracle policy has no weights to load")
        return engine

    async def load_world_model(self, weights: Path) -> None:
        """The world model's engine reloads its weights in place (the next version)."""
        if self._wm_engine is None:
            raise ConfigError("this session has no world model (speculation.world_model)")
        await self._wm_engine.load_weights(weights, self.wm_version + 1)
        self.wm_version += 1

    @property
    def world_model_engine(self) -> Engine | None:
        """The engine the world model runs on; None when the session has none (an engine
        handed in while speculation has no world model is not the world model's)."""
        spec = self.settings.speculation
        return self._wm_engine if spec.enabled and spec.world_model else None

    def opened_placement(self) -> CorePlan:
        if self.placement is None:
            raise RuntimeError("RolloutSession is not open (use `async with`)")
        return self.placement

    def _opened_policy(self) -> Policy:
        if self.policy is None:
            raise RuntimeError("RolloutSession is not open (use `async with`)")
        return self.policy

    def _opened_pools(self) -> TaskPools:
        if self._pools is None:
            raise RuntimeError("RolloutSession is not open (use `async with`)")
        return self._pools


def engines_platform(
    settings: RolloutSettings, engine: Engine | None, wm_engine: Engine | None
) -> str:
    """The platform of the engines the session will start ('cpu' when it starts none: then
    there is nothing to place, and vLLM need not be imported to say so)."""
    policy, world_model = engines_here(settings)
    if not (policy and engine is None) and not (world_model and wm_engine is None):
        return "cpu"
    from obsspec.inference.vllm_settings import current_platform_kind

    return current_platform_kind()
