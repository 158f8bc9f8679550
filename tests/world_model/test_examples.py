"""World-model examples: split by task, held-out families, unpredictable turns skipped."""

from __future__ import annotations

import copy

import pytest

from obsspec.types import TRUNCATION_MARKER
from obsspec.world_model.examples import build_examples, family_of
from obsspec.world_model.prompt import WorldModelPrompt
from tests.rollout.test_dataset import row


@pytest.fixture(scope="module")
def prompt(builder):
    return WorldModelPrompt(builder)


def rows_for(tasks: list[str], episodes: int = 2) -> list[dict]:
    return [row(task, index) for task in tasks for index in range(episodes)]


def test_family_of_built_in_ids():
    assert family_of("csv-json-002") == "csv-json"
    assert family_of("harbor-greeting") == "harbor-greeting"


def test_split_is_by_task_and_stable(prompt):
    tasks = [f"fam{i % 3}-{i:03d}" for i in range(30)]
    train, held, report = build_examples(rows_for(tasks), prompt, held_out_fraction=0.3)
    assert report.train_tasks and report.held_out_tasks
    assert not report.train_tasks & report.held_out_tasks  # never one task on both sides
    assert {(e.task_id, e.context.task_hash) for e in held} == report.held_out_tasks
    assert len(train) + len(held) == report.examples == 60
    again = build_examples(rows_for(tasks), prompt, held_out_fraction=0.3)[2]
    assert again.held_out_tasks == report.held_out_tasks


def test_tasks_of_two_seeds_sharing_an_id_count_twice(prompt):
    rows = rows_for(["csv-json-000"], episodes=1)
    other = copy.deepcopy(rows[0]) | {"task_hash": "f" * 64}  # the same id, another seed
    report = build_examples([*rows, other], prompt, held_out_fraction=0.0)[2]
    assert len(report.train_tasks) == 2 and report.as_dict()["train_tasks"] == 2


def test_whole_families_can_be_held_out(prompt):
    tasks = ["a-000", "a-001", "b-000", "c-000"]
    _, held, report = build_examples(rows_for(tasks), prompt, held_out_families={"a"})
    assert {task for task, _ in report.held_out_tasks} == {"a-000", "a-001"}
    assert {e.family for e in held} == {"a"}


def test_example_is_the_shared_prompt_and_the_observation(prompt):
    [example], _, _ = build_examples([row("t-000", 0)], prompt, held_out_fraction=0.0)
    assert example.prompt_ids == prompt.prompt_ids([1, 2, 5, 6, 2])  # prompt + action ids
    assert example.target_ids == prompt.target_ids("a\n[exit code: 0]")
    assert example.command == "ls"


def test_unpredictable_turns_are_skipped_and_counted(prompt):
    timed_out, truncated, infra = (copy.deepcopy(row(f"t-00{i}", 0)) for i in range(3))
    timed_out["turns"][0]["timed_out"] = True
    truncated["turns"][0]["observation"] = "head" + TRUNCATION_MARKER + "tail\n[exit code: 0]"
    infra["error_kind"] = "infra"
    train, held, report = build_examples([timed_out, truncated, infra], prompt)
    assert train == held == []
    assert report.skipped == {"timed_out": 1, "truncated": 1, "infra": 1}
