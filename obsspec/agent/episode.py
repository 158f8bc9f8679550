"""The sequential episode: generate, parse, execute, observe, repeat; then verify.

This is the baseline that speculation must beat and reproduce exactly. It reads top to bottom:

    acquire a sandbox (counts toward the deadline)
    context = prompt ids
    each turn: generate on the exact context -> parse the reply -> run the command (or send the
               fixed corrective, or stop on done) -> append the observation's ids
    verify (unless the infrastructure failed), release the sandbox

Episode-ending events are exceptions caught in one place. Infrastructure failures (sandbox,
engine) end the episode with error_kind "infra" (retryable, masked from training); a verifier
that gives no usable reward ends it with error_kind "task" (the task is broken: not retried,
not data); running out of turns, time or context are outcomes of the policy and stay data.
So is writing past the sandbox's disk limit (finish reason `disk_limit`, error_kind "model"):
the sandbox was stopped, so the verifier does not run, and the reward is 0 (environments/
disk_limit.py).

The turn loop is a parameter: the speculative runner (obsspec.speculation) passes its own,
which builds turns with the same helpers below, so both produce the same trajectories.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from obsspec.agent.context import ChatContextBuilder, TokenContext
from obsspec.agent.protocol import (
    CORRECTIVE_OBSERVATIONS,
    SYSTEM_PROMPTS,
    Action,
    ActionFormat,
    observation_role,
    parse_action,
    task_prompt,
)
from obsspec.config import StrictModel
from obsspec.environments.errors import DiskLimitExceeded
from obsspec.environments.sandbox_protocol import Sandbox, SandboxProvider
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.verifier import verify
from obsspec.errors import ContextLengthError, ObsspecError
from obsspec.inference.base import Engine, Generation, Sampling
from obsspec.trajectory import Trajectory, Turn
from obsspec.types import ExecResult, render_observation


class EpisodeLimits(StrictModel):
    max_turns: int = Field(default=30, ge=1, description="Turns before the episode stops.")
    max_tokens: int = Field(default=512, ge=1, description="Tokens per policy reply.")
    command_timeout_s: float = Field(default=60, gt=0, description="Seconds per command.")
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        description="Whole episode, sandbox start included [default: the task's agent timeout].",
    )
    temperature: float = Field(default=1.0, ge=0, description="Policy sampling temperature.")
    action_format: ActionFormat = Field(default=ActionFormat.markdown)
    observation_max_chars: int = Field(default=10_000, ge=100)
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra variables for the policy's chat template wherever its context is "
        "rendered, e.g. {enable_thinking = false} for Qwen3's non-thinking mode; each must "
        "change the rendering (an ignored one is an error). Part of a run's identity.",
    )

    @model_serializer(mode="wrap")
    def _omit_no_kwargs(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without kwargs, dumps (run identities among them) stay as they were before the
        setting existed, so that older runs resume."""
        data = handler(self)
        if not self.chat_template_kwargs:
            data.pop("chat_template_kwargs", None)
        return data


def context_builder(tokenizer, limits: EpisodeLimits) -> ChatContextBuilder:
    """The policy's context builder under limits: the observation role of its action format,
    its chat-template kwargs."""
    return ChatContextBuilder(
        tokenizer, observation_role(limits.action_format), limits.chat_template_kwargs
    )


class EpisodeEnd(Exception):
    """Raised inside the turn loop to end the episode with a reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def turn_seed(seed: int, turn: int) -> int:
    """Each turn's sampling seed: reproducible, distinct per turn and per episode seed."""
    return (seed * 1_000_003 + turn) % (2**31)


TurnLoop = Callable[
    [Trajectory, TokenContext, Sandbox, Engine, ChatContextBuilder, EpisodeLimits],
    Awaitable[None],
]


async def run_episode(
    task: Task,
    pool: SandboxProvider,
    engine: Engine,
    builder: ChatContextBuilder,
    limits: EpisodeLimits,
    *,
    seed: int = 0,
    model: str = "",
    loop: TurnLoop | None = None,
) -> Trajectory:
    fmt = limits.action_format
    prompt = episode_prompt(builder, task, fmt)
    trajectory = Trajectory(task.id, task.content_hash, model, seed, prompt)
    context = TokenContext()
    context.extend(prompt, generated=False)
    deadline = limits.deadline_s or task.agent_timeout_s
    start = time.monotonic()
    sandbox: Sandbox | None = None
    try:
        async with asyncio.timeout(deadline):
            sandbox = await pool.acquire()
            trajectory.sandbox_start_s = time.monotonic() - start
            await play(trajectory, context, sandbox, engine, builder, limits, loop)
    except TimeoutError:
        trajectory.finish_reason = "deadline"
    except ObsspecError as e:  # the sandbox did not start
        end_with_error(trajectory, e)
    trajectory.agent_s = time.monotonic() - start - trajectory.sandbox_start_s
    try:
        if sandbox is not None and trajectory.error_kind is None:
            outcome = await verify(task, sandbox)  # kills what the agent left, then verifies
            trajectory.reward, trajectory.rewards = outcome.reward, outcome.rewards
            trajectory.verifier_s, trajectory.verifier_output = outcome.seconds, outcome.output
    except DiskLimitExceeded as e:  # stopped between the last command and the verifier
        end_at_disk_limit(trajectory, e)
    except ObsspecError as e:
        # A verifier that cannot give a reward (not retryable) is the task's fault: retrying
        # the episode cannot help. The sandbox failing under it can.
        trajectory.error, trajectory.error_kind = str(e), "infra" if e.retryable else "task"
        trajectory.error_type = type(e).__name__
        trajectory.verifier_output = getattr(e, "output", "")
    finally:
        if sandbox is not None:
            await pool.release(sandbox)
    return trajectory


def episode_prompt(builder: ChatContextBuilder, task: Task, fmt: ActionFormat) -> list[int]:
    """The token ids every episode of the task starts from (system prompt and task)."""
    return builder.prompt_ids(SYSTEM_PROMPTS[fmt], task_prompt(task.instruction))


async def play(
    trajectory: Trajectory,
    context: TokenContext,
    sandbox: Sandbox,
    engine: Engine,
    builder: ChatContextBuilder,
    limits: EpisodeLimits,
    loop: TurnLoop | None = None,
) -> None:
    """The turns of an episode on a started sandbox; how they ended goes into the trajectory
    (the deadline excepted: it belongs to the caller, who also counts the sandbox start)."""
    origin = time.monotonic()
    try:
        await (loop or turn_loop)(trajectory, context, sandbox, engine, builder, limits)
    except EpisodeEnd as end:
        trajectory.finish_reason = end.reason  # type: ignore[assignment]
        trajectory.declared_done = end.reason == "done"
    except ContextLengthError as e:
        trajectory.finish_reason, trajectory.error = "context_length", str(e)
        trajectory.error_type = type(e).__name__
    except DiskLimitExceeded as e:
        end_at_disk_limit(trajectory, e)
    except ObsspecError as e:
        end_with_error(trajectory, e)
    finally:
        trajectory.context_ids, trajectory.mask = context.ids, context.mask
        trajectory.logprobs = context.logprobs
        rebase_timeline(trajectory.turns, origin)


def rebase_timeline(turns: list[Turn], origin: float) -> None:
    """Loops stamp phase starts on the monotonic clock; the record keeps them as seconds since
    the turns began (a phase that did not happen stays 0.0)."""
    for turn in turns:
        turn.gen_start_s = max(0.0, turn.gen_start_s - origin)
        if turn.exec_start_s:
            turn.exec_start_s = max(0.0, turn.exec_start_s - origin)
        if turn.predict_start_s:
            turn.predict_start_s = max(0.0, turn.predict_start_s - origin)


def end_at_disk_limit(trajectory: Trajectory, error: DiskLimitExceeded) -> None:
    """The policy wrote past the sandbox's disk limit: an outcome, unrewarded (the sandbox
    is gone, no verifier can judge it, and filling the disk must not pay)."""
    trajectory.finish_reason, trajectory.error = "disk_limit", str(error)
    trajectory.error_kind, trajectory.error_type = "model", type(error).__name__
    trajectory.reward, trajectory.rewards = 0.0, {}


def end_with_error(trajectory: Trajectory, error: ObsspecError) -> None:
    trajectory.finish_reason, trajectory.error = "infra_error", str(error)
    trajectory.error_kind = "infra" if error.retryable else "model"
    trajectory.error_type = type(error).__name__


async def turn_loop(
    trajectory: Trajectory,
    context: TokenContext,
    sandbox: Sandbox,
    engine: Engine,
    builder: ChatContextBuilder,
    limits: EpisodeLimits,
) -> None:
    for index in range(limits.max_turns):
        sampling = turn_sampling(limits, trajectory.seed, index)
        gen_start = time.monotonic()
        gen = await engine.generate(context.ids, sampling, priority=0)
        context.extend(gen.token_ids, generated=True, logprobs=gen.logprobs)
        turn, action = new_turn(index, gen, limits.action_format)
        turn.gen_start_s = gen_start
        trajectory.turns.append(turn)
        if action.kind == "done":
            raise EpisodeEnd("done")
        if action.kind == "invalid":
            turn.observation = CORRECTIVE_OBSERVATIONS[limits.action_format]
        else:
            turn.exec_start_s = time.monotonic()
            result = await sandbox.run(action.command, timeout_s=limits.command_timeout_s)
            record_result(turn, result, limits)
        turn.observation_ids = observation_ids(builder, gen.token_ids, turn.observation)
        context.extend(turn.observation_ids, generated=False)
    raise EpisodeEnd("max_turns")


def turn_sampling(limits: EpisodeLimits, seed: int, index: int) -> Sampling:
    return Sampling(
        max_tokens=limits.max_tokens, temperature=limits.temperature, seed=turn_seed(seed, index)
    )


def new_turn(index: int, gen: Generation, fmt: ActionFormat) -> tuple[Turn, Action]:
    """The turn of a generation, with its parsed action (observation not yet known)."""
    action = parse_action(gen.text, fmt)
    turn = Turn(
        index,
        gen.text,
        action.kind,
        action.command,
        "",
        gen.token_ids,
        gen.logprobs,
        [],
        generation_finish=gen.finish_reason,
        gen_s=gen.timings.total_s,
        weight_version=gen.weight_version,
    )
    return turn, action


def record_result(turn: Turn, result: ExecResult, limits: EpisodeLimits) -> None:
    turn.observation = render_observation(result, limits.observation_max_chars)
    turn.exit_code, turn.timed_out, turn.exec_s = (
        result.exit_code,
        result.timed_out,
        result.duration_s,
    )


def observation_ids(
    builder: ChatContextBuilder, action_ids: list[int], observation: str
) -> list[int]:
    """What follows a reply in the context: its end of turn (if cut off), then the observation
    in the chat template, up to the next generation prompt."""
    return builder.turn_end_ids(action_ids) + builder.observation_ids(observation)
