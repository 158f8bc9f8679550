"""Observation speculation inside another RL framework's rollout, through `obsspec.api`.

`rollout` below is a custom rollout function of the shape verl's agent loops, SkyRL's
generators and TRL's `rollout_func` accept: a batch of prompts in (here a task directory and
a seed each), token ids, loss masks, the sampler's logprobs and rewards out. It needs none of
those frameworks. The engines are the caller's (any `api.Engine`: vLLM in process, an
OpenAI-compatible server, your own) and so is the sandbox: `ContainerSandbox` is a user's own
Sandbox, one `docker exec` per command, written against environments.sandbox_protocol.

    python examples/embedding/custom_rollout.py --tasks tests/fixtures/tasks \
        --server http://127.0.0.1:8000 --served-name policy --world-model WM_DIR --tokenizer DIR

Speculation is lossless: each trajectory is token for token what a sequential rollout with
the same seed gives, so the returned batch is the same with `speculate=False`, only slower.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
import uuid
from pathlib import Path

from obsspec import api


async def rollout(batch: list[dict], policy: api.Engine, speculator: api.Speculator) -> dict:
    """Play each {"task_dir", "seed"} of the batch at once; return what a trainer learns from."""
    tasks = [api.load_task(Path(item["task_dir"])) for item in batch]
    images = {task.id: await api.task_image(task) for task in tasks}  # built once, then cached
    trajectories = await asyncio.gather(
        *(
            speculator.play(task, ContainerSandboxes(images[task.id]), policy, seed=item["seed"])
            for task, item in zip(tasks, batch, strict=True)
        )
    )
    out: dict = {key: [] for key in ("prompt_ids", "response_ids", "loss_mask", "logprobs")}
    out["rewards"] = []
    for trajectory in trajectories:
        start = len(trajectory.prompt_ids)  # the response: every turn after the prompt
        out["prompt_ids"].append(trajectory.prompt_ids)
        out["response_ids"].append(trajectory.context_ids[start:])
        out["loss_mask"].append(trajectory.mask[start:])  # 1: tokens the policy generated
        out["logprobs"].append([lp or 0.0 for lp in trajectory.logprobs[start:]])
        out["rewards"].append(trajectory.reward or 0.0)  # None: the verifier could not run
    out["speculation"] = api.speculation_summary(trajectories)
    out["records"] = [api.speculation_records(t) for t in trajectories]
    return out


class ContainerSandbox:
    """A user's own Sandbox: a container of the task's image, one `docker exec` per command
    (no persistent shell: each command starts in the image's working directory)."""

    def __init__(self, container: str) -> None:
        self.container = container
        self.limits = api.SandboxLimits()

    async def run(self, command: str, timeout_s: float = 60.0) -> api.ExecResult:
        return await self._docker("exec", self.container, "bash", "-c", command, timeout=timeout_s)

    async def run_fresh(self, command: str, timeout_s: float = 60.0) -> api.ExecResult:
        return await self.run(command, timeout_s)

    async def upload(self, source: Path, dest_dir: str) -> None:
        await self._docker("exec", self.container, "mkdir", "-p", dest_dir)
        await self._docker("cp", str(source), f"{self.container}:{dest_dir}")

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes | None:
        limit = [] if max_bytes is None else ["-c", str(max_bytes + 1)]  # no 400 MB reads
        result = await self._docker("exec", self.container, "head", *limit, "--", path)
        return result.stdout.encode() if result.exit_code == 0 else None

    async def end_agent_phase(self, remove=()) -> None:
        # kill -1: every process but PID 1 (here `sleep`, the container's own) and the caller
        script = 'kill -KILL -1; rm -rf -- "$@"'
        await self._docker("exec", self.container, "bash", "-c", script, "end", *remove)

    @contextlib.asynccontextmanager
    async def network_for_verifier(self):
        yield  # this sandbox never had its network taken away

    async def aclose(self) -> None:
        await self._docker("rm", "-f", self.container)

    async def _docker(self, *args: str, timeout: float = 60.0) -> api.ExecResult:
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "docker", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return api.ExecResult("", "", None, time.monotonic() - start, timed_out=True)
        took = time.monotonic() - start
        return api.ExecResult(out.decode(errors="replace"), err.decode(errors="replace"),
                              proc.returncode, took)  # fmt: skip


class ContainerSandboxes:
    """The SandboxProvider: a fresh container per episode, removed when it is released."""

    def __init__(self, image: str) -> None:
        self.image = image

    async def acquire(self) -> ContainerSandbox:
        name = f"custom-rollout-{uuid.uuid4().hex[:8]}"
        sandbox = ContainerSandbox(name)
        started = await sandbox._docker("run", "-d", "--name", name, self.image, "sleep", "3600")
        if started.exit_code != 0:
            raise api.SandboxError(f"docker run {self.image} failed: {started.stderr.strip()}")
        return sandbox

    async def release(self, sandbox: ContainerSandbox) -> None:
        await sandbox.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, required=True, help="A directory of task dirs.")
    parser.add_argument("--tokenizer", required=True, help="The policy's HF directory.")
    parser.add_argument("--server", required=True, help="The policy's OpenAI-compatible URL.")
    parser.add_argument("--served-name", required=True, help="The policy's name there.")
    parser.add_argument("--world-model", help="The world model's HF directory (vLLM here).")
    args = parser.parse_args()
    batch = [{"task_dir": d, "seed": i} for i, d in enumerate(sorted(args.tasks.iterdir()))]
    async with contextlib.AsyncExitStack() as stack:
        policy = await stack.enter_async_context(api.OpenAIEngine(args.server, args.served_name))
        wm = None
        if args.world_model:
            # Off the core a local policy server's engine takes (obsspec's placement).
            cores = api.placement().world_model
            settings = api.EngineSettings(model=Path(args.world_model), cpu_cores=cores)
            wm = await stack.enter_async_context(api.LocalVLLMEngine(settings))
        speculator = api.Speculator(api.load_tokenizer(args.tokenizer), world_model=wm)
        out = await rollout(batch, policy, speculator)
    print(json.dumps({"rewards": out["rewards"], "speculation": out["speculation"]}, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
