"""The verifier kit on real Docker, offline (--network none): a kit missing a wheel gives a
VerifierError naming the package, not a 0; a verifier the agent's leftovers try to fool
still runs the kit's uv; `obsspec env kit` prepares a task set and exits 1 naming what it
could not fetch. The corpus (test_real_tasks.py) shows both public shapes served end to end.
The kit is fetched from the package index this machine reaches (pip's configuration)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from obsspec.environments.errors import VerifierError
from obsspec.environments.sandbox import DockerSandbox, NetworkPolicy
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.verifier import verify
from obsspec.environments.verifier_kit.attach import with_verifier_kits
from obsspec.environments.verifier_kit.plan import KitMode
from obsspec.environments.verifier_kit.stage import stage_kit
from tests.cli.test_cli import OBSSPEC

pytestmark = pytest.mark.docker

CORPUS = Path(__file__).parent.parent / "fixtures" / "real_tasks"
HARBOR = CORPUS / "word-census"  # FROM ubuntu:24.04; uvx --with pytest-json-ctrf==0.3.5


async def served_task(settings, base_image):
    """word-census carrying its kit (fetched into the session's cache once)."""
    task = load_task(HARBOR)
    [task] = await with_verifier_kits(
        [task], KitMode.auto, NetworkPolicy.none, settings.paths.cache_dir
    )
    assert task.verifier_kit is not None and task.verifier_kit.problems == ()
    return task


async def verify_untouched(task, docker_client, run_id, base_image, agent: str = ""):
    images = TaskImages(docker_client, image_map={"ubuntu:24.04": base_image})
    image = await images.ensure(task)
    async with DockerSandbox(docker_client, image, task.limits, run_id=run_id) as sandbox:
        if agent:
            assert (await sandbox.run(agent, timeout_s=30)).exit_code == 0
        return await verify(task, sandbox)


async def test_a_kit_missing_a_wheel_gives_a_verifier_error_not_0(
    tmp_path, settings, docker_client, base_image, run_id
):
    task = await served_task(settings, base_image)
    plan = task.verifier_kit
    wheels = tuple(w for w in plan.wheels if not w.name.startswith("pytest_json_ctrf"))
    assert len(wheels) == len(plan.wheels) - 1
    short = plan.model_copy(update={"wheels": wheels})
    short = short.model_copy(update={"staged": stage_kit(tmp_path, short)})
    with pytest.raises(VerifierError, match="pytest-json-ctrf") as info:
        await verify_untouched(
            task.model_copy(update={"verifier_kit": short}), docker_client, run_id, base_image
        )
    assert "verifier kit" in str(info.value)
    assert any(line.startswith("uvx ") for line in info.value.kit["served"])


FAKE_UV = (
    "mkdir -p /root/.local/bin /obsspec-kit/bin && "
    "printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\nexit 0\\n' > /root/.local/bin/uvx"
    " && chmod +x /root/.local/bin/uvx && cp /root/.local/bin/uvx /obsspec-kit/bin/uvx"
)


async def test_a_uvx_the_agent_planted_is_replaced_by_the_kits(
    settings, docker_client, base_image, run_id
):
    """The agent leaves a fake uvx where the installer and the kit put theirs: the verifier
    still runs the kit's, and doing nothing still scores 0."""
    task = await served_task(settings, base_image)
    outcome = await verify_untouched(task, docker_client, run_id, base_image, agent=FAKE_UV)
    assert outcome.reward == 0.0 and "3 failed" in outcome.output, outcome.output


def env_kit(tasks: Path, cache: Path) -> subprocess.CompletedProcess:
    command = [OBSSPEC, "env", "kit", str(tasks), "--json", "--cache-dir", str(cache)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_env_kit_exits_1_naming_what_it_could_not_fetch(tmp_path):
    tasks = tmp_path / "tasks"
    for name, package in [("pinned", "iniconfig==2.1.0"), ("bogus", "obsspec-no-such-pkg==0.1")]:
        shutil.copytree(CORPUS / "csv-monthly-totals", tasks / name)
        runner = tasks / name / "run-tests.sh"
        runner.write_text(f"pip install {package}\npython3 -m pytest $TEST_DIR -rA\n")
    result = env_kit(tasks, tmp_path / "cache")
    assert result.returncode == 1, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["failed"] == ["bogus"] and summary["served"] == 2
    rows = {row["task"]: row for row in summary["rows"]}
    assert "obsspec-no-such-pkg" in rows["bogus"]["problems"][0]
    assert rows["pinned"]["wheels"] == ["iniconfig-2.1.0-py3-none-any.whl"]
    assert (tmp_path / "cache" / "verifier-kit" / "wheels" / rows["pinned"]["wheels"][0]).is_file()
    # the failure is not recorded: the next run asks the index again
    assert len(list((tmp_path / "cache" / "verifier-kit" / "sets").glob("*.json"))) == 1
