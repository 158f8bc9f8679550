"""`docker build` through the SDK, streaming the log and failing with its last lines."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from obsspec.environments.errors import ImageBuildError

LogFn = Callable[[str], None]
TAIL_LINES = 20


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
) -> list[str]:
    """Build context into tag (never pulling: FROM may name a local image). Returns the log
    tail; raises ImageBuildError carrying it when a step fails.

    dockerfile_text, when given, is built instead of the context's Dockerfile: it is written
    outside the context, and the SDK ships it inside the build's tar (the context is not
    touched)."""
    if dockerfile_text is None:
        return _build(client, context, tag, buildargs, labels, on_log, dockerfile)
    with tempfile.TemporaryDirectory(prefix="obsspec-dockerfile-") as tmp:
        path = Path(tmp) / "Dockerfile"
        path.write_text(dockerfile_text)
        return _build(client, context, tag, buildargs, labels, on_log, str(path))


def _build(client, context, tag, buildargs, labels, on_log, dockerfile) -> list[str]:
    import docker.errors

    tail: list[str] = []
    try:
        stream = client.api.build(
            path=str(context),
            tag=tag,
            buildargs=buildargs or {},
            labels=labels or {},
            dockerfile=dockerfile,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise ImageBuildError(
                    f"building {tag} failed: {chunk['error'].strip()}", log_tail=tail
                )
            for line in chunk.get("stream", "").splitlines():
                if line.strip():
                    tail = [*tail[-(TAIL_LINES - 1) :], line.rstrip()]
                    on_log(line.rstrip())
    except docker.errors.APIError as e:
        raise ImageBuildError(f"building {tag} failed: {e.explanation}", log_tail=tail) from e
    return tail


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
