"""The oracle policy: a task's reference solution replayed as if a model had typed it.

    engine = oracle_policy(builder, task.solution_commands(), ActionFormat.markdown)
    trajectory = await run_episode(task, pool, engine, builder, limits)

Turn k's reply is command k rendered in the action format (exactly what `parse_action` reads
back), tokenised with the policy's tokenizer and ended with its end-of-turn token, as a model's
reply is; after the last command the reply declares the task done. The episode therefore runs
through the same loop, context builder and verifier as a model's, and its trajectories are
realistic expert data with real observations. Logprobs are 0 (the expert is certain).

The reply is a function of the context alone, as a model's is: the turn is read off the
number of end-of-turn tokens the context holds beyond the prompt (each finished turn adds the
reply's and the observation template's). So the speculative runner may ask it for a turn
ahead, or for the same turn twice on different guesses, and get what a sequential run would.
One oracle serves one episode: its first request is the episode's prompt.
"""

from __future__ import annotations

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.protocol import Action, ActionFormat, format_action
from obsspec.inference.scripted import ScriptedEngine

ORACLE = "oracle"  # the policy name that selects it


def oracle_policy(
    builder: ChatContextBuilder, commands: list[str], fmt: ActionFormat
) -> ScriptedEngine:
    replies = [format_action(Action("command", c), fmt) for c in commands]
    replies.append(format_action(Action("done"), fmt))
    template = builder.template
    end = template.end_of_turn
    ends_per_turn = 1 + (template.before + template.after).count(end)
    prompt_ends: int | None = None

    def reply_for(context: str) -> str:
        nonlocal prompt_ends
        if prompt_ends is None:
            prompt_ends = context.count(end)
        turn = (context.count(end) - prompt_ends) // ends_per_turn
        return replies[min(turn, len(replies) - 1)]

    return ScriptedEngine(builder.tokenizer, reply_for, max_model_len=1 << 20, logprob=0.0)
