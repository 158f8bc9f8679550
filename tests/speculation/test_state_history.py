"""The runner gives predictors the commands run before each one, and a GRPO group of episodes
that run the same commands with different replies shares answers through the state cache."""

from __future__ import annotations

import asyncio

from obsspec.agent.episode import EpisodeLimits, play
from obsspec.agent.protocol import Action, ActionFormat, format_action
from obsspec.environments.fake_sandbox import FakeSandbox
from obsspec.inference.scripted import ScriptedEngine
from obsspec.speculation.gate import GateMode, GateSettings
from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.speculation.runner import SpeculativeLoop
from obsspec.speculation.settings import SpeculationSettings
from obsspec.speculation.totals import SpeculationTotals
from obsspec.types import ExecResult, render_observation
from obsspec.world_model.cache import CachePredictor
from obsspec.world_model.cascade import CascadePredictor, default_cascade
from obsspec.world_model.state_cache import StateCachePredictor
from tests.speculation.fakes import new_episode

TIMEOUT_S = 0.05
OUTPUTS = {
    "ls": "notes.txt Makefile",
    "cat notes.txt": "remember the milk",
    "make": ExecResult("", "make: *** No targets.  Stop.", 2, 0.0),
    "ls -a": ". .. notes.txt Makefile",
}
SLOW = "sleep 5"  # past TIMEOUT_S: killed at an unknown point
SETTINGS = SpeculationSettings(depth=2, gate=GateSettings(mode=GateMode.always))
LIMITS = EpisodeLimits(max_turns=10, max_tokens=64, command_timeout_s=TIMEOUT_S)


def scripted_policy(
    tokenizer, script: list[str | None], salt: int = 0, seconds_per_token: float = 0.001
) -> ScriptedEngine:
    """Reply k runs script[k] (None: prose, an invalid action; past the end: done), whatever
    the observations said; `salt` changes the text around the command (and its length, so
    siblings played together are staggered), never the command."""

    def reply(context: str) -> str:
        k = context.count("<|im_start|>assistant") - 1  # replies already in the context
        if k >= len(script):
            return format_action(Action("done"), ActionFormat.markdown)
        if script[k] is None:
            return f"Episode {salt} is thinking about step {k}."
        command = format_action(Action("command", script[k]), ActionFormat.markdown)
        return f"Sibling {salt}, step {k}: let me look.{' Hmm.' * 5 * salt}\n{command}"

    return ScriptedEngine(tokenizer, reply, seconds_per_token=seconds_per_token)


def sandbox(exec_s: float = 0.03) -> FakeSandbox:
    return FakeSandbox(OUTPUTS, exec_s=lambda command, n: 0.2 if command == SLOW else exec_s)


def truth(command: str) -> str:
    if command == SLOW:
        return render_observation(
            ExecResult("", "", None, TIMEOUT_S, timed_out=True, timeout_s=TIMEOUT_S)
        )
    output = OUTPUTS[command]
    return render_observation(
        output if isinstance(output, ExecResult) else ExecResult(output, "", 0, 0)
    )


class RecordingPredictor:
    """Guesses every output right and records the history it was given."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[str, ...] | None]] = []
        self.observed: list[tuple[str, tuple[str, ...] | None]] = []

    async def predict(self, context: SpeculationContext, command: str, n: int = 1):
        self.asked.append((command, context.commands))
        return [Prediction(truth(command), "table", 0.9)]

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        self.observed.append((command, context.commands))


async def test_every_guess_is_asked_with_the_commands_that_run_before_it(builder):
    script = ["ls", None, "cat notes.txt", "make", SLOW, "ls -a"]
    before = {
        "ls": (),
        "cat notes.txt": ("ls",),
        "make": ("ls", "cat notes.txt"),
        SLOW: ("ls", "cat notes.txt", "make"),
        "ls -a": None,  # after a command that timed out the state is unknown
    }
    predictor = RecordingPredictor()
    trajectory, context = new_episode(builder, 0)
    engine = scripted_policy(builder.tokenizer, script)
    await play(
        trajectory,
        context,
        sandbox(),
        engine,
        builder,
        LIMITS,
        SpeculativeLoop(predictor, settings=SETTINGS),
    )

    assert [t.command for t in trajectory.turns if t.action == "command"] == list(before)
    assert set(predictor.asked) == set(before.items())
    assert set(predictor.observed) == set(before.items())
    records = [t.speculation for t in trajectory.turns if t.action == "command"]
    # some commands were asked about on a guessed context (their history rests on guesses)
    assert any(r.attempted and r.level == 1 for r in records)
    assert all(r.matched for r in records[:-1])


async def run_group(builder, predictor, sources: set, size=4) -> list[SpeculationTotals]:
    """A GRPO group played one after the other on one worker (one predictor)."""
    loop = SpeculativeLoop(predictor, settings=SETTINGS)
    script = ["ls", "cat notes.txt", None, "make", "ls -a"]
    totals = []
    for salt in range(size):
        trajectory, context = new_episode(builder, salt)
        engine = scripted_policy(builder.tokenizer, script, salt=salt)
        await play(trajectory, context, sandbox(), engine, builder, LIMITS, loop)
        assert trajectory.finish_reason == "done"
        totals.append(SpeculationTotals.of_turns(trajectory.turns))
        sources.update(
            t.speculation.source
            for t in trajectory.turns
            if t.speculation and t.speculation.matched
        )
    return totals


async def test_siblings_share_answers_through_the_state_cache_not_the_context_cache(builder):
    sources = set()
    state = await run_group(builder, default_cascade(), sources)
    assert [t.command_turns for t in state] == [4] * 4
    assert state[0].matched == 0  # nothing seen yet
    assert [t.matched for t in state[1:]] == [4, 4, 4]  # every command, in every sibling
    assert sources == {"state"}
    context_cache = await run_group(builder, CascadePredictor([CachePredictor()]), set())
    assert sum(t.matched for t in context_cache) == 0  # their replies, so contexts, differ


async def play_together(builder, predictor, size: int = 4) -> list[SpeculationTotals]:
    """A GRPO group played at once (an RL step), each command slower than the stagger; depth
    1, so each reply asks about its command once it is real work."""
    settings = SETTINGS.model_copy(update={"depth": 1})
    loop = SpeculativeLoop(predictor, settings=settings)
    limits = LIMITS.model_copy(update={"command_timeout_s": 5})
    script = ["ls", "cat notes.txt", "make", "ls -a"]

    async def one(salt: int) -> SpeculationTotals:
        trajectory, context = new_episode(builder, salt)
        # replies of about 0.1 s, 0.05 s longer per sibling; commands of 0.3 s
        engine = scripted_policy(builder.tokenizer, script, salt=salt, seconds_per_token=0.005)
        await play(trajectory, context, sandbox(exec_s=0.3), engine, builder, limits, loop)
        assert trajectory.finish_reason == "done"
        return SpeculationTotals.of_turns(trajectory.turns)

    return list(await asyncio.gather(*(one(salt) for salt in range(size))))


async def test_siblings_played_together_wait_for_the_sibling_running_the_command(builder):
    waiting = await play_together(builder, StateCachePredictor(wait_s=5))
    # sibling 0 runs each command first; the others get its output before their own ends
    assert [t.matched for t in waiting] == [0, 4, 4, 4]
    assert sum(t.exec_won for t in waiting) == 0
    not_waiting = await play_together(builder, StateCachePredictor(wait_s=0))
    # without waiting, a sibling asking while another runs the command gets nothing (later
    # turns hit once the lag, growing by sibling, exceeds a command's time)
    assert sum(t.matched for t in not_waiting) < 12
