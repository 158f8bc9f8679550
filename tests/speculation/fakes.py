"""Deterministic fakes for the turn loops: a policy, a sandbox (the package's FakeSandbox on
step_outputs) and a predictor whose answers are functions of what they are asked (so two runs
of one schedule can be compared exactly).

    engine = fake_policy(tokenizer, seconds_per_token=0.001)
    sandbox = step_sandbox(exec_s=0.02)
    predictor = TablePredictor(truth, accuracy=0.7, delay_s=0.005)
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

from obsspec.agent.context import ChatContextBuilder, TokenContext
from obsspec.agent.protocol import SYSTEM_PROMPTS, Action, ActionFormat, format_action
from obsspec.environments.fake_sandbox import FakeSandbox
from obsspec.inference.scripted import ScriptedEngine
from obsspec.speculation.predictor import Prediction, SpeculationContext
from obsspec.trajectory import Trajectory
from obsspec.types import ExecResult, render_observation

COMMANDS = ["ls", "echo hi", "cat notes.txt", "date", "make", "git status", "grep -r TODO ."]


def unit(*parts: object) -> float:
    """A number in [0, 1) fixed by its arguments."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def fake_policy(
    tokenizer, *, seconds_per_token: float = 0.0, salt: int = 0, commands: list[str] = COMMANDS
) -> ScriptedEngine:
    """Replies are a function of the whole context: mostly commands, sometimes done, prose
    (an invalid action) or a reply too long for the token limit."""

    def reply(context: str) -> str:
        u = unit(salt, context)
        if u < 0.08:
            return format_action(Action("done"), ActionFormat.markdown)
        if u < 0.16:
            return "Let me think about what to do next."
        if u < 0.2:
            return "```bash\necho " + "very long output " * 40 + "\n```"
        command = commands[int(unit(salt, context, "c") * len(commands))]
        return format_action(Action("command", command), ActionFormat.markdown)

    return ScriptedEngine(tokenizer, reply, seconds_per_token=seconds_per_token)


def step_outputs(salt: int = 0) -> Callable[[str, int], ExecResult]:
    """A command's result as a function of the command and of how many commands ran before it,
    so that running a command twice, early or out of order shows up in the observations."""

    def output(command: str, n: int) -> ExecResult:
        u = unit(salt, command, n, "out")
        stdout = "" if u < 0.2 else f"{command}: step {n} value {int(u * 7)}"
        stderr = "warning: something" if u > 0.9 else ""
        return ExecResult(stdout, stderr, int(u * 10) % 3, 0.0)

    return output


def step_sandbox(exec_s: float = 0.0, *, salt: int = 0, fail_on: int | None = None) -> FakeSandbox:
    """The package's FakeSandbox on step_outputs, each command taking between 0.5 and 1.5
    times exec_s (a function of the command and its step)."""
    return FakeSandbox(
        step_outputs(salt),
        exec_s=lambda command, n: exec_s * (0.5 + unit(salt, command, n)),
        fail_on=fail_on,
    )


def near_miss(observation: str) -> str:
    """The same text with a different exit code: a guess only a careless matcher accepts."""
    body, _, status = observation.rpartition("\n")
    return f"{body}\n[exit code: {99 if status != '[exit code: 99]' else 98}]"


class TablePredictor:
    """Knows the true observations of one run (context, command -> text) and answers them
    with probability `accuracy`; otherwise near misses and plain wrong guesses. It may be slow
    (`delay_s`), raise, or hang on a fraction of calls."""

    def __init__(
        self,
        truth: dict[tuple[str, str], str],
        *,
        accuracy: float = 1.0,
        delay_s: float = 0.0,
        fail_rate: float = 0.0,
        failure: str = "raise",
        confidence: float = 0.9,
        salt: int = 0,
    ) -> None:
        self.truth = truth
        self.accuracy = accuracy
        self.delay_s = delay_s
        self.fail_rate = fail_rate
        self.failure = failure
        self.confidence = confidence
        self.salt = salt
        self.calls = 0
        self.observed: list[tuple[SpeculationContext, str, str]] = []

    async def predict(self, context: SpeculationContext, command: str, n: int = 1):
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        if unit(self.salt, context.key, "fail") < self.fail_rate:
            if self.failure == "hang":
                await asyncio.sleep(3600)
            raise RuntimeError("the predictor broke")
        true = self.truth.get((context.key, command))
        guess = true or f"{command}: a guess\n[exit code: 0]"
        wrong = [near_miss(guess), "(no output)\n[exit code: 0]", near_miss(guess)]
        wrong = [text for text in wrong if text != true]  # wrong guesses are never right
        right = true is not None and unit(self.salt, context.key, "right") < self.accuracy
        texts = [*wrong[: n - 1], guess] if right else wrong[:n]
        return [Prediction(text, "table", self.confidence, self.delay_s) for text in texts]

    def observe(self, context: SpeculationContext, command: str, observation: str) -> None:
        self.observed.append((context, command, observation))


def truth_of(trajectory: Trajectory) -> dict[tuple[str, str], str]:
    """(context key, command) -> real observation, for every command turn of a trajectory."""
    ids = list(trajectory.prompt_ids)
    table = {}
    for turn in trajectory.turns:
        ids += turn.action_ids
        if turn.action == "command":
            table[(SpeculationContext(trajectory.task_hash, tuple(ids)).key, turn.command)] = (
                turn.observation
            )
        ids += turn.observation_ids
    return table


def new_episode(builder: ChatContextBuilder, seed: int) -> tuple[Trajectory, TokenContext]:
    prompt = builder.prompt_ids(SYSTEM_PROMPTS[ActionFormat.markdown], f"Task:\nepisode {seed}")
    context = TokenContext()
    context.extend(prompt, generated=False)
    return Trajectory("fake-task", "hash", "fake", seed, prompt), context


def render(result: ExecResult) -> str:
    return render_observation(result)
