"""`obsspec profile`: the same episodes run sequentially, speculatively and with an oracle.

    report = await profile(config, models_dir, emit)

It reads top to bottom:

    check the models (and the world model's tokenizer), load the tasks, refuse an existing
    --out unless overwrite
    build the task images (a task that fails is skipped; all failing is an error)
    start the policy engine and the speculative arm's predictors (cache, rules, world model)
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from environments.gc import run_scope
from environments.tasks.model import Task
from obsspec.agent.episode import episode_prompt
from obsspec.errors import ConfigError, ObsspecError
from obsspec.inference.base import Engine, Sampling
from obsspec.profile.config import ProfileConfig
from obsspec.profile.figures import ArmEpisodes, profile_figures
from obsspec.rollout.dataset import ShardWriter, trajectory_row
from obsspec.rollout.events import Note, TaskSkipped
from obsspec.rollout.plan import WorkItem, load_task_set, plan_items
from obsspec.rollout.policy import Policy, open_policy, policy_model
from obsspec.rollout.speculation import check_world_model, open_speculation
from obsspec.rollout.worker import Runner, TaskPools, build_images, play_with_retries
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
    arm_config = config.arm_config(config.out or Path("profile"))
    policy_model(arm_config, models_dir)
    check_world_model(arm_config, models_dir)
    tasks, broken = load_task_set(config.tasks, strict=False)
    for path, reason in broken.items():
        emit(TaskSkipped(path, reason))
    if not tasks:
        raise ConfigError(f"--tasks {config.tasks}: no task loads ({len(broken)} broken)")
    prepare_out(config)
    items = plan_items(tasks, config.episodes_per_task, config.seed, set())
    by_id = {task.id: task for task in tasks}
    episodes: list[ArmEpisodes] = []
    lost: list[dict] = []
    with run_scope("profile") as (client, run_id):
        images = await build_images(
            client, by_id, items, False, emit, config.images.map, config.network
        )
        items = [item for item in items if item.task_id in images]
        if not items:
            raise ObsspecError(
                f"--tasks {config.tasks}: no task image could be built; nothing to profile",
                hint="see the skipped tasks above (`obsspec env validate` checks tasks)",
            )
        async with (
            open_policy(arm_config, models_dir, engine=engine) as policy,
            open_speculation(arm_config, models_dir, policy, wm_engine=wm_engine) as spec_loop,
            TaskPools(
                client, run_id, by_id, images, items, config.sandbox_cpuset, config.network
            ) as pools,
        ):
            assert spec_loop is not None
            writers = arm_writers(config.out)
            try:
                for item in items:
                    arms = Arms(
                        config, arm_config, policy, spec_loop, pools, by_id[item.task_id], item
                    )
                    triple = await arms.run(emit)
                    if triple is None:
                        lost.append(arms.lost)
                    else:
                        episodes.append(triple)
                        for arm, writer in writers.items():
                            writer.add(getattr(triple, arm))
                    await pools.finished(item.task_id)
            finally:
                for writer in writers.values():
                    writer.close()
    report = {**profile_figures(episodes), "lost_episodes": lost, "tasks": len(images)}
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

    def __init__(self, config, arm_config, policy: Policy, spec_loop, pools, task: Task, item):
        self.config, self.arm_config = config, arm_config
        self.policy, self.spec_loop = policy, spec_loop
        self.pools, self.task, self.item = pools, task, item
        self.lost: dict = {}

    async def run(self, emit: Emit) -> ArmEpisodes | None:
        await self.warm_prompt()
        seq = await self.episode("seq", None, emit)
        if seq is None:
            return None
        spec = await self.episode("spec", self.spec_loop, emit)
        oracle_settings = self.spec_loop.settings.model_copy(
            update={
                "gate": self.spec_loop.settings.gate.model_copy(update={"mode": GateMode.always})
            }
        )
        predictor = OraclePredictor.from_rows([seq], delay_s=self.config.oracle_delay_s)
        oracle = await self.episode(
            "oracle", SpeculativeLoop(predictor, settings=oracle_settings), emit
        )
        if spec is None or oracle is None:
            return None
        return ArmEpisodes(seq, spec, oracle)

    async def warm_prompt(self) -> None:
        """Prefill the episode's prompt before any arm runs. The engine caches prefixes, so
        otherwise the first arm alone would pay for the prompt (the sequential arm, always
        first: the saving would be overstated)."""
        engine = self.policy.engine_for(self.task)
        limits = self.policy.limits_for(self.task, self.arm_config.limits)
        prompt = episode_prompt(self.policy.builder, self.task, limits.action_format)
        await engine.generate(prompt, Sampling(max_tokens=1, temperature=0.0), priority=0)

    async def episode(self, arm: str, loop, emit: Emit) -> dict | None:
        item: WorkItem = self.item

        def failed(trajectory: Trajectory, _attempt: int, final: bool) -> None:
            if final:
                error = f"{trajectory.error_type}: {trajectory.error}"
                self.lost = {"task_id": item.task_id, "episode_index": item.episode_index}
                self.lost |= {"arm": arm, "error": error}
                emit(EpisodeLost(item.task_id, item.episode_index, arm, error))

        runner = Runner(self.policy, loop)
        played = await play_with_retries(
            self.task, item, runner, self.pools, self.arm_config, failed
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
