"""A task's text: its files read as UTF-8 (or a TaskFormatError naming the file), only from
inside the task's directory, and its env tables written as shell words.

A file that is not UTF-8 (say, an instruction.md saved as Latin-1) breaks that one task, with
the byte offset, instead of escaping as a UnicodeDecodeError that would end a whole run.

A task's files are read only from inside its directory (`inside_task`): a link that leads out
of it (instruction.md -> ../secret.txt, tests/data -> /etc/passwd) is a TaskFormatError naming
the task and the file, never followed: a task from someone else could otherwise put any file of
this machine into the instruction, the oracle's actions or a build, and from there into a
dataset pushed to a hub. The loader checks every link of the task once (`check_task_links`),
and each reader checks the file it reads again (a Task is not always made by the loader).
Links that stay inside the task are fine. Uploads into a sandbox and Docker build contexts
ship a link as a link (tar does not follow it), so in there a link can only name the
sandbox's own files.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from obsspec.environments.errors import TaskFormatError


def inside_task(root: Path, path: Path, *, within: str | None = None) -> Path:
    """path, where it (followed through every link on its way) stays inside the task
    directory root; else a TaskFormatError naming the file and the task (or `within`)."""
    real_root = root.resolve()
    try:
        real = path.resolve()
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
        real = None
    if real is None or (real != real_root and not real.is_relative_to(real_root)):
        raise TaskFormatError(
            path,
            f"leads outside {within or f'task {root.name}'} ({link_text(root, path)}); a "
            "task's files are read only from inside its directory",
            hint="copy the file into the task directory instead of linking to it",
        )
    return path


def link_text(root: Path, path: Path) -> str:
    """The first link on the way from root to path, as `name -> target` (its author's text,
    not where it leads on this machine)."""
    if not path.is_relative_to(root):
        return "a link"
    here = root
    for part in path.relative_to(root).parts:
        here = here / part
        if here.is_symlink():
            return f"a link: {here.relative_to(root)} -> {os.readlink(here)}"
    return "a link above it"


def check_task_links(root: Path) -> None:
    """Every link anywhere in the task directory root stays inside it (inside_task); links
    to directories are checked, not walked into."""
    for folder, dirs, files in os.walk(root):
        dirs.sort()  # the same link named first on every run
        for name in sorted([*dirs, *files]):
            path = Path(folder, name)
            if path.is_symlink():
                inside_task(root, path)


def read_task_text(path: Path, *, root: Path) -> str:
    """The text of a file of the task directory root."""
    inside_task(root, path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TaskFormatError(path, f"cannot be read: {e.strerror}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskFormatError(
            path, f"not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start})"
        ) from None


def env_prefix(env: Mapping[str, str]) -> str:
    """`NAME='value' ` assignments that put env into one command's environment only."""
    return "".join(f"{name}={shlex.quote(value)} " for name, value in env.items())
