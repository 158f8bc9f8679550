"""Task images: built once per content hash, one build at a time per image, a few at once.

A task with a build context gets `obsspec-task/<id>:<hash>`, the hash over the context and
the image map's replacements for its FROM images (with the replacement images' ids): the
same context is never built twice (even by concurrent episodes, or by two processes on one
machine: environments.node_lock), and a changed context, map or mapped image gets a new tag.
A task naming a prebuilt image uses it (or its mapped image) as is.

Every base image must be on this machine before a build starts (Docker would otherwise pull
a missing FROM even with pull=False, and fail with a registry error): a missing one is
pulled once, and if that fails the task fails with a one-line MissingImageError naming the
image, the task and --image-map.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from obsspec.environments.build import docker_build, local_image, tree_hash
from obsspec.environments.errors import ImageBuildError, MissingImageError
from obsspec.environments.node_lock import build_once_per_node
from obsspec.environments.tasks.image_map import FLAG, ImageMap, base_images, rewrite
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.text import read_task_text

TASK_REPO = "obsspec-task"


@dataclass
class BuildPlan:
    tag: str
    bases: dict[str, str] = field(default_factory=dict)  # FROM image -> image built on
    dockerfile_text: str | None = None  # the rewritten Dockerfile, if the map changed it


class TaskImages:
    def __init__(
        self,
        client,
        *,
        image_map: Mapping[str, str] | None = None,
        max_parallel_builds: int = 2,
        on_log: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.client = client
        self.map = ImageMap(image_map)
        self.on_log = on_log
        self._builds = asyncio.Semaphore(max_parallel_builds)
        self._locks: dict[str, asyncio.Lock] = {}
        self._present: dict[str, bool] = {}  # image -> here (or pulled), asked once per run

    async def ensure(self, task: Task) -> str:
        """The image tag for task, building it (or pulling its base images) first if needed."""
        if task.image:
            image = await asyncio.to_thread(self.map.target, task.image, self._exists)
            await self._require(task, task.image, image or task.image)
            return image or task.image
        plan = await asyncio.to_thread(self._plan, task)
        for source, image in plan.bases.items():
            await self._require(task, source, image)

        async def built() -> bool:
            return await asyncio.to_thread(local_image, self.client, plan.tag) is not None

        async def build() -> None:
            async with self._builds:
                await self._build(task, plan)

        # The asyncio lock orders this process's episodes; the node lock, other processes
        # on this machine (Ray workers) that share its Docker daemon.
        async with self._locks.setdefault(plan.tag, asyncio.Lock()):
            await build_once_per_node(f"image:{plan.tag}", built, build)
        return plan.tag

    def _exists(self, image: str) -> bool:
        return local_image(self.client, image) is not None

    def _plan(self, task: Task) -> BuildPlan:
        dockerfile = read_task_text(task.build_context / task.dockerfile, root=task.path)
        bases = {}
        for source in base_images(dockerfile):
            bases[source] = self.map.target(source, self._exists) or source
        replacements = {s: image for s, image in bases.items() if image != s}
        digest = tree_hash(task.build_context)
        if replacements:  # unmapped tasks keep the tags they always had
            ids = {image: getattr(local_image(self.client, image), "id", None) for image in bases}
            mapped = json.dumps([digest, sorted(replacements.items()), ids], sort_keys=True)
            digest = hashlib.sha256(mapped.encode()).hexdigest()
        name = re.sub(r"[^a-z0-9._-]+", "-", task.id.lower()).strip("-.") or "task"
        return BuildPlan(
            tag=f"{TASK_REPO}/{name}:{digest[:12]}",
            bases=bases,
            dockerfile_text=rewrite(dockerfile, replacements) if replacements else None,
        )

    async def _require(self, task: Task, source: str, image: str) -> None:
        """image (source, or what the map made of it) is here, pulled once if it was not."""
        async with self._locks.setdefault(f"base:{image}", asyncio.Lock()):
            if image not in self._present:
                present = await asyncio.to_thread(self._exists, image)
                if not present and image == source:
                    present = await asyncio.to_thread(self._pull, image)
                self._present[image] = present
        if self._present[image]:
            return
        if image == source:
            raise MissingImageError(
                f"task {task.id}: image {source} is not on this machine and cannot be pulled; "
                f"map it to a local image with {FLAG} {source}=obsspec/base "
                f"(or [images] map in --config, or OBSSPEC_IMAGE_MAP)"
            )
        raise MissingImageError(
            f"task {task.id}: {FLAG} maps {source} to {image}, which is not on this machine"
        )

    def _pull(self, image: str) -> bool:
        import docker.errors
        from docker.utils import parse_repository_tag

        repository, tag = parse_repository_tag(image)
        self.on_log(f"pulling {image}")
        try:
            self.client.images.pull(repository, tag=tag or "latest")
        except docker.errors.APIError as e:
            self.on_log(f"cannot pull {image}: {e.explanation}")
            return False
        return True

    async def _build(self, task: Task, plan: BuildPlan) -> None:
        labels = {"obsspec.task": task.id, "obsspec.task_hash": task.content_hash}
        build = asyncio.to_thread(
            docker_build,
            self.client,
            task.build_context,
            plan.tag,
            labels=labels,
            dockerfile=task.dockerfile,
            dockerfile_text=plan.dockerfile_text,
            on_log=self.on_log,
        )
        try:
            await asyncio.wait_for(build, task.build_timeout_s)
        except TimeoutError:
            raise ImageBuildError(
                f"building {plan.tag} took over {task.build_timeout_s:g} s"
            ) from None
        except ImageBuildError as e:
            raise ImageBuildError(
                f"task {task.id} ({task.path}): {e}", log_tail=e.log_tail, hint=e.hint
            ) from e
