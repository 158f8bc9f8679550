"""`obsspec profile`: the same episodes run sequentially, speculatively and with an oracle.

    report = await profile(config, models_dir, emit)

It reads top to bottom:

    check the models (and the world model's tokenizer), load the tasks, refuse an existing
    --out unless overwrite
    open the rollout session: the task images (a task that fails is skipped; all failing is
    an error), the policy engine and the speculative arm's predictors (state cache,
    rules, repeats, world model), the sandbox pools
    for each concurrency level N (`--concurrency 1,8`), the same episodes (task, seed) in
    waves of N (obsspec.profile.arms), so machine noise hits every arm alike, their prompts
    prefilled first (so no arm is the only one to pay for them), the sequential and
    speculative arms swapping places from one wave to the next, counted across levels
    (obsspec.profile.levels.ARM_ORDERS), the oracle last:
        sequential   the wave's N episodes at once, the plain loop
        speculative  the same at once, the configured cascade, depth, breadth and gate
        oracle       the same at once, a perfect predictor replaying each sequential
                     episode's real outputs after `oracle_delay_s`, gate always: the ceiling
    (an arm's episode that fails on the infrastructure is retried; if it never succeeds, the
    episode is left out of every arm of that level)
    figures per level over the episodes all three arms completed (`by_concurrency`; the
    top-level figures are the first level's), with how many waves ran in each order
    (`arm_orders`, and `arm_order_note` when they all ran in one) and the world model
    engine's prefix-cache hits over the level (`wm_prefix_cache`); with --out, each level's
    arm datasets (OUT/arms/<arm> for the first level, OUT/arms/c<N>/<arm> for the others;
    readable like a collect run), OUT/report.json, OUT/plots/*.png and OUT/report.html
    (self-contained: it embeds the plots)
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from obsspec.errors import ConfigError, ObsspecError
from obsspec.inference.base import Engine
from obsspec.profile.arms import ARMS, ArmDone, Emit, EpisodeLost, ProfileEvent, Wave
from obsspec.profile.config import ProfileConfig
from obsspec.profile.figures import ArmEpisodes, profile_figures
from obsspec.profile.levels import (
    arm_order_note,
    arm_orders,
    arms_dir,
    order_name,
    peak_at_once,
    waves,
)
from obsspec.profile.prefix_cache import prefix_cache_figures, wm_prefix_counts
from obsspec.rollout.dataset import ShardWriter
from obsspec.rollout.events import TaskSkipped
from obsspec.rollout.plan import WorkItem, load_task_set, plan_items
from obsspec.rollout.policy import policy_model
from obsspec.rollout.session import NoRunnableTask, RolloutSession
from obsspec.rollout.speculation import check_world_model
from obsspec.rundirs import Inputs, check_replaceable, is_empty, mark
from obsspec.runs import DATA_DIR

REPORT = "report.json"
HTML = "report.html"
__all__ = ["ArmDone", "EpisodeLost", "ProfileEvent", "profile"]


@dataclass
class LevelPlayed:
    """One concurrency level: the episodes all three arms completed, the lost ones, per
    arm the most episodes that ran at once (what the level really achieved), and how many
    waves ran in each arm order ("seq,spec,oracle" -> 1)."""

    level: int
    arms_dir: str
    episodes: list[ArmEpisodes]
    lost: list[dict]
    at_once: dict[str, int]
    orders: Counter[str] = field(default_factory=Counter)
    wm_prefix_cache: dict | None = None  # obsspec.profile.prefix_cache; None: no world model
    gate: dict | None = None  # the speculative arm's gate: decisions and what it measured
    caches_kept: str | None = None  # why the arms shared the engines' prefix caches (None: not)

    def figures(self) -> dict:
        return {
            "concurrency": self.level,
            **profile_figures(self.episodes),
            "episodes_at_once": self.at_once,
            "lost_episodes": self.lost,
            "arms_dir": self.arms_dir,
            "arm_orders": dict(self.orders),
            "arm_order_note": arm_order_note(self.orders, self.level),  # None when balanced
            "wm_prefix_cache": self.wm_prefix_cache,
            "gate": self.gate,
            # Each arm starts with the engines' prefix caches reset (obsspec.profile.arms.Wave.
            # start_cold); where an engine refused, later arms reuse earlier arms' contexts.
            "prefix_caches": "reset before each arm"
            if self.caches_kept is None
            else f"shared between arms: {self.caches_kept}",
        }


def report_keys() -> set[str]:
    """The top-level keys of every report (CI gates are checked against them before a run):
    a level's figures, computed over no episode, and the report's own."""
    level = LevelPlayed(1, "", [], [], {}).figures()
    return {*level, "tasks", "by_concurrency", "config", "placement", "files"}


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
    policy = policy_model(settings, models_dir)
    check_world_model(settings, models_dir)
    tasks, broken = load_task_set(config.tasks, strict=False)
    for path, reason in broken.items():
        emit(TaskSkipped(path, reason))
    if not tasks:
        raise ConfigError(f"--tasks {config.tasks}: no task loads ({len(broken)} broken)")
    wm = settings.speculation.world_model  # a name or a directory
    prepare_out(config, {"--tasks": config.tasks, "--policy": policy, "--world-model": wm})
    items = plan_items(tasks, config.episodes_per_task, config.seed, set())
    levels = config.concurrency
    session = RolloutSession(
        settings,
        models_dir,
        tasks,
        name="profile",
        planned=Counter(item.task_id for item in items for _ in levels),
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

    def level_done(played: list[LevelPlayed]) -> None:
        """After each level, its figures on disk: a run that dies at a later level (Ctrl-C,
        a crash) keeps the levels it finished (`complete` false until the last)."""
        if config.out is not None and len(played) < len(levels):
            partial = {**assemble(config, session, played), "complete": False}
            (config.out / REPORT).write_text(json.dumps(partial, indent=2))

    try:
        playable = [item for item in items if session.can_play(item.task_id)]
        played = await play_levels(config, session, playable, levels, emit, level_done)
    finally:
        await session.aclose()
    report = assemble(config, session, played)
    if config.out is not None:
        write_report(config.out, played[0].episodes, report)
    return report


def assemble(config: ProfileConfig, session: RolloutSession, played: list[LevelPlayed]) -> dict:
    """The report of the levels played: the first level's figures at the top."""
    by_level = {str(level.level): level.figures() for level in played}
    return {
        **by_level[str(played[0].level)],
        "tasks": len(session.images),
        "by_concurrency": by_level,
        # The config as run: the cores obsspec chose for the roles no setting placed.
        "config": {**config.model_dump(mode="json"), **placed_cores(session.settings)},
        "placement": session.opened_placement().as_dict(),
    }


async def play_levels(
    config: ProfileConfig,
    session: RolloutSession,
    items: list[WorkItem],
    levels: list[int],
    emit: Emit,
    level_done: Callable[[list[LevelPlayed]], None] = lambda _played: None,
) -> list[LevelPlayed]:
    """Every level in turn (level_done hears of the levels played after each). The arm
    orders run on from one level to the next (each starts with the order the last one did
    not end with), so a level of one wave is not always played in the same order."""
    orders = arm_orders()
    played: list[LevelPlayed] = []
    for i, level in enumerate(levels):
        played.append(
            await play_level(config, session, items, level, first=i == 0, orders=orders, emit=emit)
        )
        level_done(played)
    return played


async def play_level(
    config: ProfileConfig,
    session: RolloutSession,
    items: list[WorkItem],
    level: int,
    *,
    first: bool,
    orders: Iterator[tuple[str, ...]],
    emit: Emit,
) -> LevelPlayed:
    """Every item at this level, in waves of `level`, each wave's arms in the next of
    `orders`; with --out, the arms' datasets."""
    session.reset_speculation()  # no level starts with another's cache or gate estimates
    where = arms_dir(level, first=first)
    played = LevelPlayed(level, where, [], [], {})
    wm_start = wm_prefix_counts(session)  # the engine serves every level: counts from here
    spans: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    writers = arm_writers(config.out / where if config.out is not None else None)
    try:
        for wave in waves(items, level):
            result = await Wave(config, session, wave, level, next(orders)).run(emit)
            played.orders[order_name(result.order)] += 1
            played.episodes += result.episodes
            played.lost += result.lost
            played.caches_kept = played.caches_kept or result.caches_kept
            for arm in ARMS:
                spans[arm] += result.spans[arm]
            for episode in result.episodes:
                for arm, writer in writers.items():
                    writer.add(getattr(episode, arm))
            for item in wave:
                await session.finished(item.task_id)
    finally:
        for writer in writers.values():
            writer.close()
    played.at_once = {arm: peak_at_once(spans[arm]) for arm in ARMS}
    played.wm_prefix_cache = prefix_cache_figures(wm_start, wm_prefix_counts(session))
    played.gate = session.loop.gate.summary() if session.loop is not None else None
    return played


def placed_cores(settings) -> dict:
    """The cores settings of a placed session, as a profile config writes them."""
    return {
        "sandbox_cpuset": settings.sandbox_cpuset,
        "engine": settings.engine.model_dump(mode="json"),
        "speculation": settings.speculation.model_dump(mode="json"),
    }


def write_report(out: Path, episodes: list[ArmEpisodes], report: dict) -> None:
    """OUT/report.json, OUT/plots/*.png and OUT/report.html (which embeds the plots)."""
    from obsspec.profile.concurrency_plot import plot_by_concurrency
    from obsspec.profile.html_report import write_html
    from obsspec.profile.plots import write_plots

    plots = write_plots(out, episodes, report)
    if len(report["by_concurrency"]) > 1:
        levels = plot_by_concurrency(report["by_concurrency"], out / "plots" / "by_concurrency.png")
        if levels is not None:  # None: no level has a latency figure to draw
            plots["by_concurrency"] = levels
    report["files"] = {
        "report_json": str(out / REPORT),
        "report_html": str(out / HTML),
        "plots": {name: str(path) for name, path in plots.items()},
    }
    (out / REPORT).write_text(json.dumps(report, indent=2))
    write_html(out, report, plots)


def prepare_out(config: ProfileConfig, inputs: Inputs | None = None) -> None:
    """A new --out, or (with overwrite) an earlier profile's, emptied. Anything else is
    refused: overwrite never deletes a directory that is not a profile, nor one that is,
    holds or lies inside an input (`inputs`: flag -> paths; obsspec.rundirs)."""
    out = config.out
    if out is None:
        return
    if out.exists() and not (out.is_dir() and is_empty(out)):
        if not config.overwrite:
            raise ConfigError(
                f"--out {out} exists; choose another directory, or --overwrite to replace it"
            )
        check_replaceable(out, "profile", inputs)  # before anything is deleted
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    mark(out, "profile")


def arm_writers(arms: Path | None) -> dict[str, ShardWriter]:
    """A shard writer per arm under `arms` (a level's OUT/arms or OUT/arms/c<N>)."""
    if arms is None:
        return {}
    for arm in ARMS:
        (arms / arm / DATA_DIR).mkdir(parents=True, exist_ok=True)
    return {
        arm: ShardWriter(arms / arm / DATA_DIR, f"shard-{arm}", shard_episodes=64) for arm in ARMS
    }
