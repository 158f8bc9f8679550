"""The world model engine's prefix-cache hit rate per concurrency level, over a fake session
whose world-model engine counts as vLLM's tracker does."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from obsspec.cli.profile_view import figures_table
from obsspec.inference.base import EngineStats
from obsspec.profile.config import ProfileConfig
from obsspec.profile.prefix_cache import PrefixCounts, prefix_cache_figures
from obsspec.profile.run import play_levels, report_keys
from obsspec.rollout.plan import WorkItem
from tests.profile.test_levels import LevelSession, levels_report


class CountingEngine:
    """Prefix-cache counters that move as prompts come: each prompt 100 tokens, the k-th
    (from 0) finding 20 * (k + 1) of them cached; `warm` tokens counted before any level."""

    def __init__(self, warm: int = 0) -> None:
        self.queried, self.hit, self.prompts = warm, warm, 0

    def prompt(self) -> None:
        self.prompts += 1
        self.queried += 100
        self.hit += 20 * self.prompts

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0, prefix_queried_tokens=self.queried, prefix_hit_tokens=self.hit)


class WorldModelSession(LevelSession):
    """A session whose speculative arm asks its world model once per episode."""

    def __init__(self, task_ids: list[str], world_model: str | None = "wm") -> None:
        super().__init__(task_ids)
        speculation = SimpleNamespace(enabled=True, world_model=world_model)
        self.settings = SimpleNamespace(speculation=speculation)
        self._wm_engine = CountingEngine(warm=1000)

    @property
    def world_model_engine(self):
        """As RolloutSession's: the engine only when the arm has a world model."""
        return self._wm_engine if self.settings.speculation.world_model else None

    async def play(self, task, seed, *, speculate=True, loop=None, on_failure):
        if speculate and loop is None:  # the speculative arm (the oracle has its own loop)
            self._wm_engine.prompt()
        return await super().play(task, seed, speculate=speculate, loop=loop, on_failure=on_failure)


async def played_levels(session: WorldModelSession, levels: list[int]) -> list[dict]:
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    played = await play_levels(ProfileConfig(tasks="t"), session, items, levels, lambda _e: 0)
    return [level.figures() for level in played]


async def test_each_level_counts_its_own_prompts_on_the_shared_engine():
    session = WorldModelSession(["a", "b"])
    one, two = await played_levels(session, [1, 2])
    # level 1: prompts 1 and 2 (20 + 40 of 200 cached); level 2: prompts 3 and 4 (60 + 80);
    # the 1000 tokens counted before the first level are in neither
    assert one["wm_prefix_cache"] == {"queried_tokens": 200, "hit_tokens": 60, "hit_rate": 0.3}
    assert two["wm_prefix_cache"] == {"queried_tokens": 200, "hit_tokens": 140, "hit_rate": 0.7}
    assert "wm_prefix_cache" in report_keys()


async def test_no_world_model_no_figure():
    session = WorldModelSession(["a"], world_model=None)  # its engine is not the world model's
    [level] = await played_levels(session, [1])
    assert level["wm_prefix_cache"] is None


def test_an_engine_that_counts_nothing_has_no_rate():
    figures = prefix_cache_figures(PrefixCounts(0, 0), PrefixCounts(0, 0))
    assert figures == {"queried_tokens": 0, "hit_tokens": 0, "hit_rate": None}
    assert prefix_cache_figures(None, None) is None


def test_the_table_shows_the_rate_only_with_a_world_model():
    def shown(report: dict) -> str:
        console = Console(record=True, width=200)
        console.print(figures_table(report))
        return console.export_text()

    report = levels_report()
    assert "prefix cache" not in shown(report)
    report["wm_prefix_cache"] = {"queried_tokens": 12345, "hit_tokens": 9876, "hit_rate": 0.8}
    assert "world model prefix cache │ 80.0% of 12,345 prompt tokens cached" in shown(report)
