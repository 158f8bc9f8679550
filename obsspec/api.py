"""obsspec as a library: speculative episodes inside another RL stack's rollout function.

    from obsspec import api

    speculator = api.Speculator(api.load_tokenizer(policy_dir), world_model=wm_engine)
    trajectory = await speculator.play(api.load_task(task_dir), sandboxes, policy_engine, seed=7)
    trajectory.context_ids, trajectory.mask, trajectory.logprobs   # what a trainer learns from
    trajectory.reward                                               # the task's verifier's
    api.speculation_records(trajectory)      # per command turn: matched, source, tokens ahead
    api.speculation_summary(trajectories)    # pooled: match rates, tokens wasted, overlap

What the caller brings, each a small protocol:

    policy_engine  an Engine: `generate(prompt_ids, sampling, *, request_id, priority,
                   progress)`, `stats()`, `load_weights(dir, version)`, `aclose()`. Ours:
                   LocalVLLMEngine (vLLM in process), OpenAIEngine (a server such as `vllm
                   serve`, which must return token ids), ScriptedEngine (deterministic, tests)
    wm_engine      the world model's Engine (any of the same), or None: the state cache,
                   shell rules and repeats only
    sandboxes      a SandboxProvider: `acquire() -> Sandbox` and `release(sandbox)`; a Sandbox
                   runs commands (`run`, `run_fresh`), copies files in (`upload`), reads them
                   back (`read_file`), kills all the agent left running (`end_agent_phase`)
                   and closes (`aclose`); see environments.sandbox_protocol.
                   Ours: DockerSandboxPool (warm Docker containers of a task's image) and
                   FakeSandboxPool (in memory)
    a task         api.load_task(dir): a Harbor or built-in task directory (instruction,
                   environment, tests, solution)

Lossless: a speculative reply is kept only when the predicted observation equalled the real
one exactly, so a trajectory is token for token the one a sequential rollout with the same
seed gives; `speculate=False` plays that sequential rollout. One Speculator is meant to be
shared by every episode of a batch: its state cache answers a command a sibling episode
already ran in the same state, and its gate learns where speculation pays.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping

from obsspec.agent.episode import EpisodeLimits, context_builder, run_episode
from obsspec.environments.ceiling import SandboxCeiling, capped, within_machine
from obsspec.environments.errors import SandboxError
from obsspec.environments.fake_sandbox import FakeSandbox, FakeSandboxPool
from obsspec.environments.sandbox import NetworkPolicy, SandboxLimits, with_network
from obsspec.environments.sandbox_protocol import Sandbox, SandboxProvider
from obsspec.environments.tasks.load import load_task
from obsspec.environments.tasks.model import Task
from obsspec.inference.base import Engine, Generation, Sampling
from obsspec.inference.openai_http import OpenAIEngine
from obsspec.inference.scripted import ScriptedEngine
from obsspec.inference.vllm_local import EngineSettings, LocalVLLMEngine
from obsspec.models.tokenizer import load_tokenizer
from obsspec.rollout.config import EngineOptions
from obsspec.rollout.cores import CorePlan
from obsspec.rollout.speculation import speculative_loop
from obsspec.speculation.settings import SpeculationSettings
from obsspec.speculation.totals import SpeculationTotals
from obsspec.trajectory import SpeculationRecord, Trajectory, Turn
from obsspec.types import ExecResult, longest_observation_chars

__all__ = [
    "CorePlan",
    "Engine",
    "EngineSettings",
    "EpisodeLimits",
    "ExecResult",
    "FakeSandbox",
    "FakeSandboxPool",
    "Generation",
    "LocalVLLMEngine",
    "NetworkPolicy",
    "OpenAIEngine",
    "Sampling",
    "Sandbox",
    "SandboxCeiling",
    "SandboxError",
    "SandboxLimits",
    "SandboxProvider",
    "ScriptedEngine",
    "SpeculationRecord",
    "SpeculationSettings",
    "Speculator",
    "Task",
    "Trajectory",
    "Turn",
    "docker_sandboxes",
    "load_task",
    "load_tokenizer",
    "placement",
    "speculation_records",
    "speculation_summary",
    "task_image",
]


class Speculator:
    """Plays episodes speculatively on the caller's engines and sandboxes.

    tokenizer      the policy's (transformers) tokenizer: contexts are built with its chat
                   template, exactly as the policy engine will see them
    world_model    the world model's Engine, or None (state cache, rules, repeats); it must
                   share the policy's tokenizer
    limits         turns, tokens per reply, temperature, action format (EpisodeLimits)
    settings       depth, breadth, gate, prediction timeout (SpeculationSettings)
    wm_max_tokens  the world model's longest answer [default: the longest observation the
                   policy can be shown, capped at the default context length, 4096 tokens];
                   an answer cut off is no answer
    model          the name recorded in each trajectory
    """

    def __init__(
        self,
        tokenizer,
        *,
        world_model: Engine | None = None,
        limits: EpisodeLimits | None = None,
        settings: SpeculationSettings | None = None,
        threshold: float = 0.5,
        wm_max_tokens: int | None = None,
        model: str = "",
    ) -> None:
        self.limits = limits or EpisodeLimits()
        self.builder = context_builder(tokenizer, self.limits)
        self.model = model
        longest = longest_observation_chars(self.limits.observation_max_chars) + 1
        self.loop = speculative_loop(
            self.builder,
            world_model,
            settings or SpeculationSettings(),
            threshold=threshold,
            answer_tokens=wm_max_tokens or min(longest, EngineOptions().max_model_len),
        )

    async def play(
        self,
        task: Task,
        sandboxes: SandboxProvider,
        policy: Engine,
        *,
        seed: int = 0,
        speculate: bool = True,
    ) -> Trajectory:
        """One episode of `task` in a sandbox from `sandboxes`, the policy on `policy`,
        verified by the task's tests (trajectory.reward; None if the verifier could not run,
        with trajectory.error saying why). Never raises for what happens inside the episode:
        a failed sandbox or engine ends it with trajectory.error_kind set."""
        loop = self.loop if speculate else None
        return await run_episode(
            task, sandboxes, policy, self.builder, self.limits, seed=seed, model=self.model,
            loop=loop,
        )  # fmt: skip


def speculation_records(trajectory: Trajectory) -> list[tuple[str, SpeculationRecord]]:
    """(command, record) for every command turn that was speculated on, in order."""
    return [
        (turn.command, turn.speculation)
        for turn in trajectory.turns
        if turn.speculation is not None
    ]


def speculation_summary(trajectories: Iterable[Trajectory]) -> dict:
    """What speculation did over these episodes, pooled over their command turns: counts,
    `match_rate_wm` (the world model alone, first guess: the paper's figure),
    `match_rate_attempted`, `match_rate_used`, tokens ahead, committed and wasted, seconds
    of overlap, and `lossless_violations` (always 0 unless there is a bug)."""
    totals = sum((SpeculationTotals.of_turns(t.turns) for t in trajectories), SpeculationTotals())
    return totals.summary()


def placement(*, world_model: bool = True, platform: str | None = None) -> CorePlan:
    """Where obsspec would run a policy engine, a world model's engine (world_model) and the
    sandboxes on this machine's CPUs, as `obsspec collect` and `profile` place them
    (obsspec.rollout.cores); on a GPU build (platform 'cuda', detected unless given) nothing
    is pinned. Use it for the engines and sandboxes you start:

        plan = api.placement()
        policy = api.LocalVLLMEngine(api.EngineSettings(model=policy_dir, cpu_cores=plan.policy))
        wm = api.LocalVLLMEngine(api.EngineSettings(model=wm_dir, cpu_cores=plan.world_model))
        async with api.docker_sandboxes(task, size=4, cpuset=plan.sandboxes) as sandboxes: ...

    Left unplaced, vLLM binds every CPU engine to the same core, and the world model's
    engine then slows the policy's."""
    from obsspec.inference.vllm_settings import current_platform_kind
    from obsspec.rollout.cores import machine_plan

    return machine_plan(world_model=world_model, platform=platform or current_platform_kind())


@contextlib.asynccontextmanager
async def docker_sandboxes(
    task: Task,
    *,
    size: int = 1,
    image_map: Mapping[str, str] | None = None,
    cpuset: str | None = None,
    ceiling: SandboxCeiling | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
) -> AsyncIterator[SandboxProvider]:
    """A warm pool of Docker sandboxes of `task`'s image (built if needed, cached by the task's
    content; `image_map` builds on local images where its Dockerfile says FROM a registry
    image: {"python:3.13-slim": "obsspec/base"}); every container it started is removed
    however the block ends (cpuset: the cores they run on, e.g. `placement().sandboxes`;
    default: any). The task's limits are capped by `ceiling` (default: SandboxCeiling()'s),
    with a warning naming what was lowered. `network` is the run's policy, as collect's
    --network: who gets a network (the image's build too; default none: nothing does):

        async with api.docker_sandboxes(task, size=4) as sandboxes:
            trajectories = await asyncio.gather(*(speculator.play(task, sandboxes, engine,
                                                                  seed=s) for s in range(4)))
    """
    from obsspec.environments.gc import run_scope
    from obsspec.environments.pool import SandboxPool

    with run_scope("api") as (client, run_id):
        network = NetworkPolicy(network)  # "verify" as well as NetworkPolicy.verify
        image = await task_image(task, image_map=image_map, network=network)
        ceiling = within_machine(ceiling or SandboxCeiling(), client)
        limits, lowered = capped(with_network(task.limits, network), ceiling)
        if lowered:
            message = f"task {task.id} asks more than the sandbox ceiling and gets it: "
            warnings.warn(message + ", ".join(lowered), stacklevel=2)
        if cpuset is not None:
            limits = limits.model_copy(update={"cpuset": cpuset})
        async with SandboxPool(client, image, limits, size=size, run_id=run_id) as pool:
            yield pool


async def task_image(
    task: Task,
    *,
    image_map: Mapping[str, str] | None = None,
    network: NetworkPolicy = NetworkPolicy.none,
) -> str:
    """The tag of `task`'s Docker image, built from its environment/ if no image of the same
    content exists yet (`image_map`: as for docker_sandboxes; `network`: the build's RUN steps
    get a network unless it is none, as in collect); an ImageBuildError carries the build
    log's tail."""
    from obsspec.environments.docker_api import connect
    from obsspec.environments.tasks.images import TaskImages

    client = connect()
    try:
        images = TaskImages(client, image_map=image_map, network=NetworkPolicy(network))
        return await images.ensure(task)
    finally:
        client.close()
