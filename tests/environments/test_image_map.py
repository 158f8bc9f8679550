"""The image map: parsing its three sources, reading Dockerfiles, and real builds on a map."""

import shutil
from pathlib import Path

import pytest

from obsspec.cli.common import global_config
from obsspec.environments.errors import MissingImageError
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.image_map import (
    ImageMap,
    base_images,
    canonical,
    parse_entries,
    parse_env_value,
    rewrite,
)
from obsspec.environments.tasks.images import TaskImages
from obsspec.errors import ConfigError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"
# A registry that cannot exist (RFC 2606): a pull fails quickly on every machine.
REGISTRY_ONLY = "registry.invalid/library/python:3.13-slim"

MULTI_STAGE = """\
# syntax=docker/dockerfile:1
ARG BASE=python:3.13-slim
ARG UBUNTU=24.04
FROM --platform=linux/amd64 ${BASE} AS build
RUN echo one \\
  && echo two
FROM ubuntu:$UBUNTU
COPY --from=build /x /y
FROM build AS final
FROM scratch
"""


def test_env_value_and_flags_parse_and_bad_entries_name_their_source(monkeypatch):
    value = "python:3.13-slim=obsspec/base, ubuntu:24.04=obsspec/base,"
    assert parse_env_value(value) == {
        "python:3.13-slim": "obsspec/base",
        "ubuntu:24.04": "obsspec/base",
    }
    with pytest.raises(ConfigError, match="OBSSPEC_IMAGE_MAP: 'foo' is not SRC=DST"):
        parse_env_value("a=b,foo")
    for bad in ("foo", "=obsspec/base", "python:3.13-slim=", "a=b=c"):
        with pytest.raises(ConfigError, match=r"--image-map: .* is not SRC=DST"):
            parse_entries([bad], "--image-map")
    # Precedence: config file < OBSSPEC_IMAGE_MAP < --image-map, entry by entry.
    monkeypatch.setenv("OBSSPEC_IMAGE_MAP", "ubuntu:24.04=env/img,python:3.13-slim=env/img")
    settings = global_config(None, image_map=["python:3.13-slim=flag/img"], runs_tasks=True)
    assert settings.images.map == {"ubuntu:24.04": "env/img", "python:3.13-slim": "flag/img"}
    assert global_config(None).images.map == {}  # commands without tasks ignore the variable


def test_references_match_in_canonical_form_and_the_wildcard_only_takes_missing_images():
    assert canonical("python:3.13-slim") == "docker.io/library/python:3.13-slim"
    assert canonical("ubuntu") == "docker.io/library/ubuntu:latest"
    assert canonical("ghcr.io/a/b:1") == "ghcr.io/a/b:1"
    image_map = ImageMap({"docker.io/library/python:3.13-slim": "local/py", "*": "local/any"})
    assert image_map.target("python:3.13-slim", lambda _: True) == "local/py"
    assert image_map.target("ubuntu:24.04", lambda _: False) == "local/any"
    assert image_map.target("ubuntu:24.04", lambda _: True) is None
    assert ImageMap({}).target("ubuntu:24.04", lambda _: False) is None


def test_every_from_is_found_and_only_from_lines_are_rewritten():
    assert base_images(MULTI_STAGE) == ["python:3.13-slim", "ubuntu:24.04"]
    new = rewrite(MULTI_STAGE, {"python:3.13-slim": "local/py", "ubuntu:24.04": "local/ub"})
    old_lines, new_lines = MULTI_STAGE.splitlines(), new.splitlines()
    changed = [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]
    assert changed == [
        (
            "FROM --platform=linux/amd64 ${BASE} AS build",
            "FROM --platform=linux/amd64 local/py AS build",
        ),
        ("FROM ubuntu:$UBUNTU", "FROM local/ub"),
    ]


@pytest.fixture
def registry_task(tmp_path) -> Path:
    """A Harbor task built FROM an image only a registry has, plus a RUN line of its own."""
    root = Path(shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "registry-task"))
    (root / "environment" / "Dockerfile").write_text(
        f"ARG BASE={REGISTRY_ONLY}\nFROM ${{BASE}} AS base\nRUN echo from-run-line > /ran.txt\n"
    )
    return root


@pytest.mark.docker
async def test_registry_image_without_a_map_is_one_line_naming_image_task_and_flag(
    registry_task, docker_client
):
    with pytest.raises(MissingImageError) as info:
        await TaskImages(docker_client).ensure(load_task(registry_task))
    message = str(info.value)
    assert "\n" not in message and not info.value.retryable
    assert REGISTRY_ONLY in message and "registry-task" in message and "--image-map" in message


@pytest.mark.docker
async def test_mapped_from_builds_with_the_tasks_run_line_and_a_new_map_gets_a_new_tag(
    registry_task, docker_client, base_image
):
    task = load_task(registry_task)
    dockerfile = (registry_task / "environment" / "Dockerfile").read_text()
    tag = await TaskImages(docker_client, image_map={REGISTRY_ONLY: base_image}).ensure(task)
    ran = docker_client.containers.run(tag, ["cat", "/ran.txt"], remove=True, network_mode="none")
    assert ran == b"from-run-line\n"
    assert (registry_task / "environment" / "Dockerfile").read_text() == dockerfile

    alias = "obsspec-test/base-alias:map"
    docker_client.images.get(base_image).tag(alias)
    try:
        other = await TaskImages(docker_client, image_map={REGISTRY_ONLY: alias}).ensure(task)
    finally:
        docker_client.images.remove(alias)
    assert other != tag

    with pytest.raises(MissingImageError, match=r"maps .* to nothing/here, which is not on"):
        await TaskImages(docker_client, image_map={"*": "nothing/here"}).ensure(task)


@pytest.mark.docker
async def test_a_harbor_docker_image_is_mapped_too(registry_task, docker_client, base_image):
    toml = registry_task / "task.toml"
    toml.write_text(
        toml.read_text().replace(
            "[environment]", f'[environment]\ndocker_image = "{REGISTRY_ONLY}"'
        )
    )
    task = load_task(registry_task)
    assert await TaskImages(docker_client, image_map={"*": base_image}).ensure(task) == base_image
    with pytest.raises(MissingImageError, match="--image-map"):
        await TaskImages(docker_client).ensure(task)
