"""The Sandbox contract: what the turn loops, the verifier and the solution runner ask of a
sandbox, and what an episode asks of the place its sandbox comes from.

    sandbox = await provider.acquire()
    result = await sandbox.run("cd /app && make", timeout_s=60)    # the agent's shell
    await sandbox.end_agent_phase(["/tests", "/logs/verifier"])     # its processes killed
    await sandbox.upload(task.tests_dir, "/")                       # into a fresh /tests
    async with sandbox.network_for_verifier():
        result = await sandbox.run_fresh("bash /tests/test.sh", timeout_s=180)
    raw = await sandbox.read_file("/logs/verifier/reward.txt", max_bytes=65536)
    await provider.release(sandbox)                                 # removed, never reused

The verifier (environments.tasks.verifier.verify) makes exactly these calls after the agent
phase, in this order; a sandbox of your own needs only to honour each one.

Implementations: DockerSandbox and SandboxPool (environments.sandbox, environments.pool), and
FakeSandbox and FakeSandboxPool (environments.fake_sandbox), in memory, for tests and examples.
Starting a sandbox belongs to its implementation (a Docker client, an image, a run id), so it
is not part of the contract.
"""

from __future__ import annotations

from collections.abc import Sequence
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

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes | None:
        """The bytes of a file in the sandbox, or None if there is no such file. With
        max_bytes, at most max_bytes + 1 bytes (a longer result says the file is bigger than
        the caller accepts), read without holding the whole file in memory."""
        ...

    async def end_agent_phase(self, remove: Sequence[str] = ()) -> None:
        """The agent phase is over, for good: end every process it started (wherever it
        went: background jobs, `nohup`, `setsid`, the persistent shell itself), then delete
        the paths in `remove` (what the verifier is about to write or upload). Nothing the
        agent left running may outlive this call, or it could write the reward or use the
        verifier's network. After it, `run` may fail; run_fresh, upload, read_file and
        network_for_verifier must work."""
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
