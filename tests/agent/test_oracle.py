"""The oracle policy replays a solution as a model's replies, token for token."""

from __future__ import annotations

import pytest

from obsspec.agent.oracle import oracle_policy
from obsspec.agent.protocol import ActionFormat, parse_action
from obsspec.inference.base import Sampling


@pytest.mark.parametrize("fmt", list(ActionFormat))
async def test_one_command_per_turn_then_done(tokenizer, fmt):
    commands = ["cd /srv", "name=$(cat user.txt)", 'echo "Hello, $name!" > /root/greeting.txt']
    oracle = oracle_policy(tokenizer, commands, fmt)
    replies = [await oracle.generate([1, 2, 3], Sampling()) for _ in range(len(commands) + 1)]
    actions = [parse_action(r.text, fmt) for r in replies]
    assert [a.command for a in actions[:-1]] == commands
    assert actions[-1].kind == "done"
    for reply in replies:  # ended by the end-of-turn token, as a model's reply is
        assert reply.token_ids[-1] == tokenizer.eos_token_id and reply.finish_reason == "stop"
        assert tokenizer.decode(reply.token_ids[:-1]) == reply.text
        assert reply.logprobs == [0.0] * len(reply.token_ids)
