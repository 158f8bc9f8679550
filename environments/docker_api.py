"""The one way obsspec connects to the Docker engine, with errors that say how to fix it."""

from __future__ import annotations

import os

from obsspec.environments.errors import DockerUnavailable

START_HINT = (
    "start one: as root, `make setup` installs Debian's docker.io and starts dockerd "
    "(or run `dockerd &`); or set DOCKER_HOST to a running daemon"
)
# Root causes worth naming, as they appear inside the SDK's nested error text.
KNOWN_CAUSES = (
    "No such file or directory",
    "Connection refused",
    "Permission denied",
    "timed out",
    "Name or service not known",
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
        text = str(e)
        reason = next((c for c in KNOWN_CAUSES if c in text), text[:160] or type(e).__name__)
        raise DockerUnavailable(
            f"no Docker daemon answers at {where}: {reason}", hint=START_HINT
        ) from e
    return client
