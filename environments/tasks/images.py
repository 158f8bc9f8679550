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

A build runs under the run's network and the task's sandbox limits, capped by the run's
sandbox ceiling (build_limits): no
network under `--network none`, a network where the verifier (also the task author's code)
gets one. It ends at the task's build_timeout_sec, or when the coroutine awaiting it is
cancelled (Ctrl-C, SIGTERM): its connection is cut, the daemon kills the step's container,
and the container is gone before the error (or the cancellation) goes on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from obsspec.environments.build import (
    BuildLimits,
    BuildStop,
    docker_build,
    local_image,
    remove_build_containers,
    tree_hash,
)
from obsspec.environments.ceiling import SandboxCeiling, capped
from obsspec.environments.errors import ImageBuildError, MissingImageError
from obsspec.environments.node_lock import build_once_per_node
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.tasks.image_map import FLAG, ImageMap, base_images, rewrite
from obsspec.environments.tasks.model import Task
from obsspec.environments.tasks.text import read_task_text

TASK_REPO = "obsspec-task"
STOP_WAIT_S = 5.0  # a stopped build's thread and containers end within this (cut: at once)
NO_NETWORK_HINT = (
    "builds get no network under --network none; if a step needs one, --network verify "
    "gives builds one (the image is then kept, and runs under --network none use it)"
)
# What a step says when it reached for a network it lacks (apt, pip, curl, git, npm, Python's
# socket): under --network none, such a failure gets NO_NETWORK_HINT.
NO_NETWORK = re.compile(
    r"Temporary failure (?:in name resolution|resolving)|Could not resolve|unable to resolve"
    r"|Name or service not known|Network is unreachable|Failed to establish a new connection"
    r"|EAI_AGAIN|No route to host|Failed to fetch",
    re.IGNORECASE,
)


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
        network: NetworkPolicy = NetworkPolicy.none,
        ceiling: SandboxCeiling | None = None,
    ) -> None:
        """network: the run's policy; ceiling: the run's sandbox ceiling (default: the
        default one); builds run under both (build_limits)."""
        self.client = client
        self.map = ImageMap(image_map)
        self.on_log = on_log
        self.network = network
        self.ceiling = ceiling or SandboxCeiling()
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

    def build_limits(self, task: Task) -> BuildLimits:
        """A network exactly where the run gives the verifier one; the sandbox's limits (as
        the task asks, under the run's ceiling)."""
        limits, _ = capped(task.limits, self.ceiling)
        return BuildLimits(
            network=self.network is not NetworkPolicy.none,
            cpus=limits.cpus,
            memory_mb=limits.memory_mb,
            pids=limits.pids,
        )

    async def _build(self, task: Task, plan: BuildPlan) -> None:
        labels = {"obsspec.task": task.id, "obsspec.task_hash": task.content_hash}
        limits, stop = self.build_limits(task), BuildStop()
        building = asyncio.ensure_future(
            asyncio.to_thread(
                docker_build,
                self.client,
                task.build_context,
                plan.tag,
                labels=labels,
                dockerfile=task.dockerfile,
                dockerfile_text=plan.dockerfile_text,
                on_log=self.on_log,
                limits=limits,
                stop=stop,
            )
        )
        building.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen: stopped
        try:
            # shielded: the thread cannot be cancelled, only stopped (_stop)
            await asyncio.wait_for(asyncio.shield(building), task.build_timeout_s)
        except TimeoutError:
            await self._stop(stop, building, plan.tag)
            raise ImageBuildError(
                f"task {task.id} ({task.path}): building {plan.tag} took over "
                f"{task.build_timeout_s:g} s (build_timeout_sec) and was stopped"
            ) from None
        except asyncio.CancelledError:
            await self._stop(stop, building, plan.tag)
            raise
        except ImageBuildError as e:
            lacked_network = not limits.network and NO_NETWORK.search(e.with_log())
            hint = e.hint or (NO_NETWORK_HINT if lacked_network else None)
            raise ImageBuildError(
                f"task {task.id} ({task.path}): {e}", log_tail=e.log_tail, hint=hint
            ) from e

    async def _stop(self, stop: BuildStop, building: asyncio.Future, tag: str) -> None:
        """Cut the build's connection, let its thread end, and see its containers gone."""
        stop.stop()
        await asyncio.wait([building], timeout=STOP_WAIT_S)
        left = await asyncio.to_thread(
            remove_build_containers, self.client, stop.containers, STOP_WAIT_S
        )
        if left:
            self.on_log(f"warning: containers {', '.join(left)} of build {tag} are still there")
