"""DockerSandbox: one isolated container with a persistent shell, as an async context manager.

    async with DockerSandbox(client, image, SandboxLimits(), run_id="r1") as sb:
        result = await sb.run("cd /tmp && ls", timeout_s=30)

Isolation: resource limits (cpus, memory, pids, and disk: environments/disk_limit.py), no
network unless the run's policy gives one (NetworkPolicy: none, only the verifier, or all; see
`with_network`), no-new-privileges, capabilities cut to what a root shell in a task needs, an
init process that reaps orphans.
Determinism: fixed hostname, TZ, locale and umask (SHELL_ENV, INIT); HOME and the working
directory as the image sets them (/root in ours). Unless the task turns it off
(`deterministic`), the agent's shell also fixes git's dates, Python's string hashing and
$RANDOM (environments/deterministic_shell.py, which says what stays nondeterministic: the
clock, file times, process ids, durations).
Containers carry labels (run id, owner pid and host) so `obsspec env gc` finds leftovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import tarfile
import time
from collections.abc import AsyncIterator, Sequence
from enum import StrEnum
from pathlib import Path

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.environments.archive_read import READ_CHUNK_BYTES, read_member
from obsspec.environments.bridge import join_bridge, leave_bridge
from obsspec.environments.deterministic_shell import (
    configured_names,
    shell_environment,
    shell_startup,
)
from obsspec.environments.disk_limit import (
    DEFAULT_STORAGE_MB,
    NO_WATCH,
    DiskWatch,
    LayerMeter,
    NoWatch,
    create_limited,
)
from obsspec.environments.errors import SandboxError
from obsspec.environments.shell import SHELL_ENV, PersistentShell, ShellSettings
from obsspec.types import ExecResult

HOSTNAME = "sandbox"
LABEL_RUN = "obsspec.run"
LABEL_PID = "obsspec.pid"
LABEL_HOST = "obsspec.host"
# Docker's default set minus NET_RAW, MKNOD, SETFCAP and AUDIT_WRITE: enough for a root shell
# that installs packages, changes owners and permissions, and kills its own processes.
KEEP_CAPABILITIES = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
]


class NetworkPolicy(StrEnum):
    """Which phases of an episode get a network (Docker's default bridge)."""

    none = "none"  # no phase, ever: only loopback
    verify = "verify"  # only the verifier (TB v1 verifiers install tools at verify time)
    all = "all"  # the agent and the verifier


class SandboxLimits(StrictModel):
    cpus: float = Field(default=1.0, gt=0, description="CPU quota (cores).")
    memory_mb: int = Field(default=2048, ge=64, description="Memory limit in MiB (no swap).")
    pids: int = Field(default=512, ge=16, description="Most processes at once (fork bombs).")
    cpuset: str | None = Field(default=None, description="Cores to pin to, e.g. '1' or '2-3'.")
    allow_internet: bool = Field(
        default=False,
        description="The task lets its agent use the internet (Harbor's allow_internet); "
        "what the sandbox gets is `network`, set by the run's policy (with_network).",
    )
    network: NetworkPolicy = Field(
        default=NetworkPolicy.none, description="Which phases get a network in this sandbox."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    deterministic: bool = Field(
        default=True,
        description="The agent's shell fixes git dates, hash seed and $RANDOM "
        "(environments/deterministic_shell.py).",
    )
    storage_mb: int | None = Field(
        default=None,
        ge=1,
        description="Disk the sandbox may write, MiB (the task's `storage`) [default: "
        "DEFAULT_STORAGE_MB]; a quota or a watchdog (environments/disk_limit.py).",
    )

    @property
    def disk_mb(self) -> int:
        """The disk limit in force: the task's, else the default."""
        return self.storage_mb or DEFAULT_STORAGE_MB


def with_network(limits: SandboxLimits, run: NetworkPolicy) -> SandboxLimits:
    """A task's sandbox limits under the run's network policy. The run's setting is a ceiling:
    `none` gives no network even to a task that allows internet (the caller says so, see
    denied_internet); `verify` gives the verifier a network, and the agent too when the task
    allows internet; `all` gives both phases a network."""
    if run is NetworkPolicy.none:
        network = NetworkPolicy.none
    elif run is NetworkPolicy.all or limits.allow_internet:
        network = NetworkPolicy.all
    else:
        network = NetworkPolicy.verify
    return limits.model_copy(update={"network": network})


def denied_internet(limits: SandboxLimits, run: NetworkPolicy) -> bool:
    """The task allows internet but the run's policy takes it away (worth a warning)."""
    return limits.allow_internet and run is NetworkPolicy.none


def run_labels(run_id: str) -> dict[str, str]:
    return {LABEL_RUN: run_id, LABEL_PID: str(os.getpid()), LABEL_HOST: socket.gethostname()}


def container_options(limits: SandboxLimits, run_id: str) -> dict:
    """Docker create options of every container obsspec starts (sandboxes and `env run`):
    the one place where isolation and limits are set, so that no kind of container drifts."""
    return {
        "init": True,  # PID 1 reaps orphans and forwards signals
        "hostname": HOSTNAME,
        "labels": run_labels(run_id),
        "environment": {**SHELL_ENV, **limits.env},
        # `verify` starts without a network too: network_for_verifier adds it later
        "network_mode": None if limits.network is NetworkPolicy.all else "none",
        "nano_cpus": int(limits.cpus * 1e9),
        "cpuset_cpus": limits.cpuset,
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "pids_limit": limits.pids,
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "cap_add": KEEP_CAPABILITIES,
    }


class DockerSandbox:
    """A Sandbox (environments.sandbox_protocol) in a Docker container."""

    def __init__(
        self,
        client,
        image: str,
        limits: SandboxLimits | None = None,
        *,
        run_id: str = "adhoc",
        shell: ShellSettings | None = None,
    ) -> None:
        self.client = client
        self.image = image
        self.limits = limits or SandboxLimits()
        self.run_id = run_id
        self.shell_settings = shell or ShellSettings()
        self.container = None
        self.shell: PersistentShell | None = None
        self.start_seconds = 0.0
        self.disk_quota = False  # the storage driver enforces limits.disk_mb itself
        self.disk_watch: DiskWatch | NoWatch = NO_WATCH  # else this (environments/disk_limit.py)

    async def __aenter__(self) -> DockerSandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    @property
    def id(self) -> str:
        return self.container.id if self.container is not None else ""

    async def start(self) -> None:
        start = time.monotonic()
        self.container = await self._create_uncancellable()
        try:
            self._watch_disk()
            self.shell = PersistentShell(
                self.client,
                self.container.id,
                self.shell_settings,
                environment=shell_environment(
                    SHELL_ENV, self.limits.deterministic, configured_names(self.container.attrs)
                ),
                startup=shell_startup(self.limits.deterministic),
            )
            await self.shell.start()
        except BaseException:
            await self.aclose()
            raise
        self.start_seconds = time.monotonic() - start

    async def _create_uncancellable(self):
        """Create the container in a thread; if cancelled meanwhile, remove it once created
        (a thread cannot be stopped, and a container it creates must not leak)."""
        creating = asyncio.ensure_future(asyncio.to_thread(self._create))
        try:
            return await asyncio.shield(creating)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(remove_container, await creating)
            raise

    def _create(self):
        import docker.errors

        def create(**disk):
            container = self.client.containers.create(
                self.image,
                entrypoint=["sleep", "infinity"],
                command=[],
                stdin_open=False,
                **container_options(self.limits, self.run_id),
                **disk,
            )
            try:  # a container that cannot start (no `sleep` in the image) must not be left
                container.start()
            except docker.errors.APIError:
                remove_container(container)
                raise
            return container

        try:
            container, self.disk_quota = create_limited(self.client, create, self.limits.disk_mb)
            return container
        except docker.errors.ImageNotFound:
            raise SandboxError(
                f"image {self.image} does not exist",
                hint="build it first (obsspec env build, or the task's image)",
            ) from None
        except docker.errors.APIError as e:
            raise SandboxError(f"cannot start a sandbox from {self.image}: {e.explanation}") from e

    def _watch_disk(self) -> None:
        """Start the disk watchdog where the storage driver gives no quota."""
        if not self.disk_quota:
            meter = LayerMeter(self.client, self.container.attrs)
            self.disk_watch = DiskWatch(meter, self.limits.disk_mb, self._stop_for_disk)
            self.disk_watch.start()

    async def _stop_for_disk(self) -> None:
        """Past the disk limit: the container goes at once (its disk with it)."""
        if self.container is not None:
            await asyncio.to_thread(remove_container, self.container)

    async def run(self, command: str, timeout_s: float = 60.0) -> ExecResult:
        if self.shell is None:
            raise SandboxError("the sandbox is not started (use `async with`)")
        return await self.disk_watch.guard(lambda: self.shell.run(command, timeout_s))

    async def run_fresh(self, command: str, timeout_s: float = 60.0) -> ExecResult:
        """Run in a new shell of the sandbox: none of the persistent shell's state applies."""
        if self.container is None:
            raise SandboxError("the sandbox is not started (use `async with`)")
        self.disk_watch.raise_if_exceeded()
        shell = PersistentShell(self.client, self.container.id, self.shell_settings)
        await shell.start()
        try:
            return await self.disk_watch.guard(lambda: shell.run(command, timeout_s))
        finally:
            await shell.close()

    async def exec_oneoff(self, cmd: list[str], timeout_s: float = 60.0):
        """A command outside the persistent shell (fresh process, no shell state); one that
        does not return within timeout_s is a SandboxError (retryable: an overloaded machine
        or daemon, seen when 16 sandboxes and two engines shared one core), never a bare
        TimeoutError that would end the whole run."""
        if self.shell is None:
            raise SandboxError("the sandbox is not started")
        self.disk_watch.raise_if_exceeded()  # stopped for its disk: that is why it is gone
        try:
            return await self.shell.exec_oneoff(cmd, timeout_s)
        except TimeoutError:
            raise SandboxError(
                f"`{' '.join(cmd)[:80]}` in the sandbox did not return within {timeout_s:g} s"
            ) from None

    async def end_agent_phase(self, remove: Sequence[str] = ()) -> None:
        """The agent phase is over: every process in the sandbox but init and its entrypoint
        is killed, the persistent shell first (environments/containment.py; a container
        whose processes outlive that is restarted), then the paths in `remove` are deleted,
        so that nothing the agent started or left there meets the verifier. After it the
        shell takes no command (`run` is a SandboxError); run_fresh and the rest still work."""
        if self.shell is None or self.container is None:
            raise SandboxError("the sandbox is not started (use `async with`)")
        await self.shell.end()
        if remove:
            code, output = await self.exec_oneoff(["rm", "-rf", "--", *remove], timeout_s=120)
            if code != 0:
                raise SandboxError(
                    f"cannot clear {' '.join(remove)} for the verifier (rm exited {code}): "
                    f"{output.decode(errors='replace')[-300:]}"
                )

    @contextlib.asynccontextmanager
    async def network_for_verifier(self) -> AsyncIterator[None]:
        """Around the verifier: under the `verify` policy the container joins Docker's default
        bridge network just before it and leaves it after (the agent never had a network;
        a container on Docker's `none` network must leave it to join another). Under the
        other policies nothing changes."""
        if self.limits.network is not NetworkPolicy.verify or self.container is None:
            yield
            return
        await asyncio.to_thread(join_bridge, self.client.api, self.container.id)
        try:
            yield
        finally:
            if self.container is not None:
                await asyncio.to_thread(leave_bridge, self.client.api, self.container.id)

    async def upload(self, source: Path, dest_dir: str) -> None:
        """Copy a local file or directory tree into dest_dir (created if needed). The archive
        is made in a thread: the verifier kit is tens of MB, and the event loop runs the
        other episodes' turns meanwhile."""
        archive = await asyncio.to_thread(tar_of, source)
        await self.exec_oneoff(["mkdir", "-p", dest_dir])
        ok = await asyncio.to_thread(self.container.put_archive, dest_dir, archive)
        if not ok:
            raise SandboxError(f"could not copy {source} into the sandbox at {dest_dir}")

    async def read_file(self, path: str, max_bytes: int | None = None) -> bytes | None:
        """The bytes of a file in the sandbox, or None if it does not exist; with max_bytes,
        at most max_bytes + 1 of them, read in bounded memory (environments.archive_read)."""
        import docker.errors

        self.disk_watch.raise_if_exceeded()

        def read() -> bytes | None:
            try:
                chunks, _ = self.container.get_archive(path, chunk_size=READ_CHUNK_BYTES)
            except docker.errors.NotFound:
                check_exists(self.container)  # no such file, or no container at all?
                return None
            return read_member(chunks, max_bytes)

        return await asyncio.to_thread(read)

    async def aclose(self) -> None:
        """Remove the container (and its anonymous volumes); safe to call twice."""
        await self.disk_watch.close()
        if self.shell is not None:
            await self.shell.close()
            self.shell = None
        if self.container is not None:
            container, self.container = self.container, None
            await asyncio.to_thread(remove_container, container)


def check_exists(container) -> None:
    """A SandboxError if the container is gone (removed from outside): a retryable failure,
    never taken for a missing file and so for a task's fault."""
    import docker.errors

    try:
        container.reload()
    except docker.errors.NotFound:
        raise SandboxError("the sandbox container was removed from outside") from None


def remove_container(container) -> None:
    remove_container_named(container.client.api, container.id)


def remove_container_named(api, ref: str) -> None:
    """Kill and remove a container (id or name) and its anonymous volumes; one that is gone
    already, or is being removed by someone else, is no error."""
    import docker.errors

    try:
        api.remove_container(ref, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if "already in progress" not in str(e):
            raise SandboxError(f"could not remove container {ref[:40]}: {e}") from e


def tar_of(source: Path) -> bytes:
    """An uncompressed tar of source (a file or a tree), named by its last component."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(source, arcname=source.name)
    return buffer.getvalue()
