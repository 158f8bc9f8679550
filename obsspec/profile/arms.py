"""One wave of a profile: its episodes (task, seed) in the three arms, all at once per arm.

    wave = Wave(config, session, items, level=8, order=("spec", "seq", "oracle"))
    played = await wave.run(emit)       # WavePlayed(episodes=[ArmEpisodes...], lost, spans)

It reads top to bottom:

    prefill every episode's prompt on the policy engine (so no arm is the only one to pay for
    it: whichever arm ran first would otherwise pay for the prompts alone)
    then each arm in the wave's order (obsspec.profile.levels.ARM_ORDERS: seq and spec swap
    places from one wave to the next; the oracle is last), each once the sandboxes the last
    one set off starting (warm replacements of those it used) are up
    sequential   every episode of the wave at once, the plain loop
    speculative  the same episodes at once, the configured cascade, depth, breadth and gate
    oracle       the same at once, a perfect predictor replaying each sequential episode's
                 real outputs after `oracle_delay_s`, gate always: the ceiling
    an episode whose arm fails on the infrastructure every attempt is left out of all arms
    (the arms after it do not play it)

Episodes play through the session (`RolloutSession.play`), which is also what runs collect's
concurrent episodes: at most `concurrency` (the largest level) at once, on one policy engine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from obsspec.agent.episode import episode_prompt
from obsspec.environments.tasks.model import Task
from obsspec.inference.base import Sampling
from obsspec.profile.config import ProfileConfig
from obsspec.profile.figures import ArmEpisodes
from obsspec.profile.levels import ARM_ORDERS
from obsspec.rollout.dataset import trajectory_row
from obsspec.rollout.events import Note, TaskSkipped
from obsspec.rollout.plan import WorkItem
from obsspec.rollout.session import RolloutSession
from obsspec.rollout.worker import first_failure
from obsspec.speculation.gate import GateMode
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.trajectory import Trajectory
from obsspec.world_model.oracle import OraclePredictor

ARMS = ("seq", "spec", "oracle")
T = TypeVar("T")


@dataclass(frozen=True)
class ArmDone:
    arm: str
    task_id: str
    episode_index: int
    agent_s: float
    turns: int
    matched: int  # speculative turns kept (0 for the sequential arm)
    attempted: int
    concurrency: int = 1  # the level it was played at


@dataclass(frozen=True)
class EpisodeLost:
    task_id: str
    episode_index: int
    arm: str
    error: str
    concurrency: int = 1


ProfileEvent = ArmDone | EpisodeLost | Note | TaskSkipped
Emit = Callable[[ProfileEvent], None]


@dataclass
class WavePlayed:
    episodes: list[ArmEpisodes] = field(default_factory=list)  # all three arms completed
    lost: list[dict] = field(default_factory=list)
    spans: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: {arm: [] for arm in ARMS}
    )  # per arm, each episode's (start, end) in monotonic seconds, attempts included
    order: tuple[str, ...] = ARMS  # the order the arms ran in
    caches_kept: str | None = None  # why the engines' prefix caches could not be reset


async def all_at_once(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Their results in order; if one raises, the others are cancelled and its error (an
    obsspec error when there is one) is raised as is, so the CLI prints one line."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coroutines]
    except BaseExceptionGroup as failures:
        raise first_failure(failures) from None
    return [task.result() for task in tasks]


class Wave:
    """Up to `level` episodes (task, seed), played arm after arm in `order`, all at once
    within an arm."""

    def __init__(
        self,
        config: ProfileConfig,
        session: RolloutSession,
        items: list[WorkItem],
        level: int,
        order: tuple[str, ...] = ARM_ORDERS[0],
    ):
        if order not in ARM_ORDERS:  # the oracle needs the seq arm's outputs: seq first
            raise ValueError(f"a wave's arm order is one of {ARM_ORDERS}, not {order}")
        self.config, self.session, self.items, self.level = config, session, items, level
        self.played = WavePlayed(order=order)
        self._lost: set[WorkItem] = set()

    async def run(self, emit: Emit) -> WavePlayed:
        rows: dict[str, dict[WorkItem, dict]] = {}
        alive = list(self.items)
        for arm in self.played.order:
            # The last arm's sandboxes are removed and their replacements start in the
            # background: an arm begun meanwhile would pay for them alone (16 at once on 2
            # cores: its first commands took 1.6 s against 0.1 s).
            await self.session.settle()
            await self.start_cold(alive)
            rows[arm] = await self.play_arm(arm, alive, rows, emit)
            alive = [item for item in alive if item in rows[arm]]
        for item in alive:
            self.played.episodes.append(ArmEpisodes(**{arm: rows[arm][item] for arm in ARMS}))
        return self.played

    async def play_arm(
        self, arm: str, items: list[WorkItem], rows: dict[str, dict[WorkItem, dict]], emit: Emit
    ) -> dict[WorkItem, dict]:
        """One arm of the wave; `rows`: the rows of the arms played before it (the oracle
        replays seq's)."""
        if arm == "seq":
            return await self.arm(arm, items, emit, speculate=False)
        if arm == "oracle":
            loops = {item: self.oracle(rows["seq"][item]) for item in items}
            return await self.arm(arm, items, emit, loops=loops)
        return await self.arm(arm, items, emit)

    async def arm(
        self,
        arm: str,
        items: list[WorkItem],
        emit: Emit,
        *,
        speculate: bool = True,
        loops: dict[WorkItem, SpeculativeLoop] | None = None,
    ) -> dict[WorkItem, dict]:
        """The arm's episodes of these items, at once: item -> row (a lost one is absent)."""
        rows = await all_at_once(
            self.episode(item, arm, emit, speculate=speculate, loop=(loops or {}).get(item))
            for item in items
        )
        return {item: row for item, row in zip(items, rows, strict=True) if row is not None}

    def oracle(self, seq_row: dict) -> SpeculativeLoop:
        """A perfect predictor replaying the sequential episode's outputs, gate always."""
        spec_loop = self.session.loop
        assert spec_loop is not None  # profile's session always speculates
        settings = spec_loop.settings.model_copy(
            update={"gate": spec_loop.settings.gate.model_copy(update={"mode": GateMode.always})}
        )
        predictor = OraclePredictor.from_rows([seq_row], delay_s=self.config.oracle_delay_s)
        return SpeculativeLoop(predictor, settings=settings)

    def task(self, item: WorkItem) -> Task:
        return self.session.tasks[item.task_id]

    async def start_cold(self, items: list[WorkItem]) -> None:
        """Every arm starts from the same engine caches: the episodes' prompts and nothing
        else. The arms play the same episodes, and at temperature 0 the same turns: an arm
        played after another found every turn's context already computed, and ran faster for
        it alone (make demo's profile: the first arm of a wave spent up to 1.6x the seconds
        generating, whichever arm it was, and the oracle, always after seq, never paid)."""
        why = await self.session.forget_prefixes()
        if why is not None:
            self.played.caches_kept = why
        await all_at_once(self.warm_prompt(item) for item in items)

    async def warm_prompt(self, item: WorkItem) -> None:
        """Prefill the episode's prompt before the arm runs, so that the first turn's prompt
        costs every arm alike (an episode's own work begins at its first reply)."""
        policy = self.session.policy
        assert policy is not None
        task = self.task(item)
        engine = policy.engine_for(task)
        limits = self.session.limits_for(task)
        prompt = episode_prompt(policy.builder, task, limits.action_format)
        await engine.generate(prompt, Sampling(max_tokens=1, temperature=0.0), priority=0)

    async def episode(
        self, item: WorkItem, arm: str, emit: Emit, *, speculate: bool = True, loop=None
    ) -> dict | None:
        def failed(trajectory: Trajectory, _attempt: int, final: bool) -> None:
            if final and item not in self._lost:
                error = f"{trajectory.error_type}: {trajectory.error}"
                self._lost.add(item)
                lost = {"task_id": item.task_id, "episode_index": item.episode_index}
                self.played.lost.append(lost | {"arm": arm, "error": error})
                emit(EpisodeLost(item.task_id, item.episode_index, arm, error, self.level))

        start = time.monotonic()
        played = await self.session.play(
            self.task(item), item.seed, speculate=speculate, loop=loop, on_failure=failed
        )
        self.played.spans[arm].append((start, time.monotonic()))
        if played is None:
            return None
        trajectory, attempt = played
        records = [t.speculation for t in trajectory.turns if t.speculation]
        emit(
            ArmDone(
                arm,
                item.task_id,
                item.episode_index,
                trajectory.agent_s,
                len(trajectory.turns),
                sum(bool(r.tokens_committed) for r in records),
                sum(r.attempted for r in records),
                self.level,
            )
        )
        return trajectory_row(
            trajectory,
            run_id=f"profile-{arm}",
            episode_index=item.episode_index,
            policy=self.config.policy,
            attempts=attempt,
        )
