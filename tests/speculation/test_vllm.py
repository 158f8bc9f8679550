"""The runner on a real vLLM engine: aborts free the engine at once, contexts stay exact.

The policy is a PacedEngine: the fake policy's deterministic replies, each paced by a real
generation on the tiny model (same prompt, seed and priority), so the sequential run is
reproducible and speculation exercises real scheduling and real aborts.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from obsspec.agent.episode import EpisodeLimits, play
from obsspec.inference.base import GenerationProgress, Sampling
from obsspec.inference.scripted import PacedEngine
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings
from tests.speculation.fakes import TablePredictor, fake_policy, new_episode, step_sandbox, truth_of
from tests.speculation.test_lossless import semantics

pytestmark = pytest.mark.vllm

LIMITS = EpisodeLimits(max_turns=5, max_tokens=48, temperature=0.7)


async def test_cancelling_a_request_removes_it_from_the_engine(tiny_engine, builder):
    progress = GenerationProgress()
    sampling = Sampling(max_tokens=400, ignore_eos=True, seed=1)
    prompt = builder.encode("one two three")
    task = asyncio.create_task(
        tiny_engine.generate(prompt, sampling, priority=1, progress=progress)
    )
    while progress.tokens < 5:
        await asyncio.sleep(0.01)
    assert tiny_engine.unfinished_requests() == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    start = time.monotonic()
    while tiny_engine.unfinished_requests() and time.monotonic() - start < 5:
        await asyncio.sleep(0.005)
    assert tiny_engine.unfinished_requests() == 0
    assert 5 <= progress.tokens < 400  # what it got through is known


async def sequential_run(builder, engine, seed):
    trajectory, context = new_episode(builder, seed)
    await play(trajectory, context, step_sandbox(0.3, salt=seed), engine, builder, LIMITS)
    return trajectory


@pytest.mark.parametrize("accuracy", [1.0, 0.0])
async def test_speculation_on_vllm_is_lossless_and_leaves_nothing(tiny_engine, builder, accuracy):
    seed = 7
    engine = PacedEngine(tiny_engine, fake_policy(builder.tokenizer, salt=seed), min_tokens=24)
    sequential = await sequential_run(builder, engine, seed)
    assert sum(t.action == "command" for t in sequential.turns) >= 2
    engine_tasks = asyncio.all_tasks()  # vLLM's own background tasks, and this test

    predictor = TablePredictor(truth_of(sequential), accuracy=accuracy, salt=seed)
    settings = SpeculationSettings(depth=2, breadth=2, gate=GateSettings(mode=GateMode.always))
    spec_engine = PacedEngine(tiny_engine, fake_policy(builder.tokenizer, salt=seed), min_tokens=24)
    speculative, context = new_episode(builder, seed)
    loop = SpeculativeLoop(predictor, settings=settings)
    await play(
        speculative, context, step_sandbox(0.3, salt=seed), spec_engine, builder, LIMITS, loop
    )

    assert semantics(speculative) == semantics(sequential)
    # every committed reply was requested from vLLM on exactly the real context
    asked = {tuple(r.prompt_ids) for r in spec_engine.requests}
    prefix = list(speculative.prompt_ids)
    for turn in speculative.turns:
        assert tuple(prefix) in asked
        prefix += turn.action_ids + turn.observation_ids
    records = [t.speculation for t in speculative.turns if t.action == "command"][:-1]
    if accuracy == 1.0:
        assert any(r.matched and r.tokens_committed and r.overlap_s > 0 for r in records)
    else:
        assert all(r.rollback and not r.matched for r in records)
        assert sum(r.tokens_wasted for r in records) > 0
    assert not any(r.lossless_violation for r in records)
    # nothing outlives the episode, in the engine or in the event loop
    assert tiny_engine.unfinished_requests() == 0
    assert asyncio.all_tasks() <= engine_tasks


async def test_the_world_model_on_vllm_is_scored_apart_from_the_cascade(tiny_engine, builder):
    """LMPredictor on the real engine inside the default cascade: every command the rules did
    not answer, and whose real output did not come first, has the world model asked."""
    from obsspec.speculation.totals import SpeculationTotals
    from obsspec.world_model.cascade import default_cascade
    from obsspec.world_model.lm import LMPredictor
    from obsspec.world_model.prompt import WorldModelPrompt

    seed = 7
    lm = LMPredictor(tiny_engine, WorldModelPrompt(builder), max_tokens=8)
    settings = SpeculationSettings(depth=1, breadth=2, gate=GateSettings(mode=GateMode.always))
    engine = PacedEngine(tiny_engine, fake_policy(builder.tokenizer, salt=seed), min_tokens=8)
    trajectory, context = new_episode(builder, seed)
    loop = SpeculativeLoop(default_cascade(lm), settings=settings)
    await play(trajectory, context, step_sandbox(1.0, salt=seed), engine, builder, LIMITS, loop)
    records = [t.speculation for t in trajectory.turns if t.action == "command"]
    answered = [r for r in records if r.attempted and not r.exec_won and not r.failed]
    for record in answered:
        assert record.wm_asked == (not record.source.startswith(("rules", "cache")))
        assert record.wm_guesses <= 2 and record.wm_matched <= record.wm_matched_any
    totals = SpeculationTotals.of_turns(trajectory.turns)
    assert totals.wm_asked >= 1 and totals.summary()["match_rate_wm"] is not None
    assert tiny_engine.unfinished_requests() == 0
