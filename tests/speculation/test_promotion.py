"""A speculative reply promoted to real work is resubmitted at priority 0 if it is still queued
(same context, seed and sampling: the same reply), and kept if it has begun."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from obsspec.agent.episode import play
from obsspec.inference.base import Sampling
from obsspec.speculation.runner import SpeculativeEpisode, SpeculativeLoop
from tests.speculation.fakes import new_episode
from tests.speculation.test_lossless import semantics
from tests.speculation.test_state_history import (
    LIMITS,
    SETTINGS,
    RecordingPredictor,
    sandbox,
    scripted_policy,
)

SCRIPT = ["ls", "cat notes.txt"]


@contextlib.asynccontextmanager
async def other_episodes(engine, n: int = 2):
    """`n` other episodes' real turns, back to back at priority 0, so one is always queued."""

    async def turns() -> None:
        while True:
            await engine.generate([1, 2, 3], Sampling(max_tokens=20), priority=0)

    async with in_background([turns() for _ in range(n)]):
        yield


@contextlib.asynccontextmanager
async def in_background(coroutines: list, settle_s: float = 0.0):
    """The coroutines run as tasks (after settle_s) while the block runs; then cancelled."""
    tasks = [asyncio.create_task(coroutine) for coroutine in coroutines]
    await asyncio.sleep(settle_s)
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run(builder, engine, loop=None):
    trajectory, context = new_episode(builder, 0)
    await play(trajectory, context, sandbox(), engine, builder, LIMITS, loop)
    return trajectory


async def test_a_queued_promoted_reply_is_resubmitted_at_priority_0(builder):
    sequential = await run(builder, scripted_policy(builder.tokenizer, SCRIPT))
    engine = scripted_policy(builder.tokenizer, SCRIPT)
    engine.slots = 1  # the other episodes' real turns keep the one slot: speculation waits
    loop = SpeculativeLoop(RecordingPredictor(), settings=SETTINGS)
    async with other_episodes(engine):
        speculative = await asyncio.wait_for(run(builder, engine, loop), timeout=10)

    assert semantics(speculative) == semantics(sequential)
    first = speculative.turns[0].speculation
    assert first.matched and first.resubmitted and first.tokens_committed
    # the kept reply was asked for twice on the same context: as speculation, then as real work
    second_context = list(speculative.prompt_ids) + speculative.turns[0].action_ids
    second_context += speculative.turns[0].observation_ids
    asked = [r for r in engine.requests if r.prompt_ids == second_context]
    assert [r.priority for r in asked] == [1, 0]
    assert asked[0].sampling == asked[1].sampling


async def test_without_resubmission_the_promoted_reply_waits_behind_real_turns(
    builder, monkeypatch
):
    monkeypatch.setattr(SpeculativeEpisode, "keep_priority", lambda self, node, record: None)
    engine = scripted_policy(builder.tokenizer, SCRIPT)
    engine.slots = 1
    loop = SpeculativeLoop(RecordingPredictor(), settings=SETTINGS)
    async with other_episodes(engine):
        with pytest.raises(TimeoutError):  # starved: every freed slot goes to priority 0
            await asyncio.wait_for(run(builder, engine, loop), timeout=1)


async def test_a_promoted_reply_that_has_begun_is_kept(builder):
    engine = scripted_policy(builder.tokenizer, SCRIPT)  # no slots: every request starts at once
    speculative = await run(
        builder, engine, SpeculativeLoop(RecordingPredictor(), settings=SETTINGS)
    )
    first = speculative.turns[0].speculation
    assert first.matched and first.tokens_committed and not first.resubmitted
    prompts = [tuple(r.prompt_ids) for r in engine.requests]
    assert len(prompts) == len(set(prompts))  # nothing was asked twice
    assert sum(r.priority == 0 for r in engine.requests) == 1  # only the first reply
