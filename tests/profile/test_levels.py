"""Concurrency levels of a profile, without Docker: the flag and config, the waves, the
per-level figures and report, their table, HTML and plot, and the per-level calibration."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from rich.console import Console

from obsspec.cli.markdown import markdown
from obsspec.cli.profile_view import concurrency_table, event_line, figures_table
from obsspec.errors import ConfigError
from obsspec.profile.arms import ARMS, ArmDone, Wave
from obsspec.profile.calibrate import calibrate, calibrate_levels
from obsspec.profile.concurrency_plot import plot_by_concurrency
from obsspec.profile.config import ProfileConfig, load_profile_config
from obsspec.profile.html_report import render_html
from obsspec.profile.levels import (
    ARM_ORDERS,
    arm_order_note,
    arm_orders,
    arms_dir,
    order_name,
    parse_levels,
    peak_at_once,
    waves,
)
from obsspec.profile.run import LevelPlayed, play_level, play_levels, report_keys
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
        self.settled: list[float] = []  # when each wait for the sandboxes ended
        self.forgotten: list[float] = []  # when the engines' prefix caches were reset
        self.refuse_reset: str | None = None  # why the engines keep their caches

    async def forget_prefixes(self) -> str | None:
        self.forgotten.append(time.monotonic())
        return self.refuse_reset

    def limits_for(self, _task):
        return self.limits

    async def settle(self):
        await asyncio.sleep(0.01)
        self.settled.append(time.monotonic())

    async def generate(self, prompt, _sampling, priority=0):
        self.prefilled.append((prompt, time.monotonic()))

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

    assert len(played.episodes) == 3 and played.lost == [] and played.caches_kept is None
    assert [arm for arm, *_ in session.played] == ["seq"] * 3 + ["spec"] * 3 + ["oracle"] * 3
    for arm, after in (("spec", "seq"), ("oracle", "spec")):
        first_start = min(start for a, _, start, _ in session.played if a == arm)
        assert first_start >= max(end for a, _, _, end in session.played if a == after)
    assert all(peak_at_once(spans) == 3 for spans in played.spans.values())
    for arm, settled in zip(("seq", "spec", "oracle"), session.settled, strict=True):
        # each arm waits for the sandboxes the last one set off starting
        assert min(start for a, _, start, _ in session.played if a == arm) >= settled
    for arm, forgotten in zip(("seq", "spec", "oracle"), session.forgotten, strict=True):
        # each arm starts from caches reset, then its 3 prompts prefilled: nothing of another
        first_start = min(start for a, _, start, _ in session.played if a == arm)
        prefilled = [at for _, at in session.prefilled if forgotten <= at <= first_start]
        assert len(prefilled) == 3
    assert len(session.prefilled) == 9
    assert {(e.arm, e.concurrency) for e in events} == {(a, 3) for a in ("seq", "spec", "oracle")}


async def test_engines_that_keep_their_caches_are_said_to_share_them_between_arms():
    session = FakeSession(["a", "b"])
    session.refuse_reset = "http://server cannot reset its prefix cache (404)"
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    played = await Wave(ProfileConfig(tasks="t"), session, items, 2).run(lambda _e: None)
    assert played.caches_kept == session.refuse_reset and len(played.episodes) == 2
    level = LevelPlayed(2, "arms", played.episodes, [], {}, caches_kept=played.caches_kept)
    assert level.figures()["prefix_caches"] == f"shared between arms: {session.refuse_reset}"
    assert LevelPlayed(2, "arms", [], [], {}).figures()["prefix_caches"] == "reset before each arm"


async def test_an_episode_lost_in_one_arm_is_left_out_of_all():
    session = FakeSession(["a", "b", "c"], fail={("b", "seq"), ("c", "spec")})
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    played = await Wave(ProfileConfig(tasks="t"), session, items, 3).run(lambda _e: None)

    assert [e.seq["task_id"] for e in played.episodes] == ["a"]
    assert [(lost["task_id"], lost["arm"]) for lost in played.lost] == [("b", "seq"), ("c", "spec")]
    # b never reached the speculative arm; c, lost there, never reached the oracle
    assert sorted(t for arm, t, *_ in session.played if arm == "spec") == ["a", "c"]
    assert [t for arm, t, *_ in session.played if arm == "oracle"] == ["a"]


# --- the arms' order, alternated wave after wave ------------------------------------------------
SEQ_FIRST, SPEC_FIRST = "seq,spec,oracle", "spec,seq,oracle"


class LevelSession(FakeSession):
    """A FakeSession that play_level can drive: it also resets speculation and hears when a
    task's episodes are done. Its gate has decided nothing and it has no world model."""

    world_model_engine = None

    def reset_speculation(self) -> None:
        from obsspec.speculation.gate import Gate

        self.loop = SimpleNamespace(settings=self.loop.settings, gate=Gate())

    async def finished(self, _task_id: str) -> None:
        pass


def wave_orders(played: list[tuple[str, str, float, float]]) -> list[str]:
    """The arm order of each wave, read off the episodes played: the oracle ends every wave,
    so an arm after an oracle episode starts the next."""
    orders: list[list[str]] = []
    for arm, *_ in played:
        if not orders or (orders[-1][-1] == "oracle" and arm != "oracle"):
            orders.append([])
        if arm not in orders[-1]:
            orders[-1].append(arm)
    return [",".join(order) for order in orders]


async def test_a_wave_plays_spec_first_when_told_and_the_oracle_still_replays_seq():
    session = FakeSession(["a", "b"])
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    wave = Wave(ProfileConfig(tasks="t"), session, items, 2, ("spec", "seq", "oracle"))
    played = await wave.run(lambda _e: None)

    assert [arm for arm, *_ in session.played] == ["spec"] * 2 + ["seq"] * 2 + ["oracle"] * 2
    assert played.order == ("spec", "seq", "oracle") and len(played.episodes) == 2
    for arm, after in (("seq", "spec"), ("oracle", "seq")):
        first_start = min(start for a, _, start, _ in session.played if a == arm)
        assert first_start >= max(end for a, _, _, end in session.played if a == after)
    # each episode's arms land in their own places whatever the order they ran in
    for episode in played.episodes:
        assert [getattr(episode, arm)["run_id"] for arm in ARMS] == [f"profile-{a}" for a in ARMS]


async def test_an_episode_lost_in_the_first_arm_is_not_played_in_the_others():
    session = FakeSession(["a", "b"], fail={("b", "spec")})
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    wave = Wave(ProfileConfig(tasks="t"), session, items, 2, ("spec", "seq", "oracle"))
    played = await wave.run(lambda _e: None)

    assert [e.seq["task_id"] for e in played.episodes] == ["a"]
    assert [(arm, t) for arm, t, *_ in session.played if t == "b"] == [("spec", "b")]


@pytest.mark.parametrize(
    "order", [("oracle", "seq", "spec"), ("seq", "oracle", "spec"), ("seq", "spec"), ARMS[::-1]]
)
def test_an_order_with_the_oracle_before_seq_or_an_arm_missing_is_refused(order):
    with pytest.raises(ValueError, match="arm order"):
        Wave(ProfileConfig(tasks="t"), FakeSession(["a"]), [], 1, order)


def test_the_orders_alternate_and_each_puts_the_oracle_after_seq():
    orders = arm_orders()
    taken = [order_name(next(orders)) for _ in range(5)]
    assert taken == [SEQ_FIRST, SPEC_FIRST, SEQ_FIRST, SPEC_FIRST, SEQ_FIRST]
    for order in ARM_ORDERS:
        assert sorted(order) == sorted(ARMS) and order.index("seq") < order.index("oracle")


async def play(levels: list[int], tasks: int) -> tuple[list[LevelPlayed], dict[int, list[str]]]:
    """Levels played over `tasks` fake tasks as profile plays them; per level, the order of
    each wave as the session saw it."""
    session = LevelSession([f"t{i}" for i in range(tasks)])
    items = [WorkItem(t, 0, i) for i, t in enumerate(session.tasks)]
    seen: dict[int, list[str]] = {}
    played = []
    orders = arm_orders()
    for index, level in enumerate(levels):  # as play_levels does, one level at a time
        session.played.clear()
        config = ProfileConfig(tasks="t")
        played.append(
            await play_level(
                config, session, items, level, first=index == 0, orders=orders, emit=lambda _e: 0
            )
        )
        seen[level] = wave_orders(session.played)
    return played, seen


async def test_orders_alternate_across_waves_and_run_on_from_one_level_to_the_next():
    played, seen = await play([1, 2, 4], tasks=3)
    # level 1: 3 waves; level 2: 2 waves; level 4: 1 wave, each starting with the order the
    # level before did not end with
    assert seen == {
        1: [SEQ_FIRST, SPEC_FIRST, SEQ_FIRST],
        2: [SPEC_FIRST, SEQ_FIRST],
        4: [SPEC_FIRST],
    }
    figures = [level.figures() for level in played]
    assert [f["arm_orders"] for f in figures] == [
        {SEQ_FIRST: 2, SPEC_FIRST: 1},
        {SPEC_FIRST: 1, SEQ_FIRST: 1},
        {SPEC_FIRST: 1},
    ]
    assert [f["episodes"] for f in figures] == [3, 3, 3]
    assert figures[0]["arm_order_note"] is None and figures[1]["arm_order_note"] is None
    assert figures[2]["arm_order_note"].startswith("the one wave ran spec before seq: drift")


async def test_two_levels_of_one_wave_each_get_both_orders():
    # 2 tasks at concurrency 2 and 4: one wave per level; alternating within a level only
    # would give both the same order
    played, seen = await play([2, 4], tasks=2)
    assert seen == {2: [SEQ_FIRST], 4: [SPEC_FIRST]}
    notes = [level.figures()["arm_order_note"] for level in played]
    assert notes[0].startswith("the one wave ran seq before spec")
    assert "play more than 2 episodes (--episodes-per-task) for two waves" in notes[0]
    assert notes[1].startswith("the one wave ran spec before seq")


async def test_play_levels_runs_the_orders_on_across_levels():
    session = LevelSession(["a"])
    items = [WorkItem("a", 0, 0)]
    played = await play_levels(ProfileConfig(tasks="t"), session, items, [1, 2, 3], lambda _e: 0)
    assert [level.figures()["arm_orders"] for level in played] == [
        {SEQ_FIRST: 1},
        {SPEC_FIRST: 1},
        {SEQ_FIRST: 1},
    ]


async def test_each_finished_level_is_handed_on_before_the_next_begins():
    """profile writes report.json after every level, so a run that dies later keeps them."""
    session = LevelSession(["a"])
    seen: list[list[int]] = []

    def level_done(played) -> None:
        seen.append([level.level for level in played])
        if len(played) == 2:
            raise KeyboardInterrupt  # the user stops the run during the third level's setup

    items = [WorkItem("a", 0, 0)]
    config = ProfileConfig(tasks="t")
    with pytest.raises(KeyboardInterrupt):
        await play_levels(config, session, items, [1, 2, 4], lambda _e: 0, level_done)
    assert seen == [[1], [1, 2]]


def test_the_note_is_there_only_when_every_wave_ran_in_one_order():
    assert arm_order_note(Counter(), 8) is None  # no wave at all: nothing to balance
    assert arm_order_note(Counter({SEQ_FIRST: 1, SPEC_FIRST: 1}), 1) is None
    assert arm_order_note(Counter({SEQ_FIRST: 3, SPEC_FIRST: 2}), 1) is None
    assert arm_order_note(Counter({SEQ_FIRST: 1}), 8).startswith("the one wave ran seq before")
    assert arm_order_note(Counter({SPEC_FIRST: 2}), 8).startswith("all 2 waves ran spec before")
    assert {"arm_orders", "arm_order_note"} <= report_keys()  # CI gates see them


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


def test_the_tables_html_and_markdown_show_the_orders_and_note_only_an_unbalanced_level():
    report = levels_report()
    one, four = report["by_concurrency"]["1"], report["by_concurrency"]["4"]
    one |= {"arm_orders": {SEQ_FIRST: 1, SPEC_FIRST: 1}, "arm_order_note": None}
    note = arm_order_note(Counter({SPEC_FIRST: 1}), 4)
    four |= {"arm_orders": {SPEC_FIRST: 1}, "arm_order_note": note}
    report |= one  # the top-level figures are the first level's: balanced

    def shown(report: dict) -> tuple[str, str, str]:
        console = Console(record=True, width=250)
        console.print(figures_table(report))
        console.print(concurrency_table(report))
        text = markdown(figures_table(report), concurrency_table(report))
        return console.export_text(), text, render_html(report, {})

    text, md, html = shown(report)
    assert "waves seq/spec first" in text and "1/1" in text and "0/1 *" in text
    assert f"* N=4: {note}" in md and "| 4 |" in md
    assert f'<p class="alert">4 at once: {note}</p>' in html and "1 at once: " not in html
    assert text.count("ran spec before seq") == 1  # the level's, not the first level's row

    report |= four  # a one-level report whose only level ran one order: the figures say so
    report["by_concurrency"] = {"4": four}
    text, md, html = shown(report)
    assert "note" in text and f"| note | {note} |" in md and html.count(note) == 1

    balanced = levels_report()  # no orders recorded (an older report): nothing to say
    text, md, html = shown(balanced)
    assert "drift" not in text + md + html and "waves seq/spec first" in text  # the column


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
