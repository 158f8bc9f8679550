"""Lossless by test: the speculative loop commits exactly what the sequential loop would have.

A deterministic policy (its reply a function of the context), sandbox (its output a function
of the command and of how many commands ran before) and predictor make two runs of one
schedule comparable exactly; hypothesis draws the schedules: seeds, depth and breadth 1-3,
predictors right or wrong, fast or slow, failing or hanging, every gate mode.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from obsspec.agent.episode import EpisodeLimits, play, turn_seed
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.runner import SpeculativeLoop, exact_match
from obsspec.speculation.settings import SpeculationSettings
from obsspec.trajectory import Trajectory
from tests.speculation.fakes import TablePredictor, fake_policy, new_episode, step_sandbox, truth_of

TURN_FIELDS = (
    "index",
    "reply",
    "action",
    "command",
    "observation",
    "action_ids",
    "action_logprobs",
    "observation_ids",
    "exit_code",
    "timed_out",
    "generation_finish",
)


@dataclass(frozen=True)
class Schedule:
    seed: int
    depth: int = 1
    breadth: int = 1
    gate: GateMode = GateMode.always
    accuracy: float = 1.0
    predict_delay_s: float = 0.0
    exec_s: float = 0.02
    seconds_per_token: float = 0.0005
    fail_rate: float = 0.0
    failure: str = "raise"
    max_turns: int = 6
    max_tokens: int = 64


schedules = st.builds(
    Schedule,
    seed=st.integers(0, 10**6),
    depth=st.integers(1, 3),
    breadth=st.integers(1, 3),
    gate=st.sampled_from(list(GateMode)),
    accuracy=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    predict_delay_s=st.sampled_from([0.0, 0.003, 0.05]),
    exec_s=st.sampled_from([0.0, 0.01, 0.03]),
    seconds_per_token=st.sampled_from([0.0, 0.0002, 0.001]),
    fail_rate=st.sampled_from([0.0, 0.3]),
    failure=st.sampled_from(["raise", "hang"]),
    max_turns=st.integers(1, 8),
    max_tokens=st.sampled_from([16, 64]),
)


def semantics(trajectory: Trajectory) -> dict:
    """Everything a trainer reads from a trajectory (timings and speculation records aside)."""
    return {
        "context": trajectory.context_ids,
        "mask": trajectory.mask,
        "logprobs": trajectory.logprobs,
        "finish": trajectory.finish_reason,
        "error": trajectory.error_type,
        "turns": [{f: getattr(t, f) for f in TURN_FIELDS} for t in trajectory.turns],
    }


async def run_pair(builder, s: Schedule, match=exact_match):
    limits = EpisodeLimits(max_turns=s.max_turns, max_tokens=s.max_tokens, temperature=0.7)
    sequential, context = new_episode(builder, s.seed)
    sandbox = step_sandbox(s.exec_s, salt=s.seed)
    engine = fake_policy(builder.tokenizer, seconds_per_token=s.seconds_per_token, salt=s.seed)
    await play(sequential, context, sandbox, engine, builder, limits)

    predictor = TablePredictor(
        truth_of(sequential),
        accuracy=s.accuracy,
        delay_s=s.predict_delay_s,
        fail_rate=s.fail_rate,
        failure=s.failure,
        salt=s.seed,
    )
    settings_ = SpeculationSettings(
        depth=s.depth, breadth=s.breadth, gate=GateSettings(mode=s.gate), predict_timeout_s=0.2
    )
    loop = SpeculativeLoop(predictor, settings=settings_, match=match)
    speculative, context = new_episode(builder, s.seed)
    spec_sandbox = step_sandbox(s.exec_s, salt=s.seed)
    spec_engine = fake_policy(builder.tokenizer, seconds_per_token=s.seconds_per_token, salt=s.seed)
    await play(speculative, context, spec_sandbox, spec_engine, builder, limits, loop)
    return (sequential, sandbox), (speculative, spec_sandbox, spec_engine, predictor)


async def check_lossless(builder, s: Schedule, match=exact_match) -> Trajectory:
    before = asyncio.all_tasks()  # e.g. a vLLM engine's own tasks, when the session has one
    (sequential, sandbox), (speculative, spec_sandbox, engine, _) = await run_pair(
        builder, s, match
    )
    assert semantics(speculative) == semantics(sequential)
    assert spec_sandbox.commands == sandbox.commands  # only real turns ran commands, in order
    # Every committed reply was asked for on exactly the real context, with the turn's seed.
    asked = {(tuple(r.prompt_ids), r.sampling.seed) for r in engine.requests}
    prefix = list(speculative.prompt_ids)
    for turn in speculative.turns:
        assert (tuple(prefix), turn_seed(s.seed, turn.index)) in asked
        prefix += turn.action_ids + turn.observation_ids
    assert not any(t.speculation and t.speculation.lossless_violation for t in speculative.turns)
    # Replies are requested at the level of guesses they rest on, never deeper than depth.
    assert max(r.priority for r in engine.requests) <= s.depth
    # Nothing outlives the episode: no request in the engine, no task but this one.
    assert engine.unfinished_requests() == 0
    assert asyncio.all_tasks() <= before
    return speculative


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schedule=schedules)
def test_speculative_equals_sequential(builder, schedule):
    asyncio.run(check_lossless(builder, schedule))


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("breadth", [1, 3])
async def test_a_perfect_fast_predictor_is_used(builder, depth, breadth):
    """Not vacuous: with a right, instant predictor the kept turns really were speculative."""
    hits = 0
    for seed in range(4):
        schedule = Schedule(seed, depth, breadth, exec_s=0.03, max_turns=8)
        speculative = await check_lossless(builder, schedule)
        turns = [t for t in speculative.turns if t.action == "command"]
        hits += sum(t.speculation.matched and t.speculation.tokens_committed > 0 for t in turns)
        # gate=always: every command with a turn after it was predicted
        assert all(t.speculation.attempted for t in turns if t.index + 1 < schedule.max_turns)
    assert hits >= 8


async def test_a_matcher_that_ignores_the_exit_code_breaks_losslessness(builder):
    """The tests above can fail: accept near misses (wrong exit code) and they do."""

    def careless(guess: str, real: str) -> bool:
        return guess.rpartition("\n")[0] == real.rpartition("\n")[0]

    failures = 0
    for seed in range(6):
        schedule = Schedule(seed, breadth=2, accuracy=0.0, exec_s=0.02, max_turns=8)
        try:
            await check_lossless(builder, schedule, match=careless)
        except AssertionError:
            failures += 1
    assert failures >= 3
