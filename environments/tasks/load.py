"""Loading tasks from a directory, a directory of directories, or a glob.

A task that does not load (a missing file, a bad field, a file that is not UTF-8) is a
TaskFormatError naming the file. `load_tasks_report` keeps going past broken tasks and returns
them with their errors, so that a run can skip and report them while the others run;
`load_tasks` stops at the first. What a loader ignored (unknown keys) is logged as a warning
once per load and kept on the task (Task.format_warnings), its control characters shown as
escapes (the key names are the task author's text).

A task's files are read only from inside its directory: a link in it that leads out is a
TaskFormatError (environments.tasks.text.inside_task). A task directory that is itself a link
is followed only where it stays inside the directory that holds it: a link in a directory of
tasks to another task beside it is fine, one to a directory elsewhere on this machine (a
private task) is refused, whether the directory of tasks or the link was named.
"""

from __future__ import annotations

import glob
import logging
from pathlib import Path

from obsspec.environments.errors import TaskFormatError
from obsspec.environments.tasks.harbor import load_harbor
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.tbv1 import load_tbv1
from obsspec.environments.tasks.text import check_task_links, inside_task
from obsspec.types import visible_controls

log = logging.getLogger(__name__)


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "task.yaml").is_file()


def load_task(path: Path) -> Task:
    """One task directory, Harbor (task.toml) or Terminal-Bench v1 (task.yaml)."""
    if path.is_symlink():
        inside_task(path.parent, path, within=f"the directory that holds it ({path.parent})")
    check_task_links(path)
    if (path / "task.toml").is_file():
        task = load_harbor(path)
    elif (path / "task.yaml").is_file():
        task = load_tbv1(path)
    else:
        raise TaskFormatError(path, "not a task directory (no task.toml or task.yaml)")
    for warning in task.format_warnings:
        log.warning("%s", visible_controls(warning))
    return task


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
        raise TaskFormatError(
            Path(spec),
            "no task directories found",
            hint="give a task directory (with task.toml or task.yaml), a directory of them, "
            "or a glob; `obsspec env generate --out DIR` writes a suite of tasks",
        )
    return sorted(set(found))


def load_tasks(spec: str) -> list[Task]:
    """Every task under spec; the first broken one is raised."""
    return [load_task(path) for path in task_dirs(spec)]


def load_tasks_report(spec: str) -> tuple[list[Task], list[tuple[Path, TaskFormatError]]]:
    """The tasks under spec that load, and (task directory, error) of those that do not.
    No task directory at all is still an error."""
    tasks: list[Task] = []
    broken: list[tuple[Path, TaskFormatError]] = []
    for path in task_dirs(spec):
        try:
            tasks.append(load_task(path))
        except TaskFormatError as e:
            broken.append((path, e))
    return tasks, broken
