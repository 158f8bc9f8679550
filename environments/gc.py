"""Finding and removing sandbox containers that their run left behind.

Every container obsspec starts carries labels: the run id, the pid of the process that owns
it, and that process's host. A container whose owner process is dead on this host is garbage
(the run crashed or was killed with SIGKILL); `obsspec env gc` removes those, with their
anonymous volumes. Containers of live runs, or of other hosts, are left alone unless asked.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from obsspec.environments.docker_api import connect
from obsspec.environments.sandbox import LABEL_HOST, LABEL_PID, LABEL_RUN, remove_container


@dataclass
class GcReport:
    removed: list[str] = field(default_factory=list)  # short container ids
    kept_live: int = 0  # owned by a process that is still running
    kept_other_host: int = 0


def owner_alive(pid_label: str | None) -> bool:
    try:
        pid = int(pid_label or "")
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def obsspec_containers(client, run_id: str | None = None) -> list:
    label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
    # ignore_removed: a container another process removes between the listing and its
    # inspection is gone, not an error (concurrent runs collect each other's dead ones).
    return client.containers.list(all=True, filters={"label": label}, ignore_removed=True)


def gc_containers(client, *, everything: bool = False, dry_run: bool = False) -> GcReport:
    """Remove containers of dead runs on this host (every obsspec container if everything)."""
    report = GcReport()
    host = socket.gethostname()
    for container in obsspec_containers(client):
        labels = container.labels
        if not everything:
            if labels.get(LABEL_HOST) != host:
                report.kept_other_host += 1
                continue
            if owner_alive(labels.get(LABEL_PID)):
                report.kept_live += 1
                continue
        if not dry_run:
            remove_container(container)
        report.removed.append(container.short_id)
    return report


def remove_task_images(client, *, dry_run: bool = False) -> list[str]:
    """Remove cached task images (obsspec-task/*) that no container uses; they are rebuilt
    on demand from their task directories."""
    import docker.errors

    from obsspec.environments.tasks.images import TASK_REPO

    containers = client.containers.list(all=True, ignore_removed=True)
    in_use = {c.image.id for c in containers if c.image is not None}
    removed = []
    for image in client.images.list(name=f"{TASK_REPO}/*"):
        if image.id in in_use:
            continue
        for tag in image.tags:
            if not dry_run:
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(tag)
            removed.append(tag)
    return removed


def remove_run_containers(client, run_id: str) -> int:
    """Remove every container of one run; returns how many there were."""
    containers = obsspec_containers(client, run_id)
    for container in containers:
        remove_container(container)
    return len(containers)


@contextlib.contextmanager
def run_scope(prefix: str) -> Iterator[tuple[object, str]]:
    """A connected Docker client and a fresh run id; when the block ends (normally, on an
    error or on Ctrl-C) every container labelled with that run is removed."""
    client = connect()
    run_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    try:
        yield client, run_id
    finally:
        remove_run_containers(client, run_id)
        client.close()
