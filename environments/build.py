"""`docker build` through the SDK, streaming the log and failing with its last lines.

A build runs under BuildLimits (network or none, cpus, memory, pids) and can be stopped from
another thread (BuildStop): the daemon then kills and removes the step's container.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from obsspec.environments.errors import ImageBuildError

LogFn = Callable[[str], None]
TAIL_LINES = 20
RUNNING_IN = " ---> Running in "  # the classic builder's line as a RUN step's container starts


@dataclass(frozen=True)
class BuildLimits:
    """What a build's RUN steps get: a network or none (`network=False`: loopback only), and
    a sandbox's cpu quota, memory (no swap) and process limits. None: the daemon's default."""

    network: bool = True
    cpus: float | None = None
    memory_mb: int | None = None
    pids: int | None = None

    def params(self) -> dict[str, str | int]:
        """The classic /build API's query parameters (it has none for pids: see limit_pids)."""
        params: dict[str, str | int] = {} if self.network else {"networkmode": "none"}
        if self.memory_mb is not None:
            params["memory"] = params["memswap"] = self.memory_mb * 2**20
        if self.cpus is not None:
            params["cpuperiod"], params["cpuquota"] = 100_000, int(self.cpus * 100_000)
        return params


class BuildStop:
    """Stops a build from another thread: shutting its HTTP connection down makes the daemon
    cancel the build, kill the RUN step's container and remove it (it does the same when a
    client dies). The thread reading the log then ends at once. `containers`: the build
    containers the log named, for the caller to check that none is left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.stopped = False
        self.containers: list[str] = []

    def attach(self, client, response) -> None:
        sock = client.api._get_raw_response_socket(response)  # docker-py's own helper
        with self._lock:
            self._sock = getattr(sock, "_sock", sock)  # SocketIO wraps the socket
            stopped = self.stopped
        if stopped:
            self._cut()

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
        self._cut()

    def _cut(self) -> None:
        with self._lock:
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def docker_build(
    client,
    context: Path,
    tag: str,
    *,
    buildargs: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    on_log: LogFn = lambda _: None,
    dockerfile: str | None = None,
    dockerfile_text: str | None = None,
    limits: BuildLimits | None = None,
    stop: BuildStop | None = None,
) -> list[str]:
    """Build context into tag (never pulling: FROM may name a local image). Returns the log
    tail; raises ImageBuildError carrying it when a step fails, or when `stop` stopped it.

    dockerfile_text, when given, is built instead of the context's Dockerfile: it is written
    outside the context, and the SDK ships it inside the build's tar (the context is not
    touched). `limits`: the RUN steps' network and limits (None: the daemon's defaults)."""
    request = BuildRequest(tag, buildargs, labels, limits or BuildLimits(), stop or BuildStop())
    if dockerfile_text is None:
        return _build(client, context, request, on_log, dockerfile)
    with tempfile.TemporaryDirectory(prefix="obsspec-dockerfile-") as tmp:
        path = Path(tmp) / "Dockerfile"
        path.write_text(dockerfile_text)
        return _build(client, context, request, on_log, str(path))


@dataclass
class BuildRequest:
    tag: str
    buildargs: dict[str, str] | None
    labels: dict[str, str] | None
    limits: BuildLimits
    stop: BuildStop


def _build(client, context, request: BuildRequest, on_log, dockerfile) -> list[str]:
    import docker.errors

    tag, stop = request.tag, request.stop
    tail: list[str] = []
    response = None
    try:
        response = _post_build(client, context, request, dockerfile)
        stop.attach(client, response)
        for chunk in client.api._stream_helper(response, decode=True):
            if "error" in chunk:
                raise ImageBuildError(
                    f"building {tag} failed: {chunk['error'].strip()}", log_tail=tail
                )
            for line in chunk.get("stream", "").splitlines():
                if line.startswith(RUNNING_IN):
                    stop.containers.append(line.split()[-1])
                    limit_pids(client, line.split()[-1], request.limits.pids, on_log)
                if line.strip():
                    tail = [*tail[-(TAIL_LINES - 1) :], line.rstrip()]
                    on_log(line.rstrip())
    except docker.errors.APIError as e:
        raise ImageBuildError(f"building {tag} failed: {e.explanation}", log_tail=tail) from e
    except Exception as e:  # a connection cut by stop() breaks mid-read
        if not stop.stopped or isinstance(e, ImageBuildError):
            raise
    finally:
        if response is not None:
            response.close()
    if stop.stopped:
        raise ImageBuildError(f"building {tag} was stopped", log_tail=tail)
    return tail


def _post_build(client, context: Path, request: BuildRequest, dockerfile: str | None):
    """POST /build as docker-py's APIClient.build does, keeping the response (whose
    connection BuildStop cuts) rather than only its log's generator."""
    from docker import utils
    from docker.api.build import process_dockerfile

    api = client.api
    ignore = context / ".dockerignore"
    exclude = None
    if ignore.is_file():
        lines = (line.strip() for line in ignore.read_text().splitlines())
        exclude = [line for line in lines if line and not line.startswith("#")]
    named = process_dockerfile(dockerfile, str(context))
    archive = utils.tar(str(context), exclude=exclude, dockerfile=named)
    params = {
        "t": request.tag,
        "rm": True,
        "forcerm": True,
        "pull": False,
        "dockerfile": named[0],
        "buildargs": json.dumps(request.buildargs or {}),
        "labels": json.dumps(request.labels or {}),
        **request.limits.params(),
    }
    headers = {"Content-Type": "application/tar"}
    api._set_auth_headers(headers)  # as the SDK does: a FROM the daemon pulls may need them
    try:
        response = api._post(
            api._url("/build"),
            data=archive,
            params=params,
            headers=headers,
            stream=True,
            timeout=None,
        )
    finally:
        archive.close()
    api._raise_for_status(response)
    return response


def limit_pids(client, container_id: str, pids: int | None, on_log: LogFn) -> None:
    """Give a RUN step's container a pids limit. The build API takes none, so it is set as
    the daemon announces the container, which it does before starting it: the limit lands
    within milliseconds of the step's first process. A step that already ended needs none;
    any other refusal is said in the log."""
    import docker.errors

    if pids is None:
        return
    try:
        response = client.api._post_json(
            client.api._url("/containers/{0}/update", container_id), data={"PidsLimit": pids}
        )
        client.api._raise_for_status(response)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        on_log(f"warning: no pids limit on build step {container_id}: {e.explanation}")


def remove_build_containers(client, containers: list[str], wait_s: float = 5.0) -> list[str]:
    """After a stopped build: wait for the daemon to remove its containers (it does once it
    sees the connection gone), then remove any still there; returns those left."""
    deadline = time.monotonic() + wait_s
    left = [c for c in containers if container_exists(client, c)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [c for c in left if container_exists(client, c)]
    for container_id in left:
        import docker.errors

        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(container_id, force=True)
    return [c for c in left if container_exists(client, c)]


def container_exists(client, container_id: str) -> bool:
    import docker.errors

    try:
        client.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return False
    return True


def local_image(client, tag: str):
    """The image with this tag in the local Docker engine, or None (never pulls)."""
    import docker.errors

    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        return None


def tree_hash(root: Path) -> str:
    """sha256 over every file's relative path and bytes under root, in a fixed order. A link
    is hashed as its target's name, never read through: Docker's build context and the
    sandbox's uploads ship it as a link, and one that leads out of root must not put a file
    of this machine into the hash (rglob does not walk into linked directories)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_symlink() or p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        if path.is_symlink():
            h.update(b"\0link\0" + os.fsencode(os.readlink(path)) + b"\0")
        else:
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()
