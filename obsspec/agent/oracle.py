"""The oracle policy: a task's reference solution replayed as if a model had typed it.

    engine = oracle_policy(tokenizer, task.solution_commands(), ActionFormat.markdown)
    trajectory = await run_episode(task, pool, engine, builder, limits)

Turn k's reply is command k rendered in the action format (exactly what `parse_action` reads
back), tokenised with the policy's tokenizer and ended with its end-of-turn token, as a model's
reply is; after the last command the reply declares the task done. The episode therefore runs
through the same loop, context builder and verifier as a model's, and its trajectories are
realistic expert data with real observations. One oracle serves one episode: it counts the
turns it has answered. Logprobs are 0 (the expert is certain).
"""

from __future__ import annotations

from obsspec.agent.protocol import Action, ActionFormat, format_action
from obsspec.inference.scripted import ScriptedEngine

ORACLE = "oracle"  # the policy name that selects it


def oracle_policy(tokenizer, commands: list[str], fmt: ActionFormat) -> ScriptedEngine:
    replies = [format_action(Action("command", c), fmt) for c in commands]
    replies.append(format_action(Action("done"), fmt))
    turn = 0

    def next_reply(_context: str) -> str:
        nonlocal turn
        reply = replies[min(turn, len(replies) - 1)]
        turn += 1
        return reply

    return ScriptedEngine(tokenizer, next_reply, max_model_len=1 << 20, logprob=0.0)
