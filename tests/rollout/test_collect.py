"""Collection end to end with real Docker: the oracle, a real vLLM engine, retries, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest

from obsspec.environments.tasks import load_task
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.dataset import completed_episodes

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = pytest.mark.docker


def greeting_tasks(root: Path, names: list[str]) -> Path:
    for name in names:
        shutil.copytree(GREETING, root / name)
    return root


def unstartable(task: Path) -> None:
    """The task's image builds but no sandbox of it starts: the sandbox's entrypoint, `sleep`,
    is gone (an infrastructure failure, retried, never data). A task's limits cannot do this
    any more: the run's ceiling caps what it asks."""
    with (task / "environment" / "Dockerfile").open("a") as dockerfile:
        dockerfile.write("RUN rm /usr/bin/sleep\n")


def load_rows(out: Path) -> datasets.Dataset:
    files = str(out / "data" / "*.parquet")
    return datasets.load_dataset("parquet", data_files=files, split="train")


async def test_oracle_replays_reference_solutions_for_reward_one(
    tmp_path, settings, base_image, docker_client
):
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a", "greet-b"])
    config = CollectConfig(
        tasks=str(tasks), out=tmp_path / "run", policy="oracle", episodes_per_task=2, concurrency=4
    )
    events = []
    summary = await collect(config, settings.paths.models_dir, lambda e, _s: events.append(e))
    assert summary["episodes"] == 4 and summary["mean_reward"] == 1.0 and summary["failures"] == {}
    assert summary["status"] == "complete" and summary["missing"] == 0
    rows = load_rows(config.out)
    solution = load_task(GREETING).solution_commands()
    assert sorted((r["task_id"], r["episode_index"]) for r in rows) == [
        ("greet-a", 0),
        ("greet-a", 1),
        ("greet-b", 0),
        ("greet-b", 1),
    ]
    for row in rows:
        assert [t["command"] for t in row["turns"] if t["action"] == "command"] == solution
        assert row["turns"][-1]["action"] == "done" and row["declared_done"]
        assert row["reward"] == 1.0 and row["policy"] == "oracle" and row["attempts"] == 1
        assert len(row["context_ids"]) == len(row["mask"]) == len(row["logprobs"])
    manifest = json.loads((config.out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["episodes_done"] == 4

    again = await collect(config, settings.paths.models_dir)  # the same command: nothing to do
    assert again["episodes"] == 0 and again["already_done"] == 4 and again["status"] == "complete"
    assert len(load_rows(config.out)) == 4


async def test_real_engine_episodes_store_exact_contexts(
    tmp_path, settings, base_image, tiny_engine, tiny_model_dir
):
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a"])
    config = CollectConfig.model_validate(
        {
            "tasks": str(tasks),
            "out": tmp_path / "run",
            "policy": str(tiny_model_dir),
            "episodes_per_task": 3,
            "concurrency": 3,
            "limits": {"max_turns": 2, "max_tokens": 24},
        }
    )
    summary = await collect(config, settings.paths.models_dir, engine=tiny_engine)
    assert summary["episodes"] == 3 and summary["turns"] == 6  # the tiny model never says done
    for row in load_rows(config.out):
        turns, ids, mask = row["turns"], row["context_ids"], row["mask"]
        rebuilt = list(row["prompt_ids"])
        for turn in turns:
            rebuilt += turn["action_ids"] + turn["observation_ids"]
        assert ids == rebuilt  # the exact context: prompt, then per turn action + observation
        generated = [t for turn in turns for t in turn["action_ids"]]
        assert [i for i, m in zip(ids, mask, strict=True) if m] == generated
        assert all((lp is None) != bool(m) for lp, m in zip(row["logprobs"], mask, strict=True))
        assert row["finish_reason"] == "max_turns" and row["reward"] == 0.0


async def test_infrastructure_failures_are_retried_recorded_and_left_for_a_rerun(
    tmp_path, settings, base_image, docker_client
):
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-ok", "greet-broken"])
    unstartable(tasks / "greet-broken")
    config = CollectConfig(tasks=str(tasks), out=tmp_path / "run", policy="oracle", max_attempts=2)
    summary = await collect(config, settings.paths.models_dir)
    assert summary["episodes"] == 1 and summary["retries"] == 1
    assert summary["failures"] == {"SandboxError": 1} and summary["status"] == "incomplete"
    assert set(completed_episodes(config.out / "data")) == {("greet-ok", 0)}  # no zero rows
    failures = [json.loads(line) for line in (config.out / "failures.jsonl").open()]
    assert [(f["task_id"], f["attempt"], f["final"]) for f in failures] == [
        ("greet-broken", 1, False),
        ("greet-broken", 2, True),
    ]
    assert "shell" in failures[0]["error"]  # its shell could not start: the container ended


async def test_broken_task_is_skipped_and_others_run(tmp_path, settings, base_image):
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a", "greet-b"])
    (tasks / "greet-b" / "task.toml").write_text("[agent]\ntimeout_sec = 'later'\n")
    config = CollectConfig(tasks=str(tasks), out=tmp_path / "run", policy="oracle")
    summary = await collect(config, settings.paths.models_dir)
    # The broken task's episode was asked for: it is missing, as an unbuildable task's is.
    assert summary["episodes"] == 1 and summary["total"] == 2 and summary["missing"] == 1
    assert summary["status"] == "incomplete"
    assert list(summary["skipped_tasks"]) == [str(tasks / "greet-b")]
    failures = [json.loads(line) for line in (config.out / "failures.jsonl").open()]
    assert [(f["event"], f["task_id"]) for f in failures] == [
        ("task_skipped", str(tasks / "greet-b"))
    ]


async def test_a_run_stops_when_episode_after_episode_fails(tmp_path, settings, base_image):
    from obsspec.rollout.worker import InfrastructureDown

    tasks = greeting_tasks(tmp_path / "tasks", ["g1", "g2", "g3", "g4"])
    for task in tasks.iterdir():
        unstartable(task)
    config = CollectConfig(
        tasks=str(tasks), out=tmp_path / "run", policy="oracle", max_attempts=1, give_up_after=2
    )
    with pytest.raises(InfrastructureDown, match="2 episodes in a row failed"):
        await collect(config, settings.paths.models_dir)
    assert json.loads((config.out / "manifest.json").read_text())["status"] == "failed"
