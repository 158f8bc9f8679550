"""Concurrency levels of a profile, without Docker: the flag and config, the waves, the
per-level figures and report, their table, HTML and plot, and the per-level calibration."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from obsspec.cli.profile_view import concurrency_table, event_line, figures_table
from obsspec.errors import ConfigError
from obsspec.profile.arms import ArmDone, Wave
from obsspec.profile.calibrate import calibrate, calibrate_levels
from obsspec.profile.concurrency_plot import plot_by_concurrency
from obsspec.profile.config import ProfileConfig, load_profile_config
from obsspec.profile.html_report import render_html
from obsspec.profile.levels import arms_dir, parse_levels, peak_at_once, waves
from obsspec.profile.run import LevelPlayed
from obsspec.profile.simulate import Grid, simulate_report
from obsspec.rollout.engines import engine_settings
from obsspec.rollout.plan import WorkItem
from obsspec.trajectory import Trajectory
from tests.profile.test_report_html import PNG_MAGIC, episodes
from tests.profile.test_simulate import arm_row, record, turn, write_profile, write_rows


# --- the flag and the config ----------------------------------------------------------------
def test_levels_parse_in_order():
    assert parse_levels("1,8") == [1, 8]
    assert parse_levels(" 16 , 4,1") == [16, 4, 1]
    assert parse_levels("2") == [2]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("0", "at least 1"),
        ("-3", "at least 1"),
        ("a", "'a' is not a whole number"),
        ("1,,8", "'' is not a whole number"),
        ("1.5", "'1.5' is not a whole number"),
        ("1,8,1", "level 1 is given twice"),
    ],
)
def test_bad_levels_are_named_errors(text, named):
    with pytest.raises(ConfigError, match=f"--concurrency '{text}': .*{named}"):
        parse_levels(text)


def test_the_config_takes_one_level_or_a_list_and_sizes_the_session_for_the_largest(tmp_path):
    assert ProfileConfig(tasks="t").concurrency == [1]
    assert ProfileConfig(tasks="t", concurrency=8).concurrency == [8]
    toml = tmp_path / "prof.toml"
    toml.write_text('[profile]\ntasks = "t"\nconcurrency = [1, 48]\n')
    config = load_profile_config(toml, {})
    assert config.concurrency == [1, 48]
    session = config.session_settings()
    assert session.concurrency == 48 and session.speculation.enabled
    # the engine keeps a sequence slot for every episode of the largest level (and its branches)
    assert engine_settings(tmp_path, session, role="policy").max_num_seqs == 2 * 48 * 1
    for bad, named in (
        ("[1, 1]", "more than once"),
        ("[0]", "greater than or equal to 1"),
        ('"a"', "list"),
    ):
        toml.write_text(f'[profile]\ntasks = "t"\nconcurrency = {bad}\n')
        with pytest.raises(ConfigError, match=rf"field 'concurrency.*{named}"):
            load_profile_config(toml, {})


# --- waves ----------------------------------------------------------------------------------
def test_waves_keep_the_order_and_hold_at_most_the_level():
    items = list("abcde")
    assert waves(items, 1) == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert waves(items, 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert waves(items, 8) == [items]
    assert waves([], 4) == []
    with pytest.raises(ValueError, match="at least one"):
        waves(items, 0)


def test_peak_at_once_counts_overlapping_spans_only():
    assert peak_at_once([]) == 0
    assert peak_at_once([(0, 1), (1, 2), (2, 3)]) == 1  # back to back: one at a time
    assert peak_at_once([(0, 3), (1, 2), (1.5, 4), (3.5, 5)]) == 3
    assert peak_at_once(iter([(0, 2), (1, 3)])) == 2


def test_the_first_level_keeps_the_one_level_layout():
    assert arms_dir(1, first=True) == "arms" and arms_dir(8, first=True) == "arms"
    assert arms_dir(8, first=False) == "arms/c8"


# --- a wave over a fake session ----------------------------------------------------------------
class FakeSession:
    """What a Wave asks of a RolloutSession: episodes take 50 ms; `fail` maps (task id, arm)
    to an arm that fails on the infrastructure every attempt."""

    def __init__(self, task_ids: list[str], fail: set[tuple[str, str]] = frozenset()):
        from obsspec.agent.episode import EpisodeLimits
        from obsspec.speculation.settings import SpeculationSettings

        self.tasks = {t: SimpleNamespace(id=t, instruction=f"do {t}") for t in task_ids}
        builder = SimpleNamespace(prompt_ids=lambda *_: [1, 2, 3])
        self.policy = SimpleNamespace(engine_for=lambda _task: self, builder=builder)
        self.loop = SimpleNamespace(settings=SpeculationSettings())
        self.limits = EpisodeLimits()
        self.fail = fail
        self.prefilled: list[list[int]] = []
        self.played: list[tuple[str, str, float, float]] = []  # arm, task, start, end

    def limits_for(self, _task):
        return self.limits

    async def generate(self, prompt, _sampling, priority=0):
        self.prefilled.append(prompt)

    async def play(self, task, seed, *, speculate=True, loop=None, on_failure):
        arm = "oracle" if loop is not None else ("spec" if speculate else "seq")
        start = time.monotonic()
        await asyncio.sleep(0.05)
        self.played.append((arm, task.id, start, time.monotonic()))
        trajectory = Trajectory(task.id, "hash", "fake", seed, [1, 2, 3], agent_s=0.05)
        if (task.id, arm) in self.fail:
            trajectory.error, trajectory.error_kind, trajectory.error_type = "down", "infra", "E"
            on_failure(trajectory, 1, True)
            return None
        return trajectory, 1


async def test_a_wave_plays_each_arm_at_once_arm_after_arm():
    session = FakeSession(["a", "b", "c"])
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    events = []
    played = await Wave(ProfileConfig(tasks="t"), session, items, 3).run(events.append)

    assert len(played.episodes) == 3 and played.lost == [] and len(session.prefilled) == 3
    assert [arm for arm, *_ in session.played] == ["seq"] * 3 + ["spec"] * 3 + ["oracle"] * 3
    for arm, after in (("spec", "seq"), ("oracle", "spec")):
        first_start = min(start for a, _, start, _ in session.played if a == arm)
        assert first_start >= max(end for a, _, _, end in session.played if a == after)
    assert all(peak_at_once(spans) == 3 for spans in played.spans.values())
    assert {(e.arm, e.concurrency) for e in events} == {(a, 3) for a in ("seq", "spec", "oracle")}


async def test_an_episode_lost_in_one_arm_is_left_out_of_all():
    session = FakeSession(["a", "b", "c"], fail={("b", "seq"), ("c", "spec")})
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    played = await Wave(ProfileConfig(tasks="t"), session, items, 3).run(lambda _e: None)

    assert [e.seq["task_id"] for e in played.episodes] == ["a"]
    assert [(lost["task_id"], lost["arm"]) for lost in played.lost] == [("b", "seq"), ("c", "spec")]
    # b never reached the speculative arm; c, lost there, still had its oracle played
    assert sorted(t for arm, t, *_ in session.played if arm == "spec") == ["a", "c"]


# --- the report per level -------------------------------------------------------------------
def levels_report() -> dict:
    """A report shaped as obsspec.profile.run writes it, with levels 1 and 4."""
    eps = episodes()
    one = LevelPlayed(1, "arms", eps, [], {"seq": 1, "spec": 1, "oracle": 1}).figures()
    four = LevelPlayed(4, "arms/c4", eps[:1], [], {"seq": 2, "spec": 2, "oracle": 2}).figures()
    return {**one, "tasks": 2, "by_concurrency": {"1": one, "4": four}, "config": {}}


def test_each_level_has_its_figures_and_the_top_level_is_the_first():
    report = levels_report()
    assert report["concurrency"] == 1 and list(report["by_concurrency"]) == ["1", "4"]
    four = report["by_concurrency"]["4"]
    assert four["concurrency"] == 4 and four["episodes"] == 1 and four["arms_dir"] == "arms/c4"
    assert four["episodes_at_once"] == {"seq": 2, "spec": 2, "oracle": 2}
    for key in ("latency_reduction", "latency_reduction_ci95", "oracle_fraction_ci95", "phases"):
        assert key in four
    assert report["latency_reduction"] == report["by_concurrency"]["1"]["latency_reduction"]
    assert report["by_concurrency"]["1"]["latency_reduction_ci95"] is not None  # 2 episodes


def test_table_html_and_plot_show_every_level(tmp_path):
    report = levels_report()
    console = Console(record=True, width=200)
    console.print(figures_table(report))
    console.print(concurrency_table(report))
    text = console.export_text()
    assert "1 at once" in text and "by concurrency" in text and "2/2/2" in text
    html = render_html(report, {})
    assert "By concurrency" in html and "4 at once" in html and "arms/c4" in html
    path = plot_by_concurrency(report["by_concurrency"], tmp_path / "by_concurrency.png")
    assert path is not None and path.read_bytes().startswith(PNG_MAGIC)
    assert plot_by_concurrency({"1": {"latency_reduction": None}}, tmp_path / "none.png") is None
    line = event_line(ArmDone("seq", "task-a", 0, 1.5, 3, 0, 0, concurrency=4))
    assert line == "task-a #0 [c4] sequential: 1.5 s, 3 turns"
    assert "[c" not in event_line(ArmDone("seq", "task-a", 0, 1.5, 3, 0, 0))


# --- the calibration per level --------------------------------------------------------------
def write_two_levels(out) -> None:
    """write_profile's level 1 in OUT/arms, and a level 2 (replies slowed by sharing) in
    OUT/arms/c2, with the report's by_concurrency naming both."""
    write_profile(out)
    hit, done = record(matched=True, kept=4), turn("", 1.5, 0)
    arms = {
        "seq": [arm_row("a", 7.0, [turn("make", 1.5, 2), turn("ls", 1.5, 0.5), done])],
        "spec": [arm_row("a", 6.5, [turn("make", 1.5, 2, 0.5, hit), turn("ls", 1.5, 0.5), done])],
        "oracle": [
            arm_row("a", 5.0, [turn("make", 1.5, 2, 1e-4, hit), turn("ls", 1.5, 0.5, 1e-4, hit)])
        ],
    }
    for arm, rows in arms.items():
        write_rows(out / "arms" / "c2" / arm, rows)
    report = json.loads((out / "report.json").read_text())
    levels = {"1": {"arms_dir": "arms"}, "2": {"arms_dir": "arms/c2"}}
    levels["2"] |= {"latency_reduction_ci95": [0.01, 0.1], "oracle_latency_reduction_ci95": None}
    (out / "report.json").write_text(json.dumps(report | {"by_concurrency": levels}))


def test_calibrate_reads_each_level_and_simulate_validates_each(tmp_path):
    write_two_levels(tmp_path)
    levels = calibrate_levels(tmp_path)
    assert sorted(levels) == [1, 2]
    assert levels[1].episodes == calibrate(tmp_path).episodes  # the first level: arms/
    assert levels[2].concurrency == 2 and len(levels[2].episodes) == 1
    assert levels[2].measured.latency_reduction == pytest.approx(1 - 6.5 / 7.0, abs=1e-4)
    assert levels[2].measured.latency_reduction_ci95 == [0.01, 0.1]

    grid = Grid(depth=[1], breadth=[1], hit_rate=[1.0], tool_time_scale=[1], load=[1, 2])
    validation = simulate_report(tmp_path, grid)["validation"]
    by_level = validation["by_concurrency"]
    assert list(by_level) == ["1", "2"]
    for figures in by_level.values():
        error = abs(figures["predicted_latency_reduction"] - figures["measured_latency_reduction"])
        assert figures["simulation_error"] == pytest.approx(error, abs=1e-4)
    assert by_level["1"]["simulation_error"] == validation["simulation_error"]
    idle = by_level["2"]["from_concurrency_1"]
    measured = by_level["2"]["measured_latency_reduction"]
    assert idle["simulation_error"] == pytest.approx(
        abs(idle["predicted_latency_reduction"] - measured), abs=1e-4
    )
    assert "from_concurrency_1" not in by_level["1"]


def test_a_profile_from_before_levels_has_none(tmp_path):
    write_profile(tmp_path)
    assert calibrate_levels(tmp_path) == {}
    assert "by_concurrency" not in simulate_report(tmp_path, Grid(load=[1]))["validation"]
