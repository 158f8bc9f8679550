"""Loading tasks from a directory, a directory of directories, or a glob."""

from __future__ import annotations

import glob
from pathlib import Path

from environments.errors import TaskFormatError
from environments.tasks.harbor import load_harbor
from environments.tasks.model import Task
from environments.tasks.tbv1 import load_tbv1


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "task.yaml").is_file()


def load_task(path: Path) -> Task:
    """One task directory, Harbor (task.toml) or Terminal-Bench v1 (task.yaml)."""
    if (path / "task.toml").is_file():
        return load_harbor(path)
    if (path / "task.yaml").is_file():
        return load_tbv1(path)
    raise TaskFormatError(path, "not a task directory (no task.toml or task.yaml)")


def task_dirs(spec: str) -> list[Path]:
    """A task dir, a dir of task dirs, or a glob of either; sorted, deduplicated."""
    matches = [Path(p) for p in sorted(glob.glob(spec))] or [Path(spec)]
    found: list[Path] = []
    for path in matches:
        if is_task_dir(path):
            found.append(path)
        elif path.is_dir():
            found += sorted(p for p in path.iterdir() if p.is_dir() and is_task_dir(p))
    if not found:
        raise TaskFormatError(Path(spec), "no task directories found")
    return sorted(set(found))


def load_tasks(spec: str) -> list[Task]:
    return [load_task(path) for path in task_dirs(spec)]
