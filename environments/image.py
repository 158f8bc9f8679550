"""The sandbox base image `obsspec/base`: its recipe, its hash, and building it once.

The recipe is the directory environments/images/base (Dockerfile + setup.sh). Its content hash
names the image (`obsspec/base:<hash>`), so the image is rebuilt only when the recipe changes;
`obsspec/base:latest` always points at the newest build. The Dockerfile starts FROM
debian:bookworm-slim when a registry is reachable, else FROM a debootstrapped image.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Literal

from obsspec.environments.bootstrap import bootstrap_image
from obsspec.environments.build import docker_build, local_image, tree_hash
from obsspec.environments.errors import ImageBuildError

BASE_REPO = "obsspec/base"
SUITE = "bookworm"
REGISTRY_BASE = f"debian:{SUITE}-slim"
Source = Literal["auto", "registry", "debootstrap"]
LogFn = Callable[[str], None]


def recipe_dir() -> Path:
    return Path(str(resources.files(__package__) / "images" / "base"))


def recipe_hash(directory: Path | None = None) -> str:
    """sha256 over the recipe's file names and bytes (and the suite), first 12 hex digits."""
    directory = directory or recipe_dir()
    return hashlib.sha256(f"suite={SUITE}\n{tree_hash(directory)}".encode()).hexdigest()[:12]


@dataclass
class BuildResult:
    tags: list[str]
    image_id: str
    recipe_hash: str
    source: str  # "cached" when nothing was built, else "registry" or "debootstrap"
    seconds: float
    log_tail: list[str] = field(default_factory=list)

    @property
    def built(self) -> bool:
        return self.source != "cached"


def ensure_base_image(
    client, *, source: Source = "auto", force: bool = False, on_log: LogFn = lambda _: None
) -> BuildResult:
    """Build obsspec/base unless an image of the current recipe exists (or force)."""
    start = time.monotonic()
    digest = recipe_hash()
    hashed, latest = f"{BASE_REPO}:{digest}", f"{BASE_REPO}:latest"
    image = None if force else local_image(client, hashed)
    if image is not None:
        image.tag(BASE_REPO, "latest")
        return BuildResult([hashed, latest], image.id, digest, "cached", time.monotonic() - start)
    base, used = choose_base(client, source, on_log)
    tail = build_recipe(client, base, hashed, digest, used, on_log)
    image = client.images.get(hashed)
    image.tag(BASE_REPO, "latest")
    return BuildResult([hashed, latest], image.id, digest, used, time.monotonic() - start, tail)


def choose_base(client, source: Source, on_log: LogFn) -> tuple[str, str]:
    """(image to build FROM, "registry" | "debootstrap")."""
    if source in ("auto", "registry") and registry_base_available(client, on_log):
        return REGISTRY_BASE, "registry"
    if source == "registry":
        raise ImageBuildError(
            f"cannot pull {REGISTRY_BASE}: no container registry is reachable",
            hint="use --source debootstrap (or auto) to build offline",
        )
    return bootstrap_image(client, SUITE, on_log), "debootstrap"


def registry_base_available(client, on_log: LogFn) -> bool:
    import docker.errors

    if local_image(client, REGISTRY_BASE) is not None:
        return True
    on_log(f"trying to pull {REGISTRY_BASE}")
    try:
        client.images.pull(REGISTRY_BASE)
        return True
    except docker.errors.APIError:
        on_log(f"{REGISTRY_BASE} cannot be pulled (no registry reachable); building offline")
        return False


def build_recipe(client, base: str, tag: str, digest: str, used: str, on_log: LogFn) -> list[str]:
    """docker build of the recipe FROM base; returns the last log lines."""
    labels = {"obsspec.recipe": digest, "obsspec.source": used}
    return docker_build(
        client, recipe_dir(), tag, buildargs={"BASE": base}, labels=labels, on_log=on_log
    )


def base_image_status(client, tag: str = f"{BASE_REPO}:latest") -> tuple[bool, str]:
    """(present and current, a short description) for doctor."""
    image = local_image(client, tag)
    if image is None:
        return False, f"{tag} is missing"
    built_from = image.labels.get("obsspec.recipe", "?")
    current = recipe_hash()
    if built_from != current:
        return False, f"{tag} was built from recipe {built_from}; the current recipe is {current}"
    return True, f"{tag} (recipe {current}, {image.labels.get('obsspec.source', '?')})"
