"""What an RL run reports as it goes (the CLI's live view renders these)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunStarted:
    first_step: int  # 1-based: the step about to run
    steps: int
    tasks: int
    workers: int
    resumed_from: str | None


@dataclass(frozen=True)
class Phase:
    step: int
    name: str  # "rollout", "train", "sync", "checkpoint"


@dataclass(frozen=True)
class RolloutProgress:
    step: int
    done: int
    total: int
    failed_attempts: int


@dataclass(frozen=True)
class StepDone:
    row: dict  # the metrics row


@dataclass(frozen=True)
class Note:
    text: str


Event = RunStarted | Phase | RolloutProgress | StepDone | Note
