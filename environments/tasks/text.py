"""A task's text: its files read as UTF-8 (or a TaskFormatError naming the file), and its
env tables written as shell words.

A file that is not UTF-8 (say, an instruction.md saved as Latin-1) breaks that one task, with
the byte offset, instead of escaping as a UnicodeDecodeError that would end a whole run.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from obsspec.environments.errors import TaskFormatError


def read_task_text(path: Path) -> str:
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
