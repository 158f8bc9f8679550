"""Task loading (both formats, every malformation), images, verifiers, on hand-made tasks."""

import shutil
from pathlib import Path

import pytest

from obsspec.environments.errors import ImageBuildError, TaskFormatError, VerifierError
from obsspec.environments.sandbox import DockerSandbox
from obsspec.environments.tasks import load_task, load_tasks
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.verifier import verify
from obsspec.environments.validate import validate_task

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"


@pytest.fixture
def harbor(tmp_path) -> Path:
    return Path(shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "harbor-greeting"))


def test_both_formats_load_into_one_record():
    tasks = {t.id: t for t in load_tasks(str(FIXTURES))}
    harbor, tb = tasks["harbor-greeting"], tasks["tbv1-wordcount"]
    assert (harbor.format, tb.format) == ("harbor", "tbv1")
    assert "Hello, <name>!" in harbor.instruction and "Count the words" in tb.instruction
    assert (harbor.agent_timeout_s, harbor.verifier_timeout_s) == (120, 60)
    assert (tb.agent_timeout_s, tb.verifier_timeout_s) == (120, 60)
    assert harbor.limits.memory_mb == 1024 and not harbor.limits.allow_internet
    assert harbor.metadata["difficulty"] == "easy"
    assert len(harbor.solution_commands()) == 2 and len(harbor.content_hash) == 64


def test_content_hash_follows_the_files(harbor):
    before = load_task(harbor).content_hash
    (harbor / "instruction.md").write_text("changed")
    assert load_task(harbor).content_hash != before


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[agent]\ntimeout_sec = 'soon'\n", "agent.timeout_sec"),
        ("[environment]\nmemory_mb = -5\n", "environment.memory_mb"),
        ("[environment]\nallow_internet = 'maybe'\n", "environment.allow_internet"),
    ],
)
def test_malformed_task_toml_names_file_and_field(harbor, toml, field):
    (harbor / "task.toml").write_text(toml)
    with pytest.raises(TaskFormatError) as info:
        load_task(harbor)
    assert str(harbor / "task.toml") in str(info.value) and f"field '{field}'" in str(info.value)


def test_invalid_toml_and_missing_files_are_named(harbor, tmp_path):
    (harbor / "task.toml").write_text("[agent\n")
    with pytest.raises(TaskFormatError, match=r"task\.toml"):
        load_task(harbor)
    (harbor / "task.toml").write_text("")
    (harbor / "environment" / "Dockerfile").unlink()
    with pytest.raises(TaskFormatError, match="Dockerfile"):
        load_task(harbor)
    tb = Path(shutil.copytree(FIXTURES / "tbv1-wordcount", tmp_path / "tb"))
    (tb / "task.yaml").write_text("max_agent_timeout_sec: 5\n")
    with pytest.raises(TaskFormatError, match="field 'instruction'"):
        load_task(tb)
    with pytest.raises(TaskFormatError, match="no task directories"):
        load_tasks(str(tmp_path / "nothing-here"))


@pytest.mark.docker
async def test_harbor_task_builds_from_the_base_image_and_verifies(
    docker_client, base_image, run_id
):
    task = load_task(FIXTURES / "harbor-greeting")
    report = await validate_task(task, docker_client, TaskImages(docker_client), run_id)
    assert report.ok, report.problems()
    assert report.solution_exit_code == 0 and report.solution_seconds is not None


@pytest.mark.docker
async def test_tbv1_task_builds_and_verifies_with_pytest(docker_client, base_image, run_id):
    task = load_task(FIXTURES / "tbv1-wordcount")
    report = await validate_task(task, docker_client, TaskImages(docker_client), run_id)
    assert report.ok, report.problems()


@pytest.mark.docker
async def test_tests_are_invisible_during_the_agent_phase(docker_client, base_image, run_id):
    task = load_task(FIXTURES / "harbor-greeting")
    image = await TaskImages(docker_client).ensure(task)
    async with DockerSandbox(docker_client, image, task.limits, run_id=run_id) as sandbox:
        assert (await sandbox.run("ls /tests")).exit_code != 0
        # A reward file planted by the agent does not count.
        await sandbox.run(
            "mkdir -p /logs/verifier && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
        )
        assert (await verify(task, sandbox)).reward == 0.0


@pytest.mark.docker
async def test_missing_reward_file_is_an_error_not_a_zero(
    harbor, docker_client, base_image, run_id
):
    (harbor / "tests" / "test.sh").write_text("#!/bin/bash\necho checked, forgot the reward\n")
    task = load_task(harbor)
    image = await TaskImages(docker_client).ensure(task)
    async with DockerSandbox(docker_client, image, task.limits, run_id=run_id) as sandbox:
        with pytest.raises(VerifierError, match="no reward file"):
            await verify(task, sandbox)


@pytest.mark.docker
async def test_failing_build_shows_the_log_tail(harbor, docker_client, base_image):
    (harbor / "environment" / "Dockerfile").write_text(
        "FROM obsspec/base:latest\nRUN echo preparing && echo 'it broke' >&2 && exit 3\n"
    )
    with pytest.raises(ImageBuildError) as info:
        await TaskImages(docker_client).ensure(load_task(harbor))
    message = str(info.value)  # one line; the log's tail rides along as details
    assert "harbor-greeting" in message and "returned a non-zero code: 3" in message
    assert "\n" not in message
    assert any("preparing" in line for line in info.value.log_tail)
    assert "preparing" in info.value.with_log()
