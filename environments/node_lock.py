"""One builder per node: a file lock that every process on this machine sees.

    async with node_lock(f"image:{tag}"):
        if not built():          # another process may have built it while this one waited
            build()

    await build_once_per_node(tag, is_built, build)   # the same, as one call

An asyncio.Lock only orders the coroutines of one process, but the Docker daemon is the
node's: two Ray workers on one node would each build the same task image at once. The lock is
`fcntl.flock` on a file named after the key, in a per-user runtime directory (LOCK_DIR): the
kernel drops it when its holder exits, however it exits, so a killed builder never leaves a
stale lock behind. Waiting polls (POLL_S) instead of blocking a thread, so a cancelled waiter
stops waiting at once and never takes the lock afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

POLL_S = 0.1


def default_lock_dir() -> Path:
    """Per user: locks of one user's processes meet there, and another user's files never
    block them (a shared /tmp may hold another user's lock file, unwritable to this one)."""
    return Path(tempfile.gettempdir()) / f"obsspec-{os.getuid()}" / "locks"


def lock_path(key: str, lock_dir: Path | None = None) -> Path:
    """The lock file of key: readable, and unique per key (a hash keeps tags with '/' or ':'
    distinct and short)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", key)[:60]
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return (lock_dir or default_lock_dir()) / f"{readable}-{digest}.lock"


@contextlib.asynccontextmanager
async def node_lock(key: str, lock_dir: Path | None = None) -> AsyncIterator[None]:
    """Hold the node-wide lock of key (waiting for another process to let it go)."""
    path = lock_path(key, lock_dir)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(POLL_S)
        yield  # closing fd below releases the lock
    finally:
        os.close(fd)


async def build_once_per_node(
    key: str,
    is_built: Callable[[], Awaitable[bool]],
    build: Callable[[], Awaitable[None]],
    lock_dir: Path | None = None,
) -> bool:
    """build() unless is_built(), asked again under the node lock of key; True when this call
    built it."""
    if await is_built():
        return False
    async with node_lock(key, lock_dir):
        if await is_built():
            return False
        await build()
    return True
