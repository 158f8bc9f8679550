"""The oracle policy replays a solution as a model's replies, token for token."""

from __future__ import annotations

import pytest

from obsspec.agent.context import ChatContextBuilder, TokenContext
from obsspec.agent.oracle import oracle_policy
from obsspec.agent.protocol import SYSTEM_PROMPTS, ActionFormat, observation_role, parse_action
from obsspec.inference.base import Sampling

COMMANDS = ["cd /srv", "name=$(cat user.txt)", 'echo "Hello, $name!" > /root/greeting.txt']


def grow(builder: ChatContextBuilder, context: TokenContext, reply_ids: list[int], obs: str):
    context.extend(reply_ids, generated=True, logprobs=[0.0] * len(reply_ids))
    context.extend(builder.turn_end_ids(reply_ids) + builder.observation_ids(obs), generated=False)


@pytest.mark.parametrize("fmt", list(ActionFormat))
async def test_one_command_per_turn_then_done(tokenizer, fmt):
    builder = ChatContextBuilder(tokenizer, observation_role(fmt))
    oracle = oracle_policy(builder, COMMANDS, fmt)
    context = TokenContext()
    context.extend(builder.prompt_ids(SYSTEM_PROMPTS[fmt], "Task:\nsay hello"), generated=False)
    replies = []
    for turn in range(len(COMMANDS) + 1):
        reply = await oracle.generate(context.ids, Sampling())
        replies.append(reply)
        grow(builder, context, reply.token_ids, f"output of turn {turn}\n[exit code: 0]")
    actions = [parse_action(r.text, fmt) for r in replies]
    assert [a.command for a in actions[:-1]] == COMMANDS
    assert actions[-1].kind == "done"
    for reply in replies:  # ended by the end-of-turn token, as a model's reply is
        assert reply.token_ids[-1] == tokenizer.eos_token_id and reply.finish_reason == "stop"
        assert tokenizer.decode(reply.token_ids[:-1]) == reply.text
        assert reply.logprobs == [0.0] * len(reply.token_ids)


async def test_the_reply_is_a_function_of_the_context(builder):
    """Asked again on an earlier context (a speculative branch), it answers that turn again."""
    oracle = oracle_policy(builder, COMMANDS, ActionFormat.markdown)
    prompt = builder.prompt_ids(SYSTEM_PROMPTS[ActionFormat.markdown], "Task:\nsay hello")
    context = TokenContext()
    context.extend(prompt, generated=False)
    first = await oracle.generate(context.ids, Sampling())
    grow(builder, context, first.token_ids, "(no output)\n[exit code: 0]")
    second = await oracle.generate(context.ids, Sampling())
    again = await oracle.generate(context.ids, Sampling())
    assert parse_action(first.text, ActionFormat.markdown).command == COMMANDS[0]
    assert second.text == again.text
    assert parse_action(second.text, ActionFormat.markdown).command == COMMANDS[1]
    assert (await oracle.generate(prompt, Sampling())).text == first.text
