"""What a collection must run: the tasks that load, and the (task, episode) pairs not yet done.

Each episode's seed derives from the run's base seed, the task id and the episode index, so
an episode is the same work whichever worker runs it, in whatever order, after any resume.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks.load import load_task, task_dirs
from obsspec.environments.tasks.model import Task
from obsspec.errors import ConfigError


@dataclass(frozen=True)
class WorkItem:
    task_id: str
    episode_index: int
    seed: int


def episode_seed(base_seed: int, task_id: str, episode_index: int) -> int:
    digest = hashlib.sha256(f"{base_seed}:{task_id}:{episode_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1  # a non-negative 31-bit seed


def load_task_set(spec: str, *, strict: bool) -> tuple[list[Task], dict[str, str]]:
    """The tasks under spec that load, and {path: reason} of those that do not (with strict,
    the first broken task is raised instead)."""
    tasks: list[Task] = []
    broken: dict[str, str] = {}
    for path in task_dirs(spec):
        try:
            tasks.append(load_task(path))
        except TaskFormatError as e:
            if strict:
                raise
            broken[str(path)] = str(e)
    seen: dict[str, Task] = {}
    for task in tasks:
        if task.id in seen:
            raise ConfigError(
                f"--tasks {spec}: two tasks are named {task.id!r} ({seen[task.id].path} and "
                f"{task.path}); episodes are keyed by task id"
            )
        seen[task.id] = task
    return tasks, broken


def check_unchanged(tasks: list[Task], done: dict[tuple[str, int], str]) -> None:
    """A task whose files changed since its episodes were collected would mix two tasks."""
    current = {task.id: task.content_hash for task in tasks}
    for (task_id, _), task_hash in done.items():
        if task_id in current and current[task_id] != task_hash:
            raise ConfigError(
                f"task {task_id} changed since its episodes were collected (hash "
                f"{task_hash[:12]} then, {current[task_id][:12]} now); restore it, or use "
                "--overwrite to start the run again"
            )


def plan_items(
    tasks: list[Task], episodes_per_task: int, base_seed: int, done: set[tuple[str, int]]
) -> list[WorkItem]:
    """Episodes still to run, task by task (so that a task's episodes share warm sandboxes)."""
    return [
        WorkItem(task.id, index, episode_seed(base_seed, task.id, index))
        for task in tasks
        for index in range(episodes_per_task)
        if (task.id, index) not in done
    ]
