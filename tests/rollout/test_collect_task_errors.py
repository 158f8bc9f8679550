"""Collection and the verifier: every reward key in the dataset; a broken verifier (a task
error, not retryable) is counted and reported once per episode, never retried, and never
taken for an infrastructure outage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest

from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.dataset import completed_episodes

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = pytest.mark.docker

MULTI_KEY = """#!/bin/bash
echo "greeting checked"
ok=0; [ "$(cat /root/greeting.txt)" = "Hello, $(cat /srv/user.txt)!" ] && ok=1
echo "{\\"correctness\\": $ok, \\"performance\\": 0.5}" > /logs/verifier/reward.json
"""
BROKEN = """#!/bin/bash
echo "grader v2 says yes"
echo '{"correctness": "yes"}' > /logs/verifier/reward.json
"""


def task_with_verifier(root: Path, name: str, test_sh: str | None = None) -> None:
    shutil.copytree(GREETING, root / name)
    if test_sh is not None:
        (root / name / "tests" / "test.sh").write_text(test_sh)


async def test_every_reward_key_and_the_verifier_output_reach_the_dataset(
    tmp_path, settings, base_image
):
    tasks = tmp_path / "tasks"
    task_with_verifier(tasks, "greet-multi", MULTI_KEY)
    config = CollectConfig(tasks=str(tasks), out=tmp_path / "run", policy="oracle")
    summary = await collect(config, settings.paths.models_dir)
    assert summary["episodes"] == 1 and summary["failures"] == {}
    files = str(config.out / "data" / "*.parquet")
    row = datasets.load_dataset("parquet", data_files=files, split="train")[0]
    rewards = {r["key"]: r["value"] for r in row["rewards"]}
    assert rewards == {"correctness": 1.0, "performance": 0.5}
    assert row["reward"] == 0.5 and not row["success"]  # min of the keys
    assert "greeting checked" in row["verifier_output"]


async def test_a_broken_verifier_is_reported_not_retried(tmp_path, settings, base_image):
    tasks = tmp_path / "tasks"
    task_with_verifier(tasks, "greet-broken", BROKEN)
    task_with_verifier(tasks, "greet-ok")
    config = CollectConfig(
        tasks=str(tasks),
        out=tmp_path / "run",
        policy="oracle",
        episodes_per_task=2,
        max_attempts=3,
        give_up_after=1,  # a broken task is not an outage: the run goes on
        concurrency=2,
    )
    summary = await collect(config, settings.paths.models_dir)
    assert summary["failures"] == {"VerifierError": 2} and summary["retries"] == 0
    assert summary["episodes"] == 2 and summary["status"] == "incomplete"
    assert set(completed_episodes(config.out / "data")) == {("greet-ok", 0), ("greet-ok", 1)}
    failures = [json.loads(line) for line in (config.out / "failures.jsonl").open()]
    assert sorted((f["task_id"], f["episode_index"], f["attempt"]) for f in failures) == [
        ("greet-broken", 0, 1),
        ("greet-broken", 1, 1),
    ]
    assert all(f["final"] and not f["retryable"] for f in failures)
    assert "key 'correctness' is not a number" in failures[0]["error"]

    again = await collect(config, settings.paths.models_dir)  # a rerun: one try each, no more
    assert again["failures"] == {"VerifierError": 2} and again["retries"] == 0
    assert len((config.out / "failures.jsonl").read_text().splitlines()) == 4
