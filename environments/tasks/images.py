"""Task images: built once per content hash, one build at a time per image, a few at once.

A task with a build context gets `obsspec-task/<id>:<hash of the context>`; the same context
is never built twice (even by concurrent episodes), and a changed context gets a new tag.
A task naming a prebuilt image uses it as is (it must exist locally, or be pullable).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

from environments.build import docker_build, local_image, tree_hash
from environments.errors import ImageBuildError
from environments.tasks.model import Task

TASK_REPO = "obsspec-task"


def task_image_tag(task: Task) -> str:
    if task.image:
        return task.image
    name = re.sub(r"[^a-z0-9._-]+", "-", task.id.lower()).strip("-.") or "task"
    return f"{TASK_REPO}/{name}:{tree_hash(task.build_context)[:12]}"


class TaskImages:
    def __init__(
        self,
        client,
        *,
        max_parallel_builds: int = 2,
        on_log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.client = client
        self.on_log = on_log
        self._builds = asyncio.Semaphore(max_parallel_builds)
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, task: Task) -> str:
        """The image tag for task, building (or pulling) it first if needed."""
        tag = task_image_tag(task)
        async with self._locks.setdefault(tag, asyncio.Lock()):
            if await asyncio.to_thread(local_image, self.client, tag) is not None:
                return tag
            if task.image:
                await asyncio.to_thread(self._pull, tag)
                return tag
            async with self._builds:
                await self._build(task, tag)
        return tag

    def _pull(self, tag: str) -> None:
        import docker.errors

        try:
            self.client.images.pull(tag)
        except docker.errors.APIError as e:
            raise ImageBuildError(
                f"image {tag} is not here and cannot be pulled: {e.explanation}"
            ) from e

    async def _build(self, task: Task, tag: str) -> None:
        labels = {"obsspec.task": task.id, "obsspec.task_hash": task.content_hash}
        build = asyncio.to_thread(
            docker_build,
            self.client,
            task.build_context,
            tag,
            labels=labels,
            dockerfile=task.dockerfile,
            on_log=self.on_log,
        )
        try:
            await asyncio.wait_for(build, task.build_timeout_s)
        except TimeoutError:
            raise ImageBuildError(f"building {tag} took over {task.build_timeout_s:g} s") from None
        except ImageBuildError as e:
            raise ImageBuildError(f"task {task.id} ({task.path}): {e}") from e
