"""Planning a collection: seeds, what is left to do, broken and changed tasks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from obsspec.environments.errors import TaskFormatError
from obsspec.errors import ConfigError
from obsspec.rollout.plan import (
    check_unchanged,
    episode_seed,
    load_task_set,
    plan_items,
)

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"


@pytest.fixture
def task_root(tmp_path) -> Path:
    for name in ("a", "b"):
        shutil.copytree(GREETING, tmp_path / name)
    return tmp_path


def test_seeds_are_stable_and_distinct():
    seeds = {episode_seed(0, task, i) for task in ("a", "b") for i in range(50)}
    assert len(seeds) == 100
    assert episode_seed(0, "a", 1) == episode_seed(0, "a", 1) != episode_seed(1, "a", 1)
    assert all(0 <= s < 2**31 for s in seeds)


def test_plan_skips_what_is_done_and_keeps_task_order(task_root):
    tasks, broken = load_task_set(str(task_root), strict=False)
    assert broken == {}
    items = plan_items(tasks, 3, 7, {("a", 1), ("b", 0)})
    assert [(i.task_id, i.episode_index) for i in items] == [("a", 0), ("a", 2), ("b", 1), ("b", 2)]
    assert items[0].seed == episode_seed(7, "a", 0)


def test_a_broken_task_is_reported_or_fatal_with_strict(task_root):
    (task_root / "b" / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    tasks, broken = load_task_set(str(task_root), strict=False)
    assert [t.id for t in tasks] == ["a"]
    assert list(broken) == [str(task_root / "b")] and "timeout_sec" in broken[str(task_root / "b")]
    with pytest.raises(TaskFormatError, match="timeout_sec"):
        load_task_set(str(task_root), strict=True)


def test_a_task_changed_since_its_episodes_is_refused(task_root):
    tasks, _ = load_task_set(str(task_root), strict=False)
    check_unchanged(tasks, {("a", 0): tasks[0].content_hash})
    with pytest.raises(ConfigError, match="task a changed"):
        check_unchanged(tasks, {("a", 0): "0" * 64})
