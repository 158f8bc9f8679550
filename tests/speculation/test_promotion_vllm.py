"""Promotion under load on a real vLLM engine: other episodes' real turns keep the queue full;
a speculative reply that is still queued when its guess is confirmed is resubmitted at
priority 0, and its reply is the one the sequential loop gets (as is the reply of one that
keeps its speculative priority, if it finishes). How much sooner it finishes is a timing, so
no assert here: it depends on how full the queue is at that moment on a shared machine (once
3.1 s against not finished in 9.2 s, once 3.2 s against 1.6 s when the queue drained)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time

import pytest

from obsspec.agent.episode import play
from obsspec.inference.base import GenerationProgress, Sampling
from obsspec.inference.scripted import PacedEngine
from obsspec.speculation.runner import SpeculativeEpisode, SpeculativeLoop
from tests.helpers import chat_ids
from tests.speculation.fakes import new_episode
from tests.speculation.test_lossless import semantics
from tests.speculation.test_promotion import SCRIPT, in_background
from tests.speculation.test_state_history import (
    LIMITS,
    SETTINGS,
    RecordingPredictor,
    sandbox,
    scripted_policy,
)

pytestmark = pytest.mark.vllm


@contextlib.asynccontextmanager
async def real_turns_of_other_episodes(engine, prompt: list[int], n: int = 24):
    """`n` episodes' real turns (long prompts: more prefill than one engine step takes), back
    to back at priority 0, so that requests are always waiting. Each prompt is new (its first
    tokens differ), so no prefix cached by an earlier one makes its prefill cheap."""
    long_prompt = (prompt * 100)[:900]
    count = itertools.count()

    async def turns(i: int) -> None:
        while True:
            unique = [i, *divmod(next(count), 1000)]
            await engine.generate([*unique, *long_prompt], Sampling(max_tokens=8), priority=0)

    async with in_background([turns(i) for i in range(n)], settle_s=0.5):  # the queue fills
        yield


async def timed_episode(builder, engine, timeout_s: float):
    """(seconds, trajectory, loop's engine requests); seconds = timeout_s if it ran out."""
    trajectory, context = new_episode(builder, 0)
    loop = SpeculativeLoop(RecordingPredictor(), settings=SETTINGS)
    start = time.monotonic()
    try:
        await asyncio.wait_for(
            play(trajectory, context, sandbox(), engine, builder, LIMITS, loop), timeout_s
        )
    except TimeoutError:
        return timeout_s, None
    return time.monotonic() - start, trajectory


async def test_a_promoted_reply_keeps_real_work_priority_under_load(
    tiny_engine, tiny_model_dir, builder, monkeypatch
):
    def paced():
        return PacedEngine(tiny_engine, scripted_policy(builder.tokenizer, SCRIPT), min_tokens=16)

    _, sequential = await timed_episode(builder, paced(), 60)
    load_prompt = chat_ids(tiny_model_dir, "make test")
    async with real_turns_of_other_episodes(tiny_engine, load_prompt):
        new_s, promoted = await timed_episode(builder, paced(), 60)  # s: only a bound below
    assert promoted is not None, "the episode did not finish under load"
    with monkeypatch.context() as patch:
        patch.setattr(SpeculativeEpisode, "keep_priority", lambda self, node, record: None)
        async with real_turns_of_other_episodes(tiny_engine, load_prompt):
            _, kept_low = await timed_episode(builder, paced(), max(3 * new_s, 5))

    assert semantics(promoted) == semantics(sequential)
    first = promoted.turns[0].speculation
    assert first.matched and first.resubmitted and first.tokens_committed
    if kept_low is not None:  # it finished after all: the same episode, resubmitted nothing
        assert semantics(kept_low) == semantics(sequential)
        assert not kept_low.turns[0].speculation.resubmitted


async def test_a_resubmitted_request_gives_the_sequential_reply(tiny_engine, tiny_model_dir):
    """The engine side of it, with the model's own text: a request queued at priority 1,
    aborted before its first token and asked again at priority 0 (same prompt, seed and
    sampling), replies exactly what the same request gets when asked at priority 0 at once."""
    prompt = chat_ids(tiny_model_dir, "ls -la")
    sampling = Sampling(max_tokens=24, temperature=1.0, seed=5)
    sequential = await tiny_engine.generate(prompt, sampling, priority=0)
    async with real_turns_of_other_episodes(tiny_engine, chat_ids(tiny_model_dir, "make")):
        progress = GenerationProgress()
        queued = asyncio.create_task(
            tiny_engine.generate(prompt, sampling, priority=1, progress=progress)
        )
        await asyncio.sleep(0.3)
        assert progress.tokens == 0  # behind the real turns
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        again = await asyncio.wait_for(tiny_engine.generate(prompt, sampling, priority=0), 60)
    assert again.token_ids == sequential.token_ids and again.text == sequential.text
