"""The command turns of a collected episode, as (context, command, observation) records.

A dataset row (obsspec.rollout.dataset) stores the prompt and, per turn, the generated action
ids and the observation ids that follow them. The context a turn's command was predicted
from is the prompt plus every earlier turn's action and observation ids, plus this turn's
action ids: exactly what the policy had produced when the command started. Its history is
the commands run before it in the episode (None after one that timed out), as the runner gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from obsspec.speculation.predictor import SpeculationContext


@dataclass(frozen=True)
class TurnRecord:
    context: SpeculationContext
    command: str
    observation: str
    exec_s: float
    timed_out: bool


def turn_records(row: dict) -> Iterator[TurnRecord]:
    """Every turn of the row that ran a command, in order."""
    ids = list(row["prompt_ids"])
    history: tuple[str, ...] | None = ()
    for turn in row["turns"]:
        ids += turn["action_ids"]
        if turn["action"] == "command":
            context = SpeculationContext(row["task_hash"], tuple(ids), history)
            yield TurnRecord(
                context, turn["command"], turn["observation"], turn["exec_s"], turn["timed_out"]
            )
            timed_out = turn["timed_out"]
            history = None if history is None or timed_out else (*history, turn["command"])
        ids += turn["observation_ids"]
