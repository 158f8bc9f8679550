"""Joining and leaving Docker's default bridge network: how a sandbox under the `verify`
network policy gives its verifier a network and takes it away again (DockerSandbox.
network_for_verifier). A container on Docker's `none` network must leave it to join another.
"""

from __future__ import annotations

import contextlib

from obsspec.environments.errors import SandboxError

VERIFIER_NETWORK = "bridge"  # Docker's default network: what `docker run` gives a container


def join_bridge(api, container_id: str) -> None:
    import docker.errors

    with contextlib.suppress(docker.errors.APIError):  # already left it (a 2nd verifier)
        api.disconnect_container_from_network(container_id, "none")
    try:
        api.connect_container_to_network(container_id, VERIFIER_NETWORK)
    except docker.errors.APIError as e:
        raise SandboxError(
            f"cannot give the verifier a network ({VERIFIER_NETWORK}): {e.explanation}"
        ) from e


def leave_bridge(api, container_id: str) -> None:
    import docker.errors

    try:
        api.disconnect_container_from_network(container_id, VERIFIER_NETWORK)
    except docker.errors.NotFound:
        pass  # the container is gone
    except docker.errors.APIError as e:
        raise SandboxError(f"cannot take the network away again: {e.explanation}") from e
