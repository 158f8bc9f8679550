"""A real Harbor verifier in Docker: multi-key reward.json, its env, its output kept."""

import shutil
from pathlib import Path

import pytest

from obsspec.environments.errors import VerifierError
from obsspec.environments.sandbox import DockerSandbox
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.verifier import OUTPUT_CHARS, verify

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"

pytestmark = pytest.mark.docker

MULTI_KEY = """#!/bin/bash
echo "checking in mode $CHECK_MODE"
echo "a warning on stderr" >&2
printf '{"correctness": 1, "performance": %s}' "$PERF" > /logs/verifier/reward.json
"""


def harbor_task(tmp_path: Path, test_sh: str, verifier_toml: str = "") -> Path:
    root = Path(shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "harbor-greeting"))
    (root / "tests" / "test.sh").write_text(test_sh)
    toml = root / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\n", f"[verifier]\n{verifier_toml}"))
    return root


async def verified(root: Path, docker_client, run_id):
    task = load_task(root)
    image = await TaskImages(docker_client).ensure(task)
    async with DockerSandbox(docker_client, image, task.limits, run_id=run_id) as sandbox:
        return await verify(task, sandbox)


async def test_multi_key_reward_json_gives_every_key_and_the_min(
    tmp_path, docker_client, base_image, run_id
):
    env = 'env = { CHECK_MODE = "strict", PERF = "0.5" }\n'
    outcome = await verified(harbor_task(tmp_path, MULTI_KEY, env), docker_client, run_id)
    assert outcome.rewards == {"correctness": 1.0, "performance": 0.5}
    assert outcome.reward == 0.5  # several keys, none named "reward": min by default
    assert "checking in mode strict" in outcome.output and "a warning on stderr" in outcome.output


async def test_reward_key_picks_the_scalar(tmp_path, docker_client, base_image, run_id):
    env = 'env = { PERF = "0.25" }\nreward_key = "correctness"\n'
    outcome = await verified(harbor_task(tmp_path, MULTI_KEY, env), docker_client, run_id)
    assert outcome.reward == 1.0 and outcome.rewards["performance"] == 0.25


async def test_a_verifier_that_cannot_run_says_why(tmp_path, docker_client, base_image, run_id):
    script = "#!/bin/bash\nseq 1 3000\nno-such-checker --strict /root\n"
    with pytest.raises(VerifierError, match="no reward file") as info:
        await verified(harbor_task(tmp_path, script), docker_client, run_id)
    output = info.value.output
    assert "no-such-checker: command not found" in output  # the reason, kept on the error
    assert output.startswith("[... ") and "earlier characters cut" in output
    assert len(output) < OUTPUT_CHARS + 100


async def test_non_numeric_reward_is_a_verifier_error_naming_the_key(
    tmp_path, docker_client, base_image, run_id
):
    script = """#!/bin/bash\necho '{"correctness": "yes"}' > /logs/verifier/reward.json\n"""
    with pytest.raises(VerifierError, match=r"reward\.json: key 'correctness' is not a number"):
        await verified(harbor_task(tmp_path, script), docker_client, run_id)
