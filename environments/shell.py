"""One persistent bash inside a container, driven over a single `docker exec` stream.

Why not one `docker exec` per command: each costs ~50 ms, and a real terminal keeps its state
(cwd, variables, functions, aliases) between commands. What bash runs, and why each command
gives the observation `bash -c` would, is in environments/shell_script.py; this module drives
it: it sends one line per command (the command written into a trap handler), then reads both
streams up to the end markers that only this command's random token can produce.

The exec stream is Docker's multiplexed format (8-byte frame headers), so stdout and stderr
arrive separately. If the shell died (`exit`), a new shell is started and the result says so.

A timeout: nothing the commands started survives it. Every process in the container but init,
its entrypoint and the driver's shells is frozen and killed from a second exec, including what
escaped the shell's tree (double forks, `setsid`, `nohup`, a fork bomb's orphans) and
background jobs of earlier commands (environments/containment.py; `killed_processes`). The
killer needs no fork, so a fork bomb at the pids limit cannot stop it; if it still leaves
something, the container is restarted (files kept; `sandbox_restarted`, `shell_restarted`).
If the shell itself is stuck (a builtin loop), or the rest of the command still runs
`grace_s` after the kill, the shell is replaced. So the call returns within the timeout plus
about two graces and two kills, fork bomb or not. A command whose caller gives up on it (an
episode deadline cancels `run`) is ended the same way, shell included, before the
cancellation goes on; the next command starts a new shell.

Job notices: bash reports a job that a signal ended ("bash: line 1:   123 Killed   <job>")
when it reaps it, which after a kill is at the start of the *next* command, and it names a
PID. None of that is an observation: after a kill the driver runs an empty command whose
output it drops, and `strip_job_notices` takes every such report out of stderr. That holds
for an OOM kill too: `bash -c` of a single command execs it and prints no report (exit code
137 alone says it), which is what the observation then gives; where `bash -c` would report a
killed child of a longer command, the observation does not (its PID is unpredictable).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from dataclasses import dataclass

from obsspec.environments.capture import MarkedStream
from obsspec.environments.containment import kill_all_command, parse_report
from obsspec.environments.errors import SandboxError
from obsspec.environments.shell_script import (
    INIT,
    bash_c_stderr,
    ended_exit_code,
    record,
    strip_job_notices,
)
from obsspec.types import ExecResult

# Environment of every shell: what makes outputs depend on the command, not on the host.
SHELL_ENV = {
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "DEBIAN_FRONTEND": "noninteractive",
    "PYTHONUNBUFFERED": "1",
}
READY = re.compile(rb"__OBSSPEC_READY_(\d+)__")
STDOUT, STDERR = 1, 2
MARKER_HOLD = 64  # bytes held back in case they start a marker (the longest is ~40 bytes)

KILL_BUDGET_S = 5  # the killer's own limit; past it the container is restarted
KILL_EXEC_TRIES = 5  # runc fails to start an exec now and then when no pid is free


@dataclass
class ShellSettings:
    output_cap_bytes: int = 256 * 1024  # per stream, head and tail each
    grace_s: float = 3.0  # after a kill, how long to wait for the shell to report back
    start_timeout_s: float = 30.0


class PersistentShell:
    """`await shell.start()`, then `await shell.run(command, timeout_s)`; one command at a time."""

    def __init__(
        self,
        client,
        container_id: str,
        settings: ShellSettings | None = None,
        workdir: str | None = None,
        *,
        environment: dict[str, str] | None = None,
        startup: str = "",
    ) -> None:
        self.client = client
        self.container_id = container_id
        self.settings = settings or ShellSettings()
        self.workdir = workdir
        self.environment = SHELL_ENV if environment is None else environment
        self.startup = startup  # bash run before INIT (environments/deterministic_shell.py)
        self.pid: int | None = None
        self._exec_id: str | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._pending: dict[int, bytes] = {STDOUT: b"", STDERR: b""}
        self._header: bytes | None = None  # a frame header whose payload is not read yet
        # What the next command inherits, kept here rather than in the shell (shell_script.py)
        self._last_exit = 0
        self._xtrace = False
        self._abandoned = False

    async def start(self) -> None:
        sock = await asyncio.to_thread(self._open_exec_socket)
        self._reader, self._writer = await asyncio.open_connection(sock=sock)
        self._header = None
        self._writer.write((self.startup + INIT).encode())
        await self._writer.drain()
        stream = MarkedStream(READY, hold=MARKER_HOLD, cap=4096)
        try:
            await asyncio.wait_for(self._read_until(stream, None), self.settings.start_timeout_s)
        except TimeoutError:
            raise SandboxError("the shell did not start in time") from None
        if not stream.done:
            raise SandboxError(f"the shell exited at start: {stream.buffer.text()[-300:]}")
        self.pid = int(stream.match.group(1))
        self._last_exit, self._xtrace = 0, False
        self._pending = {STDOUT: stream.leftover, STDERR: b""}

    def _open_exec_socket(self):
        import docker.errors

        try:
            exec_id = self.client.api.exec_create(
                self.container_id,
                ["bash", "--noprofile", "--norc"],
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                environment=self.environment,
                workdir=self.workdir,
            )["Id"]
            sock = self.client.api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as e:
            raise SandboxError(f"cannot start a shell in the sandbox: {e.explanation}") from e
        self._exec_id = exec_id
        return getattr(sock, "_sock", sock)

    async def run(self, command: str, timeout_s: float) -> ExecResult:
        async with self._lock:
            if self._abandoned:  # a cancelled command took the last shell with it
                self._abandoned = False
                await self._check_running()
                await self.start()
            if self._writer is None:
                raise SandboxError("the shell is closed")
            try:
                return await self._run(command, timeout_s)
            except asyncio.CancelledError:
                await asyncio.shield(self._abandon())
                raise

    async def _abandon(self) -> None:
        """The caller gave up on a command (an episode deadline): end it and everything it
        started, the shell included, so that nothing of it runs on (under the verifier, say).
        A new shell starts at the next command."""
        await self._close_stream()
        self._abandoned = True
        if self.pid is not None:
            with contextlib.suppress(SandboxError):  # the container is gone: nothing runs
                await self._kill_all(keep_shell=False)

    async def end(self) -> int:
        """The shell's work is over for good (the agent phase ended): kill every process the
        commands started, wherever it went, and the shell itself, first and with SIGKILL so
        that no trap of it runs (containment.py); if that fails, restart the container. Returns the
        processes killed. The shell takes no more commands."""
        async with self._lock:
            await self._close_stream()
            self._abandoned = False
            killed, _ = await self._kill_all(keep_shell=False)
            self.pid = None
            return killed

    async def _run(self, command: str, timeout_s: float) -> ExecResult:
        token = secrets.token_hex(8)
        xtrace_before = self._xtrace
        out, err = self._streams(token)
        for stream, fd in ((out, STDOUT), (err, STDERR)):  # output of earlier background jobs
            stream.feed(self._pending[fd])
        start = time.monotonic()
        self._writer.write(self._record(command, token, self._last_exit, self._xtrace))
        await self._writer.drain()
        timed_out = restarted = container_restarted = False
        killed = 0
        try:
            await asyncio.wait_for(self._read_until(out, err), timeout_s)
        except TimeoutError:
            timed_out = True
            killed, container_restarted = await self._kill_all(keep_shell=True)
            # If the markers still do not come, the shell itself is stuck: restarted below.
            if not container_restarted:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._read_until(out, err), self.settings.grace_s)
        if out.done and err.done:
            self._pending = {STDOUT: out.leftover, STDERR: err.leftover}
            self._last_exit = int(out.match.group(1))
            self._xtrace = out.match.group(2) == b"x"
            exit_code = None if timed_out else self._last_exit
            if timed_out and not await self._settle():
                await self._restart()
                restarted = True
        else:  # the shell exited (`exit`, killed) or is stuck: a new one takes over
            out.flush()
            err.flush()
            exit_code = None if timed_out else await self._shell_exit_code()
            exit_code = ended_exit_code(exit_code, err.buffer.text())
            await self._restart()
            restarted = True
        duration = time.monotonic() - start
        stderr = bash_c_stderr(err.buffer.text(), xtrace=xtrace_before or self._xtrace)
        return ExecResult(
            stdout=out.buffer.text(),
            stderr=strip_job_notices(stderr),
            exit_code=exit_code,
            duration_s=duration,
            timed_out=timed_out,
            truncated=out.buffer.truncated or err.buffer.truncated,
            shell_restarted=restarted,
            timeout_s=timeout_s,
            killed_processes=killed,
            sandbox_restarted=container_restarted,
        )

    def _streams(self, token: str) -> tuple[MarkedStream, MarkedStream]:
        """stdout and stderr of one command, each read up to its end marker."""
        cap = self.settings.output_cap_bytes
        out = MarkedStream(
            re.compile(rb"__OBSSPEC_%s_RC=(\d+)_(x?)__" % token.encode()), MARKER_HOLD, cap
        )
        err = MarkedStream(re.compile(rb"__OBSSPEC_%s_END__" % token.encode()), MARKER_HOLD, cap)
        return out, err

    async def _settle(self) -> bool:
        """After a kill, an empty command whose output is dropped: bash reports the jobs it
        lost ("bash: line 1:   123 Killed   ...") when it next reaps them, which would be at
        the start of the next command. False if the shell does not answer (stuck)."""
        token = secrets.token_hex(8)
        out, err = self._streams(token)
        self._writer.write(self._record("builtin jobs", token, 0, False))
        await self._writer.drain()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._read_until(out, err), self.settings.grace_s)
        if not (out.done and err.done):
            return False
        self._pending = {STDOUT: out.leftover, STDERR: err.leftover}
        return True

    @staticmethod
    def _record(command: str, token: str, last_exit: int, xtrace: bool) -> bytes:
        if "\0" in command:
            raise SandboxError("a shell command cannot contain a NUL byte")
        return record(command, token, last_exit, xtrace).encode()

    async def _read_until(self, out: MarkedStream, err: MarkedStream | None) -> None:
        """Read frames until every given stream saw its marker, or the exec stream ends."""
        streams = {STDOUT: out, STDERR: err}
        while not (out.done and (err is None or err.done)):
            try:
                kind, payload = await self._next_frame()
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the shell is gone
            target = streams.get(kind)
            if target is not None:
                target.feed(payload)

    async def _next_frame(self) -> tuple[int, bytes]:
        """One frame of the multiplexed stream. A header already read is kept across a
        cancellation (a timeout may strike between header and payload), so the stream never
        loses its framing."""
        if self._header is None:
            self._header = await self._reader.readexactly(8)
        payload = await self._reader.readexactly(int.from_bytes(self._header[4:8], "big"))
        kind, self._header = self._header[0], None
        return kind, payload

    async def _kill_all(self, *, keep_shell: bool, may_restart: bool = True) -> tuple[int, bool]:
        """Kill every process the commands started, wherever it went (containment.py), and
        the shell too unless keep_shell. If that fails, restart the container (if
        may_restart): nothing survives that, files are kept. Not when the shell just ended
        by itself: the container may be dying, and Docker may still call it running.
        Returns (processes killed, container restarted)."""
        command = kill_all_command(self.pid or 0, keep_shell=keep_shell, budget_s=KILL_BUDGET_S)
        report = None
        for _ in range(KILL_EXEC_TRIES):  # at the pids limit an exec can fail to start
            try:  # a SandboxError (the container is gone) goes to the caller
                _, output = await self.exec_oneoff(command, timeout_s=KILL_BUDGET_S + 8)
            except TimeoutError:
                break
            report = parse_report(output)
            if report is not None or b"exec failed" not in output:
                break
            await asyncio.sleep(0.2)
        if (report is not None and report.left == 0) or not may_restart:
            return (report.killed if report else 0), False
        await self._check_running()  # a container stopped from outside is not brought back
        await self._restart_container()
        return (report.killed if report else 0), True

    async def _restart_container(self) -> None:
        import docker.errors
        import requests.exceptions

        await self._close_stream()
        api = self.client.api
        try:  # kill, then start: a container that stopped meanwhile is not brought back
            await asyncio.to_thread(api.kill, self.container_id)
        except docker.errors.APIError as e:
            await self._check_running()  # it stopped (killed from outside): says so
            raise SandboxError(f"cannot restart the sandbox container: {e.explanation}") from e
        try:
            await asyncio.to_thread(api.wait, self.container_id, timeout=30)
            await asyncio.to_thread(api.start, self.container_id)
        except (docker.errors.APIError, requests.exceptions.RequestException) as e:
            raise SandboxError(f"cannot restart the sandbox container: {e}") from e
        self.pid = None  # the shell went with it

    async def exec_oneoff(self, cmd: list[str], timeout_s: float) -> tuple[int | None, bytes]:
        """Run a command in a separate exec (not the shell); (exit code, combined output)."""
        import docker.errors

        def run() -> tuple[int | None, bytes]:
            try:
                result = self.client.containers.get(self.container_id).exec_run(cmd)
            except docker.errors.NotFound:
                raise SandboxError("the sandbox container no longer exists") from None
            except docker.errors.APIError as e:
                raise SandboxError(f"cannot run a command in the sandbox: {e.explanation}") from e
            return result.exit_code, result.output

        return await asyncio.wait_for(asyncio.to_thread(run), timeout_s)

    async def _shell_exit_code(self) -> int | None:
        if self._exec_id is None:
            return None
        import docker.errors

        for _ in range(20):  # Docker records the exit code shortly after the stream closes
            try:
                info = await asyncio.to_thread(self.client.api.exec_inspect, self._exec_id)
            except docker.errors.APIError:  # the container was removed: the restart says so
                return None
            if not info.get("Running"):
                return info.get("ExitCode")
            await asyncio.sleep(0.05)
        return None

    async def _restart(self) -> None:
        await self._close_stream()
        if self.pid is not None:  # a stuck shell is still running: kill it and everything
            with contextlib.suppress(SandboxError):  # the container is gone; start() says so
                await self._kill_all(keep_shell=False, may_restart=False)
        await self._check_running()
        await self.start()

    async def _check_running(self) -> None:
        import docker.errors

        try:
            container = await asyncio.to_thread(self.client.containers.get, self.container_id)
        except docker.errors.NotFound:
            raise SandboxError("the sandbox container was removed from outside") from None
        if container.status != "running":
            raise SandboxError(
                f"the sandbox container is {container.status}, not running (killed from outside?)"
            )

    async def _close_stream(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None

    async def close(self) -> None:
        await self._close_stream()
