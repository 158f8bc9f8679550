"""Run one command in a fresh, throwaway container: the smallest real use of a sandbox image.

Used by `obsspec env run` (a smoke test of an image). Episodes use persistent sandboxes
instead, where a shell survives between commands.

The container is isolated and limited exactly like a sandbox (`container_options`: init,
no network, cpus, memory, pids, no-new-privileges, few capabilities). Its output never goes
through Docker's log (log driver `none`): we attach to its streams before it starts and keep
the head and tail of stdout and stderr in CappedBuffers, so gigabytes of output cost a bounded
amount of memory. The command waits for a newline on stdin before it runs (then its stdin is
/dev/null): the daemon forwards stdin only once our attachment is complete, so no early output
is lost. `timeout_s` bounds the call: creating, starting and reading share it (creating and
starting are not interrupted; a daemon under heavy load can take seconds for them), then the
container is killed and removed (one call, normally well under a second). A timed-out command
reports exit code 124, as coreutils' `timeout` does. The container is removed however the call
ends, Ctrl-C included. Its disk is limited as a sandbox's (environments/disk_limit.py): a
quota, or a watchdog thread that removes the container past the limit, and measures once more
when the command ends; either way the result's `disk_limit` says why it was stopped.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass

from obsspec.environments.capture import CappedBuffer, FrameSplitter
from obsspec.environments.disk_limit import LayerMeter, ThreadWatch, create_limited
from obsspec.environments.errors import SandboxError
from obsspec.environments.sandbox import SandboxLimits, container_options, remove_container_named

LABEL = "obsspec.oneshot"
TIMEOUT_EXIT_CODE = 124
DISK_LIMIT_EXIT_CODE = 137  # killed (SIGKILL), as Docker reports a container it removes
OUTPUT_CAP_BYTES = 256 * 1024  # per stream, head and tail each (as a sandbox's shell)
WAIT_GRACE_S = 2.0  # for the exit code once both streams have ended
LAST_READ_S = 0.05  # at the deadline, output already on its way is still taken
# `bash -lc command` once the go-ahead newline arrives on stdin.
WAIT_THEN_RUN = 'IFS= read -r _; exec bash -lc "$1" </dev/null'
STDOUT, STDERR = 1, 2


@dataclass(frozen=True)
class OneShotResult:
    stdout: str
    stderr: str
    exit_code: int  # TIMEOUT_EXIT_CODE when timed out
    seconds: float
    timed_out: bool
    truncated: bool  # some output was dropped from the middle of a stream
    disk_limit: str | None = None  # why it was stopped for writing past its disk limit


def run_once(
    client,
    image: str,
    command: str,
    timeout_s: float = 60.0,
    limits: SandboxLimits | None = None,
    *,
    run_id: str = "oneshot",
    cap_bytes: int = OUTPUT_CAP_BYTES,
) -> OneShotResult:
    """`bash -lc command` in a new container under `limits` (no network by default)."""
    start = time.monotonic()
    deadline = start + timeout_s
    name = f"obsspec-oneshot-{uuid.uuid4().hex[:12]}"  # found by name if create is interrupted
    buffers = {STDOUT: CappedBuffer(cap_bytes), STDERR: CappedBuffer(cap_bytes)}
    limits = limits or SandboxLimits()
    watch = None
    try:
        container, quota = _create(client, image, command, limits, name, run_id)
        if not quota:
            stop = lambda: remove_container_named(client.api, name)  # noqa: E731
            watch = ThreadWatch(LayerMeter(client, container.attrs), limits.disk_mb, stop)
        with watch or contextlib.nullcontext():
            exit_code = _start_and_read(client, container, buffers, deadline, watch)
        if watch is not None:
            watch.check()  # a write that ended between two measurements
    finally:
        _remove(client, name)
    out, err = buffers[STDOUT], buffers[STDERR]
    disk_limit = watch.exceeded if watch is not None else None
    if disk_limit is not None:
        exit_code = DISK_LIMIT_EXIT_CODE
    return OneShotResult(
        stdout=out.text(),
        stderr=err.text(),
        exit_code=TIMEOUT_EXIT_CODE if exit_code is None else exit_code,
        seconds=time.monotonic() - start,
        timed_out=exit_code is None,
        truncated=out.truncated or err.truncated,
        disk_limit=disk_limit,
    )


def _create(client, image: str, command: str, limits: SandboxLimits, name: str, run_id: str):
    import docker.errors
    from docker.types import LogConfig

    options = container_options(limits, run_id)
    options["labels"] = {**options["labels"], LABEL: "1"}

    def create(**disk):
        return client.containers.create(
            image,
            ["bash", "-c", WAIT_THEN_RUN, "oneshot", command],
            name=name,
            log_config=LogConfig(type=LogConfig.types.NONE),
            stdin_open=True,
            tty=False,
            **options,
            **disk,
        )

    try:
        return create_limited(client, create, limits.disk_mb)
    except docker.errors.ImageNotFound:
        raise SandboxError(
            f"image {image} does not exist", hint="build it with: obsspec env build"
        ) from None
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot create a container from {image}: {e.explanation}") from e


def _start_and_read(
    client, container, buffers: dict[int, CappedBuffer], deadline: float, watch=None
):
    """The command's exit code, or None if it ran past the deadline (or the disk watchdog
    removed the container: it has none)."""
    import docker.errors

    try:
        streams = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        raw = client.api.attach_socket(container.id, streams)
        sock = getattr(raw, "_sock", raw)
        try:
            container.start()
            sock.sendall(b"\n")  # the go-ahead (WAIT_THEN_RUN)
            ended = _read_frames(sock, buffers, deadline)
        finally:
            raw.close()
            sock.close()
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot run the command: {e.explanation}") from e
    if not ended or (watch is not None and watch.exceeded):
        return None
    # Both streams closed: the command has exited (unless it closed them itself).
    return _wait(container, max(deadline - time.monotonic(), WAIT_GRACE_S))


def _read_frames(sock, buffers: dict[int, CappedBuffer], deadline: float) -> bool:
    """Read the attached stream into the buffers; True when it ended, False at the deadline."""
    frames = FrameSplitter()
    while True:
        sock.settimeout(max(deadline - time.monotonic(), LAST_READ_S))
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            return False
        if not data:
            return True
        for kind, piece in frames.feed(data):
            if kind in buffers:
                buffers[kind].add(piece)
        if time.monotonic() >= deadline:
            return False


def _wait(container, timeout_s: float) -> int | None:
    import docker.errors
    import requests.exceptions

    try:
        return container.wait(timeout=timeout_s)["StatusCode"]
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout):
        return None
    except docker.errors.NotFound:  # removed meanwhile (the disk watchdog)
        return None


def _remove(client, name: str) -> None:
    """Kill and remove the container if it exists (it may never have been created); a
    second Ctrl-C does not stop this."""
    try:
        remove_container_named(client.api, name)
    except KeyboardInterrupt:
        remove_container_named(client.api, name)
        raise
