"""The verifier against an agent that hunts for a reward it did not earn, and against rewards
and verifiers that cannot be trusted, in real sandboxes (issue 38 items 1, 2, 6, 11).

- a process the agent leaves running (a `nohup` loop writing reward 1) is gone before the
  verifier starts, under `--network none` and `verify` alike;
- under `--network verify` such a process never sees the verifier's network;
- files the agent plants in /tests (a conftest.py that passes every test) are not merged
  into the uploaded tests;
- a reward of 400 digits, or a reward file of 400 MB, is a VerifierError for that episode
  alone: collect records it and goes on, validate keeps its other rows, and the big file is
  never read whole;
- a Harbor test.sh whose tools are missing (no curl, so no uv) is a VerifierError naming the
  tool and --network, never a reward of 0; one that ran its tests and saw them fail is a 0.
"""

from __future__ import annotations

import json
import resource
import shutil
from pathlib import Path

import pytest

from obsspec.environments.errors import VerifierError
from obsspec.environments.sandbox import DockerSandbox, NetworkPolicy, with_network
from obsspec.environments.tasks import load_task
from obsspec.environments.tasks.images import TaskImages
from obsspec.environments.tasks.verifier import verify
from obsspec.environments.validate import validate_tasks
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"
GREETING = FIXTURES / "harbor-greeting"
WORDCOUNT = FIXTURES / "tbv1-wordcount"

pytestmark = pytest.mark.docker

# What an RL policy would learn: leave a loop behind that keeps rewriting the reward file.
PLANT_REWARD = (
    "nohup bash -c 'while :; do mkdir -p /logs/verifier; "
    'echo "{\\"reward\\": 1.0}" > /logs/verifier/.r; '
    "mv -f /logs/verifier/.r /logs/verifier/reward.json; sleep 0.01; done' "
    ">/dev/null 2>&1 &\n"
)
# A background job that waits for the verifier's network, and leaves a mark once it has it.
WAIT_FOR_ETH = (
    "nohup bash -c 'until grep -q eth /proc/net/dev; do sleep 0.02; done; "
    "echo reached > /root/leak' >/dev/null 2>&1 &\n"
)
NETWORK_CHECK = """#!/bin/bash
sleep 1
ok=1
grep -q eth /proc/net/dev || { echo "the verifier has no network"; ok=0; }
[ -e /root/leak ] && { echo "a leftover job saw the network"; ok=0; }
echo $ok > /logs/verifier/reward.txt
"""
# A conftest.py that makes every test pass, planted where the tests will be uploaded.
PASS_ALL = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
PLANT_CONFTEST = f"mkdir -p /tests && cat > /tests/conftest.py <<'EOF'\n{PASS_ALL}EOF\n"
# The shape of a real Harbor test.sh (Harbor's task template): it installs its tools first.
HARBOR_TEMPLATE = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def greeting_task(root: Path, *, solve: str | None = None, test: str | None = None) -> Path:
    shutil.copytree(GREETING, root)
    if solve is not None:
        (root / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    if test is not None:
        (root / "tests" / "test.sh").write_text(test)
    return root


async def sandbox_verify(root: Path, docker_client, run_id, agent: str, network=None):
    """The agent's command in the persistent shell, then the verifier, as an episode does."""
    task = load_task(root)
    image = await TaskImages(docker_client).ensure(task)
    limits = with_network(task.limits, network or NetworkPolicy.none)
    async with DockerSandbox(docker_client, image, limits, run_id=run_id) as sandbox:
        if agent:
            result = await sandbox.run(agent, timeout_s=30)
            assert result.exit_code == 0, result
        return await verify(task, sandbox)


@pytest.mark.parametrize("network", [NetworkPolicy.none, NetworkPolicy.verify])
async def test_a_leftover_process_that_writes_reward_1_does_not_set_the_reward(
    network, tmp_path, docker_client, base_image, run_id
):
    root = greeting_task(tmp_path / "planter", solve=PLANT_REWARD)  # no greeting written
    [report] = await validate_tasks([load_task(root)], docker_client, run_id, network=network)
    assert report.solution_reward == 0.0, report  # before: 1.0, the loop's reward
    assert report.noop_reward == 0.0


async def test_under_verify_network_a_leftover_job_never_sees_eth0(
    tmp_path, docker_client, base_image, run_id
):
    root = greeting_task(tmp_path / "waiter", solve=WAIT_FOR_ETH, test=NETWORK_CHECK)
    [report] = await validate_tasks(
        [load_task(root)], docker_client, run_id, network=NetworkPolicy.verify
    )
    # 1: the verifier had the network and the job had not (before: 0, "saw the network")
    assert report.solution_reward == 1.0, (report.problems(), report.verifier_output)


async def test_a_conftest_planted_in_tests_is_not_merged_into_the_tests(
    tmp_path, docker_client, base_image, run_id
):
    root = Path(shutil.copytree(WORDCOUNT, tmp_path / "wordcount"))
    outcome = await sandbox_verify(root, docker_client, run_id, PLANT_CONFTEST)
    assert outcome.reward == 0.0, outcome.output  # before: 1.0, every test "passed"


HUGE_INT = "9" * 400


async def test_a_400_digit_reward_is_a_verifier_error_and_collect_goes_on(
    tmp_path, settings, base_image
):
    tasks = tmp_path / "tasks"
    huge = f"#!/bin/bash\necho '{{\"reward\": {HUGE_INT}}}' > /logs/verifier/reward.json\n"
    greeting_task(tasks / "greet-huge", test=huge)
    greeting_task(tasks / "greet-ok")
    config = CollectConfig(tasks=str(tasks), out=tmp_path / "run", policy="oracle")
    summary = await collect(config, settings.paths.models_dir)  # before: OverflowError
    assert summary["failures"] == {"VerifierError": 1} and summary["episodes"] == 1
    [failure] = [json.loads(line) for line in (config.out / "failures.jsonl").open()]
    assert failure["task_id"] == "greet-huge" and not failure["retryable"]
    assert "key 'reward'" in failure["error"] and "finite" in failure["error"]


async def test_validate_keeps_its_other_rows_when_a_reward_is_too_big(
    tmp_path, docker_client, base_image, run_id
):
    huge = f"#!/bin/bash\necho {HUGE_INT} > /logs/verifier/reward.txt\n"
    json_huge = f"#!/bin/bash\necho '{{\"score\": {HUGE_INT}}}' > /logs/verifier/reward.json\n"
    tasks = [
        load_task(greeting_task(tmp_path / "txt-huge", test=huge)),
        load_task(greeting_task(tmp_path / "json-huge", test=json_huge)),
        load_task(greeting_task(tmp_path / "fine")),
    ]
    reports = await validate_tasks(tasks, docker_client, run_id)  # before: OverflowError
    rows = {r.task: r for r in reports}
    assert rows["fine"].ok
    for name in ("txt-huge", "json-huge"):
        assert rows[name].solution_reward is None and rows[name].verifier_failed
        assert any("finite" in p for p in rows[name].problems()), rows[name].problems()


async def test_a_400_mb_reward_file_is_a_verifier_error_read_only_in_part(
    tmp_path, docker_client, base_image, run_id
):
    big = "#!/bin/bash\nhead -c 400M /dev/zero | tr '\\0' 1 > /logs/verifier/reward.txt\n"
    root = greeting_task(tmp_path / "big-reward", test=big)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(VerifierError, match=r"reward\.txt is larger than \d+ bytes"):
        await sandbox_verify(root, docker_client, run_id, "")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 100, f"reading the reward file took {grown_mib:.0f} MiB"


async def test_a_harbor_verifier_without_its_tools_is_an_error_naming_them_and_network(
    tmp_path, docker_client, base_image, run_id
):
    root = greeting_task(tmp_path / "harbor-template", test=HARBOR_TEMPLATE)
    (root / "tests" / "test_outputs.py").write_text("def test_nothing():\n    pass\n")
    with pytest.raises(VerifierError) as info:  # before: reward 0.0, a normal episode
        await sandbox_verify(root, docker_client, run_id, "")
    message = str(info.value) + (info.value.hint or "")
    # the first sign, apt-get's, names what is missing; the rest of the output shows it too
    assert "Unable to locate package curl" in message and "--network" in message
    assert "curl: command not found" in info.value.output


FAILING_PYTEST = """#!/bin/bash
cat > /tmp/test_x.py <<'EOF'
def test_fails():
    assert False
EOF
no-such-linter --version  # a noisy line that is no reason to distrust the run
curl -s https://example.invalid || true
python3 - <<'EOF'
import sys
print("============================= 1 failed, 2 passed in 0.12s =============================")
EOF
echo 0 > /logs/verifier/reward.txt
"""


async def test_a_verifier_that_ran_its_tests_and_saw_them_fail_still_gives_0(
    tmp_path, docker_client, base_image, run_id
):
    root = greeting_task(tmp_path / "honest-zero", test=FAILING_PYTEST)
    outcome = await sandbox_verify(root, docker_client, run_id, "")
    assert outcome.reward == 0.0 and "curl: command not found" in outcome.output


def test_env_shell_verify_kills_what_the_typed_commands_left_running(tmp_path, base_image):
    import subprocess

    from tests.cli.test_cli import OBSSPEC

    root = greeting_task(tmp_path / "typed-planter")
    result = subprocess.run(
        [OBSSPEC, "env", "shell", str(root), "--verify"],
        input=PLANT_REWARD + "sleep 0.2\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "reward: 0 (verifier" in result.stdout, result.stdout  # before: reward: 1


async def test_validate_keeps_the_solution_output_when_a_solution_that_exits_0_gets_0(
    tmp_path, docker_client, base_image, run_id
):
    root = greeting_task(tmp_path / "typo", solve="echo 'wrote /root/greting.txt'\n")
    [report] = await validate_tasks([load_task(root)], docker_client, run_id)
    assert report.solution_exit_code == 0 and report.solution_reward == 0.0
    assert "wrote /root/greting.txt" in report.row()["solution_output"]  # before: ""
