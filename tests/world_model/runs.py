"""Collect runs written for tests: real token ids from the real builder, no sandbox.

Each episode is built the way obsspec.agent.episode builds one: the chat prompt, then per
turn the well-formed reply's ids (ending with the end-of-turn token) and the observation ids
the context builder makes; then a `done` turn. Task hashes come from the task id.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.protocol import SYSTEM_PROMPTS, Action, ActionFormat, format_action
from obsspec.rollout.dataset import ShardWriter, trajectory_row
from obsspec.trajectory import Trajectory, Turn

FMT = ActionFormat.markdown


def task_hash(task_id: str) -> str:
    return hashlib.sha256(task_id.encode()).hexdigest()


def reply_turn(builder: ChatContextBuilder, index: int, action: Action, observation: str) -> Turn:
    reply = format_action(action, FMT)
    action_ids = [*builder.encode(reply), builder.end_of_turn_id]
    observation_ids = [] if action.kind == "done" else builder.observation_ids(observation)
    return Turn(
        index,
        reply,
        action.kind,
        action.command,
        observation,
        action_ids,
        [-0.5] * len(action_ids),
        observation_ids,
        exit_code=0 if action.kind == "command" else None,
        exec_s=1.5,
    )


def episode_row(
    builder: ChatContextBuilder, task_id: str, steps: list[tuple[str, str]], index: int = 0
) -> dict:
    """steps: (command, observation) pairs, then the policy says done."""
    prompt = builder.prompt_ids(SYSTEM_PROMPTS[FMT], f"Task:\nsolve {task_id}")
    turns = [
        reply_turn(builder, i, Action("command", command), observation)
        for i, (command, observation) in enumerate(steps)
    ]
    turns.append(reply_turn(builder, len(steps), Action("done"), ""))
    context, mask = list(prompt), [0] * len(prompt)
    for turn in turns:
        context += turn.action_ids + turn.observation_ids
        mask += [1] * len(turn.action_ids) + [0] * len(turn.observation_ids)
    trajectory = Trajectory(
        task_id,
        task_hash(task_id),
        "test",
        0,
        prompt,
        turns=turns,
        context_ids=context,
        mask=mask,
        logprobs=[None] * len(context),
        finish_reason="done",
        declared_done=True,
        reward=1.0,
    )
    return trajectory_row(trajectory, run_id="r", episode_index=index, policy="oracle", attempts=1)


def steps_for(task_id: str) -> list[tuple[str, str]]:
    """A small, learnable episode: the observations follow from the commands."""
    name = task_id.replace("-", "_")
    return [
        (f"mkdir -p /srv/{name}", "(no output)\n[exit code: 0]"),
        (f"echo {name}", f"{name}\n[exit code: 0]"),
        (f"ls /srv/{name}", "(no output)\n[exit code: 0]"),
    ]


def write_run(path: Path, rows: list[dict]) -> Path:
    (path / "data").mkdir(parents=True)
    writer = ShardWriter(path / "data", "shard-test-w00", shard_episodes=len(rows) or 1)
    for row in rows:
        writer.add(row)
    writer.close()
    manifest = {"format": 1, "identity": {"limits": {"action_format": FMT.value}}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def make_run(path: Path, builder: ChatContextBuilder, tasks: list[str], episodes: int = 1):
    rows = [
        episode_row(builder, task, steps_for(task), index)
        for task in tasks
        for index in range(episodes)
    ]
    return write_run(path, rows)
