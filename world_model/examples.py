"""World-model examples from collected datasets, split by task.

    train, held_out, report = build_examples(rows, prompt, held_out_fraction=0.2)

Each command turn of each episode becomes one example: `prompt_ids` (world_model.prompt: the
policy's exact context up to and including the action, then the observation's opening) and
`target_ids` (the observation and its end). The loss goes on target tokens only.

Split by task, never by turn: all episodes of a task land on the same side, chosen by a hash
of the task id (stable across runs and machines), or whole families can be held out. Turns
whose observation cannot be predicted from the context are skipped, and counted:
    timed_out    the command was killed: its output depends on the machine's speed
    truncated    the observation was cut: the middle is unknowable from the context
    infra        the episode failed on the infrastructure (not data)
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from obsspec.speculation.predictor import SpeculationContext
from obsspec.types import TRUNCATION_MARKER
from obsspec.world_model.prompt import WorldModelPrompt
from obsspec.world_model.turns import turn_records


@dataclass(frozen=True)
class Example:
    task_id: str
    family: str
    command: str
    context: SpeculationContext  # what a predictor is asked with at serving time
    observation: str  # the real canonical observation
    prompt_ids: list[int]
    target_ids: list[int]
    exec_s: float


@dataclass
class ExampleReport:
    episodes: int = 0
    examples: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> turns
    train_tasks: set[tuple[str, str | None]] = field(default_factory=set)  # (id, content)
    held_out_tasks: set[tuple[str, str | None]] = field(default_factory=set)

    def merge(self, other: ExampleReport) -> None:
        self.episodes += other.episodes
        self.examples += other.examples
        self.skipped.update(other.skipped)
        self.train_tasks |= other.train_tasks
        self.held_out_tasks |= other.held_out_tasks

    def as_dict(self) -> dict:
        return {
            "episodes": self.episodes,
            "examples": self.examples,
            "skipped": dict(self.skipped),
            "train_tasks": len(self.train_tasks),
            "held_out_tasks": len(self.held_out_tasks),
        }


def family_of(task_id: str) -> str:
    """Built-in task ids are '<family>-<index>'; other tasks are their own family."""
    head, _, tail = task_id.rpartition("-")
    return head if head and tail.isdigit() else task_id


def held_out(task_id: str, fraction: float) -> bool:
    digest = hashlib.sha256(f"obsspec-split:{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def build_examples(
    rows: Iterable[dict],
    prompt: WorldModelPrompt,
    *,
    held_out_fraction: float = 0.2,
    held_out_families: set[str] | None = None,
) -> tuple[list[Example], list[Example], ExampleReport]:
    report = ExampleReport()
    train: list[Example] = []
    evaluation: list[Example] = []
    for row in rows:
        report.episodes += 1
        task, family = row["task_id"], family_of(row["task_id"])
        if held_out_families is not None:
            is_held_out = family in held_out_families
        else:
            is_held_out = held_out(task, held_out_fraction)
        # tasks of two seeds share ids (archive-repack-000): a task is its id and its content
        (report.held_out_tasks if is_held_out else report.train_tasks).add(
            (task, row.get("task_hash"))
        )
        if row.get("error_kind") == "infra":
            report.skipped["infra"] += sum(t["action"] == "command" for t in row["turns"])
            continue
        for record in turn_records(row):
            if record.timed_out:
                report.skipped["timed_out"] += 1
                continue
            if TRUNCATION_MARKER in record.observation:
                report.skipped["truncated"] += 1
                continue
            example = Example(
                task,
                family,
                record.command,
                record.context,
                record.observation,
                prompt.prompt_ids(record.context.ids),
                prompt.target_ids(record.observation),
                record.exec_s,
            )
            (evaluation if is_held_out else train).append(example)
            report.examples += 1
    return train, evaluation, report
