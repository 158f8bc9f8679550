"""The Sandbox contract: what the turn loops, the verifier and the solution runner ask of a
sandbox, and what an episode asks of the place its sandbox comes from.

    sandbox = await provider.acquire()
    result = await sandbox.run("cd /app && make", timeout_s=60)    # the agent's shell
    await sandbox.upload(task.tests_dir, "/")                       # after the agent phase
    async with sandbox.network_for_verifier():
        result = await sandbox.run_fresh("bash /tests/test.sh", timeout_s=180)
        raw = await sandbox.read_file("/logs/verifier/reward.txt")
    await provider.release(sandbox)                                 # removed, never reused

Implementations: DockerSandbox and SandboxPool (environments.sandbox, environments.pool), and
FakeSandbox and FakeSandboxPool (environments.fake_sandbox), in memory, for tests and examples.
Starting a sandbox belongs to its implementation (a Docker client, an image, a run id), so it
is not part of the contract.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol, runtime_checkable

from obsspec.environments.sandbox import SandboxLimits
from obsspec.types import ExecResult


@runtime_checkable
class Sandbox(Protocol):
    limits: SandboxLimits  # what the sandbox was started with (its network policy included)

    async def run(self, command: str, timeout_s: float = 60.0) -> ExecResult:
        """Run a command in the persistent shell: cwd, variables and functions carry over
        between commands. A command past timeout_s is killed (the result says timed_out); a
        sandbox that fails under it raises SandboxError."""
        ...

    async def run_fresh(self, command: str, timeout_s: float = 60.0) -> ExecResult:
        """Run a command in a new shell of the same sandbox: none of the persistent shell's
        state applies (the verifier runs so)."""
        ...

    async def upload(self, source: Path, dest_dir: str) -> None:
        """Copy a local file or directory tree into dest_dir (created if needed)."""
        ...

    async def read_file(self, path: str) -> bytes | None:
        """The bytes of a file in the sandbox, or None if there is no such file."""
        ...

    def network_for_verifier(self) -> AbstractAsyncContextManager[None]:
        """Around the verifier: a network for it when the sandbox's policy gives the verifier
        one and not the agent; otherwise nothing changes."""
        ...

    async def aclose(self) -> None:
        """Release everything the sandbox holds; safe to call twice."""
        ...


@runtime_checkable
class SandboxProvider(Protocol):
    """Where an episode gets its sandbox (a warm pool, or a fake)."""

    async def acquire(self) -> Sandbox:
        """A started sandbox, fresh: no other episode has used it."""
        ...

    async def release(self, sandbox: Sandbox) -> None:
        """Done with the sandbox: it is closed, never handed out again."""
        ...
