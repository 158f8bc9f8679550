"""Run one command in a fresh, throwaway container: the smallest real use of a sandbox image.

Used by `obsspec env run` (a smoke test of an image) and by doctor. Episodes use persistent
sandboxes instead, where a shell survives between commands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from environments.errors import SandboxError
from environments.sandbox import HOSTNAME, run_labels

LABEL = "obsspec.oneshot"


@dataclass(frozen=True)
class OneShotResult:
    stdout: str
    stderr: str
    exit_code: int
    seconds: float
    timed_out: bool


def run_once(client, image: str, command: str, timeout_s: float = 60.0) -> OneShotResult:
    """`bash -lc command` in a new container without network; the container is always removed."""
    import docker.errors
    import requests.exceptions

    start = time.monotonic()
    try:
        container = client.containers.create(
            image,
            ["bash", "-lc", command],
            hostname=HOSTNAME,
            network_disabled=True,
            labels={LABEL: "1", **run_labels("oneshot")},
            security_opt=["no-new-privileges"],
            stdin_open=False,
        )
    except docker.errors.ImageNotFound:
        raise SandboxError(
            f"image {image} does not exist", hint="build it with: obsspec env build"
        ) from None
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot create a container from {image}: {e.explanation}") from e
    timed_out = False
    try:
        container.start()
        try:
            exit_code = container.wait(timeout=timeout_s)["StatusCode"]
        except requests.exceptions.ConnectionError:  # the SDK's read timeout
            timed_out = True
            container.kill()
            exit_code = container.wait(timeout=30)["StatusCode"]
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    return OneShotResult(stdout, stderr, exit_code, time.monotonic() - start, timed_out)
