"""Faults while speculation is in flight: nothing leaks, the episode ends as it should."""

from __future__ import annotations

import asyncio

from obsspec.agent.episode import EpisodeLimits, play
from obsspec.environments.fake_sandbox import FakeSandbox
from obsspec.errors import EngineError
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings
from tests.speculation.fakes import (
    TablePredictor,
    fake_policy,
    new_episode,
    step_outputs,
    step_sandbox,
    unit,
)

LIMITS = EpisodeLimits(max_turns=6, max_tokens=64, temperature=0.7)


def always(**settings) -> SpeculationSettings:
    return SpeculationSettings(gate=GateSettings(mode=GateMode.always), **settings)


def command_records(trajectory):
    return [t.speculation for t in trajectory.turns if t.action == "command"]


async def play_speculative(builder, predictor, sandbox, engine, settings, seed=3):
    before = asyncio.all_tasks()  # e.g. a vLLM engine's own tasks, when the session has one
    trajectory, context = new_episode(builder, seed)
    loop = SpeculativeLoop(predictor, settings=settings)
    await play(trajectory, context, sandbox, engine, builder, LIMITS, loop)
    assert asyncio.all_tasks() <= before  # no task outlives the episode
    assert engine.unfinished_requests() == 0
    return trajectory


async def test_a_predictor_that_raises_costs_only_the_speculation(builder):
    predictor = TablePredictor({}, fail_rate=1.0, failure="raise")
    engine = fake_policy(builder.tokenizer)
    trajectory = await play_speculative(
        builder, predictor, step_sandbox(0.01), engine, always(), seed=5
    )
    records = command_records(trajectory)
    assert records and all(r.failed and r.attempted and not r.matched for r in records[:-1])
    assert "RuntimeError: the predictor broke" in records[0].error
    assert trajectory.error is None


async def test_a_predictor_that_hangs_times_out(builder):
    predictor = TablePredictor({}, fail_rate=1.0, failure="hang")
    engine = fake_policy(builder.tokenizer)
    sandbox = step_sandbox(0.2)  # commands outlast the timeout: the timeout is what ends it
    settings = always(predict_timeout_s=0.05)
    trajectory = await play_speculative(builder, predictor, sandbox, engine, settings, seed=5)
    records = command_records(trajectory)
    assert records[0].failed and records[0].error == "no prediction within 0.05 s"


async def test_a_late_prediction_loses_the_race(builder):
    predictor = TablePredictor({}, delay_s=0.5)
    engine = fake_policy(builder.tokenizer)
    trajectory = await play_speculative(builder, predictor, step_sandbox(0.01), engine, always())
    records = command_records(trajectory)
    assert records and all(r.exec_won and not r.failed for r in records[:-1])


async def test_the_sandbox_dying_mid_command_cancels_everything(builder):
    predictor = TablePredictor({}, accuracy=0.0)  # wrong guesses: branches are generating
    engine = fake_policy(builder.tokenizer, seconds_per_token=0.01)
    sandbox = step_sandbox(0.1, fail_on=1)
    trajectory = await play_speculative(builder, predictor, sandbox, engine, always(breadth=3))
    assert trajectory.finish_reason == "infra_error" and trajectory.error_type == "SandboxError"
    assert trajectory.error_kind == "infra"
    assert sum(r.priority > 0 for r in engine.requests) > 0  # speculation was in flight


class DyingEngine:
    """A policy engine that fails every request after the first `alive` ones."""

    def __init__(self, inner, alive: int) -> None:
        self.inner, self.alive, self.calls = inner, alive, 0

    async def generate(self, prompt_ids, sampling, **kwargs):
        self.calls += 1
        if self.calls > self.alive:
            await asyncio.sleep(0.01)
            raise EngineError("the engine died")
        return await self.inner.generate(prompt_ids, sampling, **kwargs)

    def stats(self):
        return self.inner.stats()

    def unfinished_requests(self) -> int:
        return self.inner.unfinished_requests()


async def test_a_dead_engine_ends_the_episode_with_a_typed_error(builder):
    predictor = TablePredictor({}, accuracy=0.0)
    engine = DyingEngine(fake_policy(builder.tokenizer, seconds_per_token=0.001), alive=3)
    trajectory = await play_speculative(builder, predictor, step_sandbox(0.05), engine, always())
    assert trajectory.finish_reason == "infra_error" and trajectory.error_type == "EngineError"


async def test_the_deadline_cancels_speculation_too(builder):
    predictor = TablePredictor({}, accuracy=0.0)
    engine = fake_policy(builder.tokenizer, seconds_per_token=0.01)
    trajectory, context = new_episode(builder, 3)
    loop = SpeculativeLoop(predictor, settings=always(depth=3, breadth=2))
    before = asyncio.all_tasks()
    try:
        async with asyncio.timeout(0.3):
            await play(trajectory, context, step_sandbox(0.2), engine, builder, LIMITS, loop)
    except TimeoutError:
        pass
    assert asyncio.all_tasks() <= before
    assert engine.unfinished_requests() == 0


async def test_discarded_branches_are_counted(builder):
    """Wrong guesses: every command rolls back, and the tokens generated on the guesses are
    charged as waste (aborted replies as far as they got)."""
    predictor = TablePredictor({}, accuracy=0.0)
    engine = fake_policy(builder.tokenizer, seconds_per_token=0.001)
    sandbox = step_sandbox(0.05)
    trajectory = await play_speculative(builder, predictor, sandbox, engine, always(breadth=2))
    records = command_records(trajectory)[:-1]
    assert records and all(r.rollback and not r.matched and r.predictions == 2 for r in records)
    assert all(r.tokens_wasted > 0 and r.tokens_committed == 0 for r in records)


class WeightSyncSandbox(FakeSandbox):
    """step_sandbox(exec_s) that swaps the policy's weights halfway through the first command
    (as RL does between steps), after the speculative reply on the guess was generated."""

    def __init__(self, engine, exec_s: float) -> None:
        super().__init__(
            step_outputs(), exec_s=lambda command, n: exec_s * (0.5 + unit(0, command, n))
        )
        self.engine, self.swap_after_s = engine, exec_s / 2

    async def run(self, command: str, timeout_s: float = 60.0):
        if not self.commands:
            await asyncio.sleep(self.swap_after_s)
            await self.engine.load_weights(None, 1)
        return await super().run(command, timeout_s)


async def test_a_reply_begun_before_a_weight_update_is_not_kept(builder):
    from tests.speculation.fakes import truth_of

    engine = fake_policy(builder.tokenizer)
    sequential, context = new_episode(builder, 3)
    await play(sequential, context, step_sandbox(0.05), engine, builder, LIMITS)
    spec_engine = fake_policy(builder.tokenizer)
    predictor = TablePredictor(truth_of(sequential))
    trajectory = await play_speculative(
        builder, predictor, WeightSyncSandbox(spec_engine, 0.1), spec_engine, always()
    )
    turns = trajectory.turns
    assert len(turns) >= 3 and turns[0].action == "command"
    assert turns[0].speculation.matched  # the guess was right...
    assert turns[1].weight_version == 1  # ...but the reply on it was made again, new weights
    assert [t.action_ids for t in turns] == [t.action_ids for t in sequential.turns]
    second_context = list(trajectory.prompt_ids) + turns[0].action_ids + turns[0].observation_ids
    asked = [r.priority for r in spec_engine.requests if r.prompt_ids == second_context]
    assert asked == [1, 0]  # speculatively, then as real work
