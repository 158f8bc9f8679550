"""A sandbox's disk limit: a quota where Docker's storage driver gives one, else a watchdog.

Every sandbox, and `obsspec env run`'s container, may write `SandboxLimits.storage_mb` MiB
into its writable layer (the task's `storage`, DEFAULT_STORAGE_MB when it names none, capped
by the run's ceiling: environments/ceiling.py).

Quota. `--storage-opt size=` makes the kernel refuse writes past the limit (ENOSPC), but only
some storage drivers can: overlay2 on xfs mounted with pquota, btrfs, zfs. overlay2 on ext4,
the common case, refuses the option. Whether a daemon can is learnt at its first container:
asked with the option; refused, it is never asked again by this process (create_limited).

Watchdog, elsewhere. The writable layer is measured (LayerMeter): on the daemon's host, by a
walk of the layer's directory (GraphDriver UpperDir; the task image's anonymous volumes too),
counting the blocks allocated, so a sparse file costs what it takes: about 5 us a file (2 ms
at 300 files, 25 ms at 5000, measured on overlay2/ext4). Where that directory cannot be read
(a remote daemon, obsspec not root) the daemon measures it (inspect with size=1: 2 ms empty,
35 ms at 5000 files; it counts a sparse file at its full length, and not volumes). A `du` in
the container costs 150 ms even empty, out of the sandbox's own cpu quota: not used.
A sandbox is measured after every command of its shells (so the command that crosses the
limit is the one that ends the episode, the same way every time) and every POLL_S between
them (a background writer, a long command), backing off so that measuring takes at most
MAX_SHARE of a core per sandbox. Past the limit the container is removed at once, which frees
the disk; the command under way ends, and every later use of the sandbox raises
DiskLimitExceeded.

Residual risk (watchdog only): it stops a sandbox after the fact. Between two measurements,
up to POLL_S (longer for a layer of many files), a writer at disk speed, or one `fallocate` of
any size (well under a second), can take what the host's disk has free; the space comes back
when the container is removed, at most one measurement later. Bind mounts obsspec makes are
none; /dev/shm and other tmpfs are memory, inside the memory limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from obsspec.environments.errors import DiskLimitExceeded

DEFAULT_STORAGE_MB = 4096  # a task that names no `storage`; see docs/tasks.md
POLL_S = 1.0  # between measurements, at least
MAX_SHARE = 0.02  # of a core, per sandbox, for measuring
MIB = 1024 * 1024
QUOTA_REFUSED = re.compile(r"storage[-_ ]?opt", re.IGNORECASE)
_quota_works: dict[str, bool] = {}  # daemon (API URL) -> its driver takes --storage-opt size
T = TypeVar("T")


def create_limited(client, create: Callable[..., Any], storage_mb: int) -> tuple[Any, bool]:
    """create(**options) a container with a disk quota where the daemon's storage driver
    takes one: (container, True); else without it: (container, False), and a watchdog must
    guard it. A daemon that refused the quota once is not asked again."""
    import docker.errors

    daemon = str(getattr(client.api, "base_url", ""))
    if _quota_works.get(daemon, True):
        try:
            container = create(storage_opt={"size": f"{storage_mb}M"})
        except docker.errors.APIError as e:
            if not QUOTA_REFUSED.search(str(e)):
                raise
            _quota_works[daemon] = False
        else:
            _quota_works[daemon] = True
            return container, True
    return create(), False


def allocated_bytes(root: str) -> int:
    """Bytes allocated to the files under root (st_blocks), not following links; what
    vanishes during the walk counts nothing."""
    total, stack = 0, [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    total += entry.stat(follow_symlinks=False).st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                except OSError:
                    continue
    return total


def host_paths(attrs: dict) -> list[str] | None:
    """The container's writable layer and anonymous volumes as host directories, or None
    where they cannot be read from here (a remote daemon, a user without the right)."""
    upper = ((attrs.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
    if not upper or not os.access(upper, os.R_OK | os.X_OK):
        return None
    volumes = [m.get("Source") for m in attrs.get("Mounts") or [] if m.get("Type") == "volume"]
    return [upper, *(v for v in volumes if v and os.access(v, os.R_OK | os.X_OK))]


class LayerMeter:
    """Bytes a container has written: a walk on the host where possible, else the daemon's."""

    def __init__(self, client, attrs: dict) -> None:
        self.api = client.api
        self.container_id = attrs["Id"]
        self.paths = host_paths(attrs)

    def used_bytes(self) -> int:
        if self.paths is not None:
            return sum(allocated_bytes(path) for path in self.paths)
        import docker.errors

        url = self.api._url("/containers/{0}/json", self.container_id)
        try:
            return self.api._result(self.api._get(url, params={"size": 1}), True)["SizeRw"] or 0
        except docker.errors.NotFound:
            return 0  # removed: it holds nothing


def over_limit(meter: LayerMeter, limit_mb: int) -> str | None:
    """Why the container is past its limit, or None."""
    used = meter.used_bytes()
    if used <= limit_mb * MIB:
        return None
    return (
        f"the sandbox wrote {used / MIB:.0f} MiB, past its disk limit of {limit_mb} MiB: "
        "it was stopped and removed"
    )


def next_poll_s(cost_s: float) -> float:
    """Seconds to the next measurement, so that measuring takes at most MAX_SHARE."""
    return max(POLL_S, cost_s / MAX_SHARE)


class DiskWatch:
    """The watchdog of one sandbox: measures in the background and after each command;
    past the limit, calls stop (which removes the container) once."""

    def __init__(self, meter: LayerMeter, limit_mb: int, stop: Callable[[], Awaitable]) -> None:
        self.meter, self.limit_mb, self._stop = meter, limit_mb, stop
        self.exceeded: str | None = None
        self._tripped = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def check(self) -> None:
        async with self._lock:
            if self.exceeded is None:
                found = await asyncio.to_thread(over_limit, self.meter, self.limit_mb)
                if found is not None:
                    self.exceeded = found
                    self._tripped.set()
                    await self._stop()

    async def _poll(self) -> None:
        while self.exceeded is None:
            start = time.monotonic()
            with contextlib.suppress(Exception):  # a daemon hiccup: the next command shows it
                await self.check()
            await asyncio.sleep(next_poll_s(time.monotonic() - start))

    def raise_if_exceeded(self) -> None:
        if self.exceeded is not None:
            raise DiskLimitExceeded(
                self.exceeded,
                hint="a task that needs more says so in task.toml ([environment] storage = "
                "'10G'), up to the run's sandbox.max_storage_mb",
            )

    async def guard(self, work: Callable[[], Awaitable[T]]) -> T:
        """work() (a command in the sandbox), ended early if the watchdog trips meanwhile, and
        measured after: DiskLimitExceeded once the sandbox is past its limit."""
        self.raise_if_exceeded()
        task = asyncio.ensure_future(work())
        tripped = asyncio.ensure_future(self._tripped.wait())
        try:
            await asyncio.wait({task, tripped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            tripped.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self.raise_if_exceeded()  # the container was removed under the command
        result = task.result()
        await self.check()
        self.raise_if_exceeded()
        return result


class NoWatch:
    """Where the storage driver enforces the quota itself: nothing to watch."""

    exceeded = None

    async def guard(self, work: Callable[[], Awaitable[T]]) -> T:
        return await work()

    def raise_if_exceeded(self) -> None:
        pass

    async def close(self) -> None:
        pass


NO_WATCH = NoWatch()


class ThreadWatch:
    """The watchdog for a blocking caller (`env run`): a thread measures every POLL_S (or
    less often, see next_poll_s) and calls stop once past the limit; `check` measures now."""

    def __init__(self, meter: LayerMeter, limit_mb: int, stop: Callable[[], None]) -> None:
        self.meter, self.limit_mb, self._stop = meter, limit_mb, stop
        self.exceeded: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="disk-watch", daemon=True)

    def __enter__(self) -> ThreadWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def check(self) -> None:
        if self.exceeded is None:
            self.exceeded = over_limit(self.meter, self.limit_mb)
            if self.exceeded is not None:
                self._stop()

    def _poll(self) -> None:
        while not self._done.is_set() and self.exceeded is None:
            start = time.monotonic()
            with contextlib.suppress(Exception):
                self.check()
            self._done.wait(next_poll_s(time.monotonic() - start))
