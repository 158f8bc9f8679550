"""The scripted fake's scores agree with what its generations claim."""

from obsspec.inference.base import Sampling
from obsspec.inference.scripted import ScriptedEngine


async def test_scores_are_the_logprob_its_replies_carry(tokenizer):
    engine = ScriptedEngine(tokenizer, lambda _context: "ls", logprob=-0.5)
    reply = await engine.generate([1, 2, 3], Sampling(max_tokens=8))
    scores = await engine.score([1, 2, 3, *reply.token_ids])
    assert scores == [None, -0.5, -0.5, *reply.logprobs]
    assert await engine.score([]) == []
