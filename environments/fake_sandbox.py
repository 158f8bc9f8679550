"""FakeSandbox and FakeSandboxPool: the Sandbox contract in memory, for tests and examples.

    sandbox = FakeSandbox({"ls": "notes.txt", "make": ExecResult("", "boom", 2, 0.0)}, exec_s=0.1)
    result = await sandbox.run("ls")          # stdout "notes.txt", exit 0, after 0.1 s
    sandbox.commands                          # ["ls"]: what ran, in order

Deterministic: a command's result comes from a table (command -> text or ExecResult; a
command not in it gets bash's "command not found", exit 127) or from a function of the command
and of how many commands ran before it, so a command run twice, early or out of order shows in
the observations. Time passes for real (asyncio.sleep), so the turn loops overlap and cancel
fake commands the way they do real ones: exec_s is a fixed number of seconds or a function of
(command, index); a command slower than its timeout is cut off at the timeout and comes back
timed out, as a real one would. `fail_on=n` makes the n-th command (0-based) raise
SandboxError once its time is up, as a container that dies under a command does.

Nothing runs: there is no shell state, uploads are only recorded, and read_file answers from
`files` (cut to max_bytes + 1). `events` lists every sandbox call in order ("run", "fresh",
"upload /", "end_agent_phase", "network", "network end", "read <path>"), so that tests can
check the verifier's sequence. After end_agent_phase `run` is a SandboxError, as on a
DockerSandbox; after aclose every call is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

from obsspec.environments.errors import SandboxError
from obsspec.environments.sandbox import SandboxLimits
from obsspec.environments.sandbox_protocol import Sandbox
from obsspec.types import ExecResult

Output = str | ExecResult  # a text is stdout with exit code 0
Outputs = Mapping[str, Output] | Callable[[str, int], Output]
Seconds = float | Callable[[str, int], float]


class FakeSandbox:
    """A Sandbox (environments.sandbox_protocol) whose commands answer from `outputs`."""

    def __init__(
        self,
        outputs: Outputs | None = None,
        *,
        exec_s: Seconds = 0.0,
        fail_on: int | None = None,
        files: Mapping[str, bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> None:
        self.outputs = outputs if outputs is not None else {}
        self.exec_s = exec_s
        self.fail_on = fail_on
        self.files = dict(files or {})
        self.limits = limits or SandboxLimits()
        self.commands: list[str] = []  # run in the persistent shell, in order
        self.fresh_commands: list[str] = []  # run in a fresh shell (run_fresh)
        self.uploads: list[tuple[Path, str]] = []  # (source, dest_dir)
        self.verifier_networks = 0  # times network_for_verifier was entered
        self.removed: list[str] = []  # the paths end_agent_phase was asked to delete
        self.agent_phase_over = False
        self.events: list[str] = []  # every call, in order (see the module docstring)
        self.closed = False

    async def __aenter__(self) -> FakeSandbox:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def run(self, command: str, timeout_s: float = 60.0) -> ExecResult:
        if self.agent_phase_over:
            raise SandboxError("the shell is closed (the agent phase is over)")
        self.events.append("run")
        return await self._execute(self.commands, command, timeout_s)

    async def run_fresh(self, command: str, timeout_s: float = 60.0) -> ExecResult:
        self.events.append("fresh")
        return await self._execute(self.fresh_commands, command, timeout_s)

    async def _execute(self, log: list[str], command: str, timeout_s: float) -> ExecResult:
        self._check_open()
        index = len(log)
        log.append(command)  # recorded before it finishes, as a started real command is
        seconds = self.exec_s(command, index) if callable(self.exec_s) else self.exec_s
        await asyncio.sleep(min(seconds, timeout_s))
        if self.fail_on == index:
            raise SandboxError("the sandbox died under the command (FakeSandbox fail_on)")
        if seconds > timeout_s:
            return ExecResult("", "", None, timeout_s, timed_out=True, timeout_s=timeout_s)
        result = as_result(self._output(command, index))
        return dataclasses.replace(result, duration_s=seconds, timeout_s=timeout_s)

    def _output(self, command: str, index: int) -> Output:
        if callable(self.outputs):
            return self.outputs(command, index)
        if command in self.outputs:
            return self.outputs[command]
        program = command.split()[0] if command.split() else command
        return ExecResult("", f"bash: {program}: command not found", 127, 0.0)

    async def upload(self, source: Path, dest_dir: str) -> None:
        self._check_open()
        self.uploads.append((source, dest_dir))
        self.events.append(f"upload {dest_dir}")

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes | None:
        self._check_open()
        self.events.append(f"read {path}")
        data = self.files.get(path)
        return data if data is None or max_bytes is None else data[: max_bytes + 1]

    async def end_agent_phase(self, remove: Sequence[str] = ()) -> None:
        self._check_open()
        self.events.append("end_agent_phase")
        self.agent_phase_over = True
        self.removed.extend(remove)

    @contextlib.asynccontextmanager
    async def network_for_verifier(self) -> AsyncIterator[None]:
        self._check_open()
        self.verifier_networks += 1
        self.events.append("network")
        try:
            yield
        finally:
            self.events.append("network end")

    async def aclose(self) -> None:
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxError("the sandbox is closed")


def as_result(output: Output) -> ExecResult:
    return output if isinstance(output, ExecResult) else ExecResult(output, "", 0, 0.0)


class FakeSandboxPool:
    """A SandboxProvider that hands out a new sandbox from `make` on every acquire and closes
    it on release; `sandboxes` keeps them all, for inspection after the episode."""

    def __init__(self, make: Callable[[], FakeSandbox] = FakeSandbox) -> None:
        self.make = make
        self.sandboxes: list[FakeSandbox] = []

    async def acquire(self) -> FakeSandbox:
        sandbox = self.make()
        self.sandboxes.append(sandbox)
        return sandbox

    async def release(self, sandbox: Sandbox) -> None:
        await sandbox.aclose()

    @property
    def leased(self) -> list[FakeSandbox]:
        """Sandboxes acquired and not yet released."""
        return [s for s in self.sandboxes if not s.closed]
