"""One row of the fault table (tests/faults.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    when: str  # the fault, as the user would name it
    exit: str  # the exit code of the command, or "-"
    see: str  # what the user sees: the line printed, the effect on the data
    recorded: str  # where it is recorded
    rerun: str  # what rerunning the same command does
    tests: tuple[str, ...]  # pytest node ids (a parametrized test by its function)
