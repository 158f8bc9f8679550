"""The world model scored apart from the cascade: per command turn, whether the LM was asked,
its guesses, and whether its first (or any) guess was the real observation."""

from __future__ import annotations

from obsspec.agent.episode import EpisodeLimits, play
from obsspec.inference.scripted import ScriptedEngine
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.predictor import Prediction
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings
from obsspec.speculation.totals import SpeculationTotals
from obsspec.world_model.cascade import CascadePredictor
from tests.speculation.fakes import fake_policy, near_miss, new_episode, step_sandbox, truth_of

COMMANDS = ["ls", "echo hi", "cat notes.txt", "date", "make"]
CACHED = {"ls", "echo hi"}  # the cache knows these: the world model is never asked
GREEDY_RIGHT = {"cat notes.txt"}  # the world model's first guess is right; else its second
LIMITS = EpisodeLimits(max_turns=8, max_tokens=64, temperature=0.7)


class Cache:
    """Answers the CACHED commands, rightly and confidently."""

    def __init__(self, truth: dict) -> None:
        self.truth = truth

    async def predict(self, context, command, n=1):
        known = self.truth.get((context.key, command))
        return [Prediction(known, "cache", 0.95)] if command in CACHED and known else []

    def observe(self, context, command, observation):
        pass


class WorldModel:
    """Two guesses, one right: first for GREEDY_RIGHT commands, second for the others."""

    source = "lm"

    def __init__(self, truth: dict) -> None:
        self.truth = truth
        self.asked: list[str] = []

    async def predict(self, context, command, n=1):
        self.asked.append(command)
        right = self.truth[(context.key, command)]
        texts = [right, near_miss(right)]
        if command not in GREEDY_RIGHT:
            texts.reverse()
        return [Prediction(text, "lm", 0.9, tokens=5) for text in texts[:n]]

    def observe(self, context, command, observation):
        pass


async def speculative_episode(builder, seed: int):
    sequential, context = new_episode(builder, seed)
    engine = fake_policy(builder.tokenizer, salt=seed, commands=COMMANDS)
    await play(sequential, context, step_sandbox(0.03, salt=seed), engine, builder, LIMITS)
    truth = truth_of(sequential)
    world_model = WorldModel(truth)
    cascade = CascadePredictor([Cache(truth), world_model], threshold=0.5)
    settings = SpeculationSettings(depth=1, breadth=2, gate=GateSettings(mode=GateMode.always))
    trajectory, context = new_episode(builder, seed)
    engine = fake_policy(builder.tokenizer, salt=seed, commands=COMMANDS)
    loop = SpeculativeLoop(cascade, settings=settings)
    await play(trajectory, context, step_sandbox(0.03, salt=seed), engine, builder, LIMITS, loop)
    return trajectory, world_model


async def test_the_record_scores_the_world_model_apart_from_the_cache(builder):
    seen = {"cache": 0, "greedy right": 0, "second right": 0}
    run = SpeculationTotals()
    for seed in range(6):
        trajectory, world_model = await speculative_episode(builder, seed)
        run += SpeculationTotals.of_turns(trajectory.turns)
        answered = [
            t
            for t in trajectory.turns
            if t.action == "command" and t.speculation.attempted and not t.speculation.exec_won
        ]
        assert len(world_model.asked) >= sum(t.command not in CACHED for t in answered)
        for turn in answered:
            record = turn.speculation
            assert record.matched  # one of the two guesses was always right
            if turn.command in CACHED:
                assert record.source == "cache" and not record.wm_asked
                assert (record.wm_guesses, record.wm_matched, record.wm_matched_any) == (0, 0, 0)
                seen["cache"] += 1
            else:
                assert record.source == "lm" and record.wm_asked and record.wm_guesses == 2
                assert record.wm_matched_any and record.wm_tokens == 10
                assert record.wm_matched == (turn.command in GREEDY_RIGHT)
                seen["greedy right" if record.wm_matched else "second right"] += 1
    assert min(seen.values()) >= 2, seen  # every case happened, more than once
    rates = run.summary()
    lm_turns = seen["greedy right"] + seen["second right"]
    assert run.wm_asked == lm_turns  # the cache's answers are not in the denominator
    assert rates["match_rate_wm"] == round(seen["greedy right"] / lm_turns, 4)
    assert rates["match_rate_wm_any"] == 1.0
    assert rates["match_rate_attempted"] == round(run.matched / run.attempted, 4)


NO_OUTPUT = "(no output)\n[exit code: 0]"


async def test_the_default_cascade_with_the_lm_predictor_fills_the_record(builder):
    """The real cascade (state cache, rules, repeats, LMPredictor on a scripted engine that
    always answers NO_OUTPUT): the rules answer `echo hi`, repeats a command run earlier in
    the episode while its family has not proved them wrong, the world model the others."""
    from obsspec.world_model.cascade import default_cascade
    from obsspec.world_model.lm import LMPredictor
    from obsspec.world_model.prompt import WorldModelPrompt

    wm_engine = ScriptedEngine(builder.tokenizer, lambda _context: NO_OUTPUT, logprob=-0.01)
    settings = SpeculationSettings(depth=1, breadth=2, gate=GateSettings(mode=GateMode.always))
    counts = {"rules": 0, "repeat": 0, "lm": 0}
    for seed in range(6):
        trajectory, context = new_episode(builder, seed)
        engine = fake_policy(builder.tokenizer, salt=seed, commands=COMMANDS)
        # a new cascade each episode: the state cache would answer the commands seen before
        predictor = default_cascade(LMPredictor(wm_engine, WorldModelPrompt(builder)))
        loop = SpeculativeLoop(predictor, settings=settings)
        sandbox = step_sandbox(0.03, salt=seed)
        await play(trajectory, context, sandbox, engine, builder, LIMITS, loop)
        for turn in trajectory.turns:
            record = turn.speculation
            if turn.action != "command" or not record.attempted or record.exec_won:
                continue
            if turn.command == "echo hi":
                assert record.source == "rules/echo" and not record.wm_asked
                counts["rules"] += 1
                continue
            if record.source == "repeat":
                assert not record.wm_asked
                counts["repeat"] += 1
                continue
            assert record.source == "lm" and record.wm_asked and record.wm_guesses == 1
            assert record.wm_matched == record.matched == (turn.observation == NO_OUTPUT)
            assert record.wm_matched_any == record.wm_matched and record.wm_tokens > 0
            counts["lm"] += 1
    assert min(counts.values()) >= 2, counts
