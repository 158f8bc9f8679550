"""`obsspec profile` end to end on real sandboxes and a real engine, and its bad inputs."""

from __future__ import annotations

import json

import pytest

from obsspec.errors import ConfigError, ObsspecError
from obsspec.gates import check_gates, parse_gates
from obsspec.inference.scripted import PacedEngine
from obsspec.profile.browser import render_in_browser
from obsspec.profile.config import ProfileConfig
from obsspec.profile.run import ArmDone, profile, report_keys
from obsspec.runs import read_rows
from tests.cli.test_cli import obsspec
from tests.rollout.test_collect import greeting_tasks
from tests.speculation.fakes import fake_policy

pytestmark = pytest.mark.docker

KEYS = (
    "latency_reduction",
    "latency_reduction_median",
    "latency_reduction_ci95",
    "oracle_latency_reduction",
    "oracle_fraction",
    "match_rate_wm",
    "match_rate_wm_any",
    "match_rate_attempted",
    "match_rate_used",
    "exec_won_rate",
    "predictor_speedup_p50",
    "tokens_wasted_fraction",
    "lossless_violations",
    "by_family",
    "by_source",
)


def paced(tiny_engine, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    # commands whose output does not change between runs (no `date`): the oracle arm replays
    # the sequential arm's outputs
    commands = ["ls /srv", "cat /srv/user.txt", "echo hi", "pwd", "ls -la /root"]
    script = fake_policy(tokenizer, salt=1, commands=commands)
    return PacedEngine(tiny_engine, script, min_tokens=16)


def greeting_profile(tmp_path, policy, tasks: list[str], **keys) -> ProfileConfig:
    """A profile of greeting tasks on the tiny policy, every command speculated on."""
    return ProfileConfig.model_validate(
        {
            "tasks": str(greeting_tasks(tmp_path / "tasks", tasks)),
            "policy": str(policy),
            "out": tmp_path / "profile",
            "limits": {"max_turns": 3, "max_tokens": 64, "temperature": 0.5},
            "speculation": {"gate": {"mode": "always"}},
            **keys,
        }
    )


@pytest.mark.browser
async def test_three_arms_on_the_same_episodes(
    tmp_path, settings, base_image, tiny_engine, tiny_model_dir, chromium
):
    config = greeting_profile(tmp_path, tiny_model_dir, ["greet-a"], episodes_per_task=2)
    events = []
    engine = paced(tiny_engine, tiny_model_dir)
    report = await profile(config, settings.paths.models_dir, events.append, engine=engine)

    assert all(key in report for key in KEYS)
    assert set(report) == report_keys()  # what CI gates are checked against before a run
    gates = parse_gates(["episodes=2", "match_rate_wm=0"], ["lossless_violations=0"])
    assert [r.passed for r in check_gates(report, gates)] == [True, False, True]  # null fails
    assert report["episodes"] == 2 and report["lost_episodes"] == []
    assert report["lossless_violations"] == 0
    # no world model here: the cache and rules answer or nothing does, the LM is never asked
    assert report["match_rate_wm"] is None and report["speculation"]["wm_asked"] == 0
    assert all("match_rate_wm" in family for family in report["by_family"].values())
    # The oracle replays the sequential episode's outputs: every guess it makes is exact.
    oracle = report["oracle_speculation"]
    assert oracle["attempted"] > 0 and oracle["matched"] == oracle["attempted"] - oracle["exec_won"]
    arms = {arm: read_rows(config.out / "arms" / arm) for arm in ("seq", "spec", "oracle")}
    assert all(len(rows) == 2 for rows in arms.values())
    for seq, oracle_row in zip(arms["seq"], arms["oracle"], strict=True):
        assert seq["context_ids"] == oracle_row["context_ids"]  # deterministic policy
    assert json.loads((config.out / "report.json").read_text())["episodes"] == 2
    # Phase starts are recorded, so the timeline plot draws what happened, not a guess.
    spec_turns = [t for row in arms["spec"] for t in row["turns"]]
    assert any(t["gen_start_s"] > 0 for t in spec_turns)
    assert all(t["exec_start_s"] > 0 for t in spec_turns if t["action"] == "command")
    plots = report["files"]["plots"]
    assert {"latency_by_episode", "timeline", "latency_cdf"} <= set(plots)
    shown = render_in_browser(config.out / "report.html", timeout_s=60)
    assert shown["images_loaded"] == shown["images_total"] == len(plots)
    assert shown["console_errors"] == []
    # two waves of one episode: the second swaps seq and spec (the oracle stays after seq)
    arms_played = [e.arm for e in events if hasattr(e, "arm")]
    assert arms_played == ["seq", "spec", "oracle", "spec", "seq", "oracle"]
    assert report["arm_orders"] == {"seq,spec,oracle": 1, "spec,seq,oracle": 1}
    assert report["arm_order_note"] is None

    with pytest.raises(ConfigError, match="exists; choose another directory, or --overwrite"):
        await profile(config, settings.paths.models_dir, engine=engine)
    again = config.model_copy(update={"overwrite": True, "episodes_per_task": 1})
    assert (await profile(again, settings.paths.models_dir, engine=engine))["episodes"] == 1


@pytest.mark.vllm
async def test_two_concurrency_levels_play_the_same_episodes_and_the_second_at_once(
    tmp_path, settings, base_image, tiny_engine, tiny_model_dir
):
    from obsspec.profile.calibrate import calibrate_levels
    from obsspec.profile.simulate import Grid, simulate_report

    config = greeting_profile(tmp_path, tiny_model_dir, ["greet-a", "greet-b"], concurrency=[1, 2])
    events = []
    engine = paced(tiny_engine, tiny_model_dir)
    report = await profile(config, settings.paths.models_dir, events.append, engine=engine)

    assert report["concurrency"] == 1 and list(report["by_concurrency"]) == ["1", "2"]
    one, two = report["by_concurrency"]["1"], report["by_concurrency"]["2"]
    assert report["latency_reduction"] == one["latency_reduction"]
    assert one["episodes"] == two["episodes"] == 2 and report["lost_episodes"] == []
    assert one["lossless_violations"] == two["lossless_violations"] == 0
    assert all(key in two for key in KEYS)
    # Level 1 plays one episode at a time; level 2 both episodes of an arm at once, arm
    # after arm (the oracle replays each sequential episode, so it waits for the wave's).
    assert one["episodes_at_once"] == {"seq": 1, "spec": 1, "oracle": 1}
    assert two["episodes_at_once"] == {"seq": 2, "spec": 2, "oracle": 2}
    # level 1 ran seq first, then spec first; level 2's one wave starts over with seq first,
    # and its report says that one order is all it had
    arms_played = [e.arm for e in events if isinstance(e, ArmDone) and e.concurrency == 2]
    assert arms_played == ["seq", "seq", "spec", "spec", "oracle", "oracle"]
    assert one["arm_orders"] == {"seq,spec,oracle": 1, "spec,seq,oracle": 1}
    assert one["arm_order_note"] is None and two["arm_orders"] == {"seq,spec,oracle": 1}
    assert two["arm_order_note"].startswith("the one wave ran seq before spec")
    # The same episodes at both levels: level 1 where a one-level profile puts them.
    for arm in ("seq", "spec", "oracle"):
        first = read_rows(config.out / "arms" / arm)
        second = read_rows(config.out / two["arms_dir"] / arm)
        assert two["arms_dir"] == "arms/c2"
        keys = {(r["task_id"], r["episode_index"], r["seed"]) for r in first}
        assert keys == {(r["task_id"], r["episode_index"], r["seed"]) for r in second}
        assert len(keys) == 2
    assert "by_concurrency" in report["files"]["plots"]
    assert "By concurrency" in (config.out / "report.html").read_text()
    # The simulator is calibrated on, and checked against, each measured level (a level
    # whose every guess came after its command has no hit rate: its validation says so).
    levels = calibrate_levels(config.out)
    assert levels[2].concurrency == 2 and len(levels[2].episodes) == 2
    assert levels[2].measured.latency_reduction == pytest.approx(two["latency_reduction"], abs=1e-3)
    grid = Grid(depth=[1], breadth=[1], hit_rate=[1.0], tool_time_scale=[1], load=[1, 2])
    validation = simulate_report(config.out, grid)["validation"]
    assert set(validation["by_concurrency"]) == {"1", "2"}
    for figures in validation["by_concurrency"].values():
        assert "note" in figures or figures["simulation_error"] is not None


async def test_tasks_that_all_fail_to_build_stop_with_a_clear_error(
    tmp_path, settings, base_image, tiny_model_dir
):
    tasks = greeting_tasks(tmp_path / "tasks", ["broken-a", "broken-b"])
    for name in ("broken-a", "broken-b"):
        dockerfile = tasks / name / "environment" / "Dockerfile"
        dockerfile.write_text(dockerfile.read_text() + "RUN exit 3\n")
    config = ProfileConfig(tasks=str(tasks), policy=str(tiny_model_dir))
    with pytest.raises(ObsspecError, match="no task image could be built; nothing to profile"):
        await profile(config, settings.paths.models_dir)


def test_bad_flags_are_named(tmp_path, default_model_dir):
    result = obsspec("profile", "--tasks", str(tmp_path), "--episodes-per-task", "0")
    assert result.returncode != 0 and "--episodes-per-task" in result.stderr
    for levels, named in (("0", "at least 1"), ("a", "not a whole number"), ("2,2", "twice")):
        result = obsspec("profile", "--tasks", str(tmp_path), "--concurrency", levels)
        assert result.returncode != 0 and f"--concurrency '{levels}'" in result.stderr
        assert named in result.stderr
    typo = obsspec("profile", "--tasks", str(tmp_path), "--fail-under", "match_rate=0.4")
    assert typo.returncode == 1 and "no figure 'match_rate' (did you mean" in typo.stderr
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a"])
    keep = tmp_path / "notes"
    keep.mkdir()
    (keep / "mine.txt").write_text("not a profile")
    result = obsspec("profile", "--tasks", str(tasks), "--out", str(keep), "--overwrite")
    assert result.returncode == 1 and "files that are no obsspec run" in result.stderr
    assert (keep / "mine.txt").exists()


def test_a_world_model_with_another_tokenizer_is_refused(tmp_path, tiny_model_dir):
    import shutil

    from transformers import AutoTokenizer

    other = tmp_path / "other-wm"
    shutil.copytree(tiny_model_dir, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["<obsspec-extra>"])
    tokenizer.save_pretrained(other)
    result = obsspec(
        "profile", "--tasks", str(tmp_path), "--policy", str(tiny_model_dir),
        "--world-model", str(other),
    )  # fmt: skip
    assert result.returncode != 0 and "different tokenizers" in result.stderr
