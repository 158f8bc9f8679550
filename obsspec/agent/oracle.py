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

Replies are never cut at the sampling's max_tokens: they are the solution, not a model's
guess, and a cut command would be another command (an invalid turn, reward 0). A command the
action format cannot carry (in markdown, one holding a ``` fence) is refused up front by
`unplayable`, as is a task without a usable solution (obsspec.rollout.policy.oracle_problem).
"""

from __future__ import annotations

from obsspec.agent.context import ChatContextBuilder
from obsspec.agent.protocol import Action, ActionFormat, format_action, parse_action
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

    return ScriptedEngine(
        builder.tokenizer, reply_for, max_model_len=1 << 20, logprob=0.0, honor_max_tokens=False
    )


def unplayable(commands: list[str], fmt: ActionFormat) -> str | None:
    """Why a command would not come back from its reply as itself (the first such), or None."""
    for number, command in enumerate(commands, 1):
        parsed = parse_action(format_action(Action("command", command), fmt), fmt)
        if parsed.kind != "command" or parsed.command != command:
            first_line = command.split("\n", 1)[0][:60]
            return (
                f"command {number} ({first_line!r}...) does not survive the {fmt} action "
                f"format (read back as {parsed.kind} {parsed.command[:60]!r})"
            )
    return None
