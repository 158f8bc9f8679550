"""Task images of a local rl run, built by the driver before any actor starts."""

from __future__ import annotations

from obsspec.environments.docker_api import connect
from obsspec.environments.tasks.model import Task
from obsspec.rl.config import RLConfig
from obsspec.rollout.events import Event, TaskSkipped
from obsspec.rollout.sandboxes import build_images, require_images


async def build_images_here(ray, config: RLConfig, tasks: list[Task]) -> dict[str, str]:
    """On a one-node cluster on this machine the workers share this Docker daemon: the task
    images are built here before any actor starts, so tasks that cannot run cost no engine
    start (none left is NoRunnableTask, with the first build error). Returns {task id: why it
    cannot run}; on any other cluster {} (each worker builds its own and says what failed)."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) != 1 or nodes[0].get("NodeManagerAddress") != ray.util.get_node_ip_address():
        return {}
    settings = config.session_settings()
    planned = dict.fromkeys((t.id for t in tasks), 0)
    skipped: dict[str, str] = {}

    def emit(event: Event) -> None:
        if isinstance(event, TaskSkipped):
            skipped[event.task_id] = event.reason

    client = connect()
    try:
        images = await build_images(
            client, {t.id: t for t in tasks}, planned, False, emit,
            settings.images.map, settings.network, ceiling=settings.sandbox,
        )  # fmt: skip
    finally:
        client.close()
    require_images(images, planned, skipped)
    return skipped
