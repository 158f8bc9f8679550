"""The built-in task suite: deterministic, at least 12 families, and every family valid."""

import filecmp

import pytest

from obsspec.environments.gc import remove_run_containers
from obsspec.environments.suite import FAMILIES, generate
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.validate import summarize, validate_tasks


def same_tree(a, b) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_same_seed_gives_byte_identical_tasks(tmp_path):
    first = generate(tmp_path / "a", 30, seed=7)
    generate(tmp_path / "b", 30, seed=7)
    other = generate(tmp_path / "c", 30, seed=8)
    assert same_tree(tmp_path / "a", tmp_path / "b")
    assert not same_tree(tmp_path / "a", tmp_path / "c")
    assert len(first) == len(other) == 30


def test_families_and_task_shape(tmp_path):
    assert len(FAMILIES) >= 12
    paths = generate(tmp_path, len(FAMILIES), seed=0)
    families = set()
    for path in paths:
        task = load_task(path)
        families.add(task.metadata["family"])
        assert task.format == "harbor" and task.instruction.strip()
        assert len(task.solution_commands()) >= 3
    assert families == set(FAMILIES)


def test_unknown_family_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown families: nope"):
        generate(tmp_path, 1, seed=0, families=["nope"])


@pytest.mark.docker
@pytest.mark.slow
async def test_every_family_validates(tmp_path, docker_client, base_image, run_id):
    """One task per family: the solution earns 1, doing nothing 0 (a real build and run)."""
    tasks = [load_task(p) for p in generate(tmp_path, len(FAMILIES), seed=3)]
    reports = await validate_tasks(tasks, docker_client, run_id, concurrency=2)
    remove_run_containers(docker_client, run_id)
    summary = summarize(reports)
    assert summary["failures"] == []
    assert summary["solution_pass"] == summary["noop_fail"] == len(FAMILIES)
    # Nothing the setups wrote is dated by the build (`ls -l` prints the same every build)
    base_built = docker_client.images.get(base_image).attrs["Created"][:19]  # UTC
    images = TaskImages(docker_client)
    runtime = ["/", "/proc", "/sys", "/dev", "/etc", "/.dockerenv"]  # made by `docker run`
    runtime += ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/mtab"]
    skip = " ".join(f"! -path {path}" for path in runtime)
    newer = f"find / -xdev -newermt '{base_built}Z' {skip} -print"
    for task in tasks:
        image = await images.ensure(task)  # built above: found, not rebuilt
        found = docker_client.containers.run(image, ["sh", "-c", newer], remove=True)
        assert found.decode() == "", task.id


def test_no_check_pipes_into_grep_q(tmp_path):
    """check.sh runs under `set -o pipefail`: `producer | grep -q X` exits at the first match,
    the producer's next write gets SIGPIPE, and the check fails though the task is solved.
    workflow-ci's `tar -tzf ... | grep -q` did so in 8 of 200 runs of a 10-file listing, and
    once scored a reference solution 0 in CI."""
    import re

    for task_dir in generate(tmp_path, len(FAMILIES), seed=3):
        check = (task_dir / "tests" / "check.sh").read_text()
        assert "pipefail" in check
        assert not re.search(r"\|\s*grep\s+(-\w*q|--quiet)", check), task_dir.name
