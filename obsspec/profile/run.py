"""`obsspec profile`: the same episodes run sequentially, speculatively and with an oracle.

    report = await profile(config, models_dir, emit)

It reads top to bottom:

    check the models (and the world model's tokenizer), load the tasks, refuse an existing
    --out unless overwrite
    open the rollout session: the task images (a task that fails is skipped; all failing is
    an error), the policy engine and the speculative arm's predictors (cache, rules, world
    model), the sandbox pools
    for each episode (task, seed), interleaved so machine noise hits every arm alike, its
    prompt prefilled first (so no arm is the only one to pay for it):
        sequential   the plain loop
        speculative  the configured cascade, depth, breadth and gate
        oracle       a perfect predictor replaying the sequential episode's real outputs
                     after `oracle_delay_s`, gate always: the ceiling
    (an arm's episode that fails on the infrastructure is retried; if it never succeeds, the
    episode is left out of every arm)
    figures over the episodes all three arms completed; with --out, each arm's dataset
    (OUT/arms/<arm>, readable like a collect run), OUT/report.json, OUT/plots/*.png and
    OUT/report.html (self-contained: it embeds the plots)
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from environments.tasks.model import Task
from obsspec.agent.episode import episode_prompt
from obsspec.errors import ConfigError, ObsspecError
from obsspec.inference.base import Engine, Sampling
from obsspec.profile.config import ProfileConfig
from obsspec.profile.figures import ArmEpisodes, profile_figures
from obsspec.rollout.dataset import ShardWriter, trajectory_row
from obsspec.rollout.events import Note, TaskSkipped
from obsspec.rollout.plan import WorkItem, load_task_set, plan_items
from obsspec.rollout.policy import policy_model
from obsspec.rollout.session import NoRunnableTask, RolloutSession
from obsspec.rollout.speculation import check_world_model
from obsspec.runs import DATA_DIR
from obsspec.speculation.gate import GateMode
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.trajectory import Trajectory
from world_model.oracle import OraclePredictor

ARMS = ("seq", "spec", "oracle")
REPORT = "report.json"
HTML = "report.html"


@dataclass(frozen=True)
class ArmDone:
    arm: str
    task_id: str
    episode_index: int
    agent_s: float
    turns: int
    matched: int  # speculative turns kept (0 for the sequential arm)
    attempted: int


@dataclass(frozen=True)
class EpisodeLost:
    task_id: str
    episode_index: int
    arm: str
    error: str


ProfileEvent = ArmDone | EpisodeLost | Note | TaskSkipped
Emit = Callable[[ProfileEvent], None]


async def profile(
    config: ProfileConfig,
    models_dir: Path,
    emit: Emit = lambda _event: None,
    *,
    engine: Engine | None = None,
    wm_engine: Engine | None = None,
) -> dict:
    """The report; engine and wm_engine: engines the caller owns (tests share one), handed
    to the session."""
    settings = config.session_settings()
    policy_model(settings, models_dir)
    check_world_model(settings, models_dir)
    tasks, broken = load_task_set(config.tasks, strict=False)
    for path, reason in broken.items():
        emit(TaskSkipped(path, reason))
    if not tasks:
        raise ConfigError(f"--tasks {config.tasks}: no task loads ({len(broken)} broken)")
    prepare_out(config)
    items = plan_items(tasks, config.episodes_per_task, config.seed, set())
    episodes: list[ArmEpisodes] = []
    lost: list[dict] = []
    session = RolloutSession(
        settings,
        models_dir,
        tasks,
        name="profile",
        planned=Counter(item.task_id for item in items),
        emit=emit,
        engine=engine,
        wm_engine=wm_engine,
    )
    try:
        await session.__aenter__()
    except NoRunnableTask as e:
        raise ObsspecError(
            f"--tasks {config.tasks}: no task image could be built; nothing to profile",
            hint="see the skipped tasks above (`obsspec env validate` checks tasks)",
        ) from e
    try:
        writers = arm_writers(config.out)
        try:
            for item in items:
                if not session.can_play(item.task_id):
                    continue
                arms = Arms(config, session, session.tasks[item.task_id], item)
                triple = await arms.run(emit)
                if triple is None:
                    lost.append(arms.lost)
                else:
                    episodes.append(triple)
                    for arm, writer in writers.items():
                        writer.add(getattr(triple, arm))
                await session.finished(item.task_id)
        finally:
            for writer in writers.values():
                writer.close()
    finally:
        await session.aclose()
    report = {**profile_figures(episodes), "lost_episodes": lost, "tasks": len(session.images)}
    report["config"] = config.model_dump(mode="json")
    if config.out is not None:
        write_report(config.out, episodes, report)
    return report


def write_report(out: Path, episodes: list[ArmEpisodes], report: dict) -> None:
    """OUT/report.json, OUT/plots/*.png and OUT/report.html (which embeds the plots)."""
    from obsspec.profile.html_report import write_html
    from obsspec.profile.plots import write_plots

    plots = write_plots(out, episodes, report)
    report["files"] = {
        "report_json": str(out / REPORT),
        "report_html": str(out / HTML),
        "plots": {name: str(path) for name, path in plots.items()},
    }
    (out / REPORT).write_text(json.dumps(report, indent=2))
    write_html(out, report, plots)


class Arms:
    """One episode (task, seed) in the three arms, in order."""

    def __init__(self, config: ProfileConfig, session: RolloutSession, task: Task, item):
        self.config, self.session = config, session
        self.task, self.item = task, item
        self.lost: dict = {}

    async def run(self, emit: Emit) -> ArmEpisodes | None:
        await self.warm_prompt()
        seq = await self.episode("seq", emit, speculate=False)
        if seq is None:
            return None
        spec = await self.episode("spec", emit)
        spec_loop = self.session.loop
        assert spec_loop is not None  # profile's session always speculates
        oracle_settings = spec_loop.settings.model_copy(
            update={"gate": spec_loop.settings.gate.model_copy(update={"mode": GateMode.always})}
        )
        predictor = OraclePredictor.from_rows([seq], delay_s=self.config.oracle_delay_s)
        oracle_loop = SpeculativeLoop(predictor, settings=oracle_settings)
        oracle = await self.episode("oracle", emit, loop=oracle_loop)
        if spec is None or oracle is None:
            return None
        return ArmEpisodes(seq, spec, oracle)

    async def warm_prompt(self) -> None:
        """Prefill the episode's prompt before any arm runs. The engine caches prefixes, so
        otherwise the first arm alone would pay for the prompt (the sequential arm, always
        first: the saving would be overstated)."""
        policy = self.session.policy
        assert policy is not None
        engine = policy.engine_for(self.task)
        limits = self.session.limits_for(self.task)
        prompt = episode_prompt(policy.builder, self.task, limits.action_format)
        await engine.generate(prompt, Sampling(max_tokens=1, temperature=0.0), priority=0)

    async def episode(
        self, arm: str, emit: Emit, *, speculate: bool = True, loop=None
    ) -> dict | None:
        item: WorkItem = self.item

        def failed(trajectory: Trajectory, _attempt: int, final: bool) -> None:
            if final:
                error = f"{trajectory.error_type}: {trajectory.error}"
                self.lost = {"task_id": item.task_id, "episode_index": item.episode_index}
                self.lost |= {"arm": arm, "error": error}
                emit(EpisodeLost(item.task_id, item.episode_index, arm, error))

        played = await self.session.play(
            self.task, item.seed, speculate=speculate, loop=loop, on_failure=failed
        )
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
            )
        )
        return trajectory_row(
            trajectory,
            run_id=f"profile-{arm}",
            episode_index=item.episode_index,
            policy=self.config.policy,
            attempts=attempt,
        )


def prepare_out(config: ProfileConfig) -> None:
    """A new --out, or (with overwrite) an earlier profile's, emptied. Anything else is
    refused: overwrite never deletes a directory that is not a profile."""
    out = config.out
    if out is None:
        return
    if out.exists() and any(out.iterdir()):
        if not config.overwrite:
            raise ConfigError(
                f"--out {out} exists; choose another directory, or --overwrite to replace it"
            )
        if not (out / REPORT).exists() and not (out / "arms").is_dir():
            raise ConfigError(
                f"--out {out} holds files that are not a profile's; not deleting them"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def arm_writers(out: Path | None) -> dict[str, ShardWriter]:
    if out is None:
        return {}
    for arm in ARMS:
        (out / "arms" / arm / DATA_DIR).mkdir(parents=True, exist_ok=True)
    return {
        arm: ShardWriter(out / "arms" / arm / DATA_DIR, f"shard-{arm}", shard_episodes=64)
        for arm in ARMS
    }
