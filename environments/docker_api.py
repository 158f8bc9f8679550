"""The one way obsspec connects to the Docker engine, with errors that say how to fix it."""

from __future__ import annotations

import os

from environments.errors import DockerUnavailable

START_HINT = (
    "start the Docker daemon (as root: `dockerd &`, or `make setup`, which installs Debian's "
    "docker.io and starts it), or point DOCKER_HOST at a running one"
)


def connect(timeout_s: float = 120.0):
    """A docker.DockerClient whose daemon has answered a ping."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=int(timeout_s))
        client.ping()
    except docker.errors.DockerException as e:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(e).split("(", 1)[0].strip() or type(e).__name__
        raise DockerUnavailable(
            f"no Docker daemon answers at {where}: {reason}", hint=START_HINT
        ) from e
    return client
