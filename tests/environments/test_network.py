"""The run's network policy in real sandboxes: which phases see an interface besides `lo`."""

import shutil
from pathlib import Path

import pytest

from obsspec.environments.sandbox import (
    DockerSandbox,
    NetworkPolicy,
    SandboxLimits,
    denied_internet,
    with_network,
)
from obsspec.environments.tasks import load_task
from obsspec.environments.validate import validate_tasks

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tasks"

# Interface names, ethN as eth (a second connection may come up as eth1).
INTERFACES = (
    "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sed 's/^eth[0-9]*/eth/'"
    " | sort | tr '\\n' ' '"
)


def test_the_run_policy_is_a_ceiling_and_allow_internet_opens_the_agent_phase():
    task, open_task = SandboxLimits(), SandboxLimits(allow_internet=True)
    effective = {
        (run, limits.allow_internet): with_network(limits, run).network
        for run in NetworkPolicy
        for limits in (task, open_task)
    }
    assert effective == {
        (NetworkPolicy.none, False): NetworkPolicy.none,
        (NetworkPolicy.none, True): NetworkPolicy.none,
        (NetworkPolicy.verify, False): NetworkPolicy.verify,
        (NetworkPolicy.verify, True): NetworkPolicy.all,
        (NetworkPolicy.all, False): NetworkPolicy.all,
        (NetworkPolicy.all, True): NetworkPolicy.all,
    }
    assert denied_internet(open_task, NetworkPolicy.none)
    assert not denied_internet(open_task, NetworkPolicy.verify)
    assert not denied_internet(task, NetworkPolicy.none)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("run", "agent", "verifier"),
    [
        (NetworkPolicy.none, "lo ", "lo "),
        (NetworkPolicy.verify, "lo ", "eth lo "),
        (NetworkPolicy.all, "eth lo ", "eth lo "),
    ],
)
async def test_each_phase_sees_the_network_the_policy_gives(
    run, agent, verifier, docker_client, base_image, run_id
):
    limits = with_network(SandboxLimits(pids=64), run)
    async with DockerSandbox(docker_client, base_image, limits, run_id=run_id) as sandbox:
        await sandbox.run("cd /tmp && x=kept")
        assert (await sandbox.run(INTERFACES)).stdout == agent
        async with sandbox.network_for_verifier():
            assert (await sandbox.run(INTERFACES)).stdout == verifier
        # Back to the agent's view, and the shell (cwd, variables) lived through it all.
        assert (await sandbox.run(INTERFACES)).stdout == agent
        assert (await sandbox.run('echo "$PWD $x"')).stdout == "/tmp kept\n"
        async with sandbox.network_for_verifier():  # a second verifier run works too
            assert (await sandbox.run(INTERFACES)).stdout == verifier


@pytest.mark.docker
@pytest.mark.parametrize(
    ("run", "reward"), [(NetworkPolicy.none, 0.0), (NetworkPolicy.verify, 1.0)]
)
async def test_validate_gives_the_verifier_the_network_of_the_run(
    run, reward, tmp_path, docker_client, base_image, run_id
):
    root = Path(shutil.copytree(FIXTURES / "harbor-greeting", tmp_path / "needs-network"))
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        "grep -q eth /proc/net/dev && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n"
    )
    [report] = await validate_tasks([load_task(root)], docker_client, run_id, network=run)
    assert report.noop_reward == reward
