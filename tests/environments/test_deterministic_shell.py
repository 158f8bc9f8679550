"""The agent's shell prints the same in two fresh sandboxes: git hashes and dates, a set of
strings, $RANDOM, written as an agent would type them; the verifier's shell and a task that
turns it off keep the real environment; a task's own git identity still wins."""

import io

import pytest

from obsspec.environments.deterministic_shell import FIXED_DATE
from obsspec.environments.sandbox import DockerSandbox, SandboxLimits

GIT = (
    "git init -q /tmp/r && cd /tmp/r && echo a > f && git add f && git commit -qm one\n"
    "echo b > f && git commit -qam two && git revert --no-edit HEAD | head -1\n"
    "git stash list; git log --format='%H %cI %aI %an'"
)
COMMANDS = [
    GIT,
    "python3 -c 'print(set(\"alpha beta gamma delta epsilon zeta eta theta\".split()))'",
    "echo $RANDOM $RANDOM $RANDOM",
    "exit 3",
    "echo $RANDOM $RANDOM $RANDOM",  # a new shell starts from the same seed
]


async def play(client, image, run_id, limits=None) -> list[str]:
    async with DockerSandbox(client, image, limits, run_id=run_id) as sandbox:
        return [(await sandbox.run(c, timeout_s=60)).stdout for c in COMMANDS]


@pytest.mark.docker
async def test_two_fresh_sandboxes_print_the_same(docker_client, base_image, run_id):
    first = await play(docker_client, base_image, run_id)
    second = await play(docker_client, base_image, run_id)
    assert first == second
    log = first[0].splitlines()[1:]
    assert len(log) == 3 and all(line.split()[1:] == [FIXED_DATE] * 2 + ["obsspec"] for line in log)
    assert first[2] == first[4] and len(first[2].split()) == 3


@pytest.mark.docker
async def test_off_for_the_verifier_and_for_a_task_that_says_so(docker_client, base_image, run_id):
    probe = "echo ${GIT_AUTHOR_DATE-unset} ${PYTHONHASHSEED-unset}"
    async with DockerSandbox(docker_client, base_image, run_id=run_id) as sandbox:
        assert (await sandbox.run(probe)).stdout == f"{FIXED_DATE} 0\n"
        assert (await sandbox.run_fresh(probe)).stdout == "unset unset\n"  # the verifier's
        own = "git config --global user.name Alice && cd /tmp && git init -q a && cd a && "
        own += "git commit -q --allow-empty -m x && git log --format=%an"
        assert (await sandbox.run(own)).stdout == "Alice\n"
    off = SandboxLimits(deterministic=False)
    async with DockerSandbox(docker_client, base_image, off, run_id=run_id) as sandbox:
        assert (await sandbox.run(probe)).stdout == "unset unset\n"
    real = await play(docker_client, base_image, run_id, off)
    fixed = await play(docker_client, base_image, run_id)
    assert real[2] != fixed[2]  # 45 random bits: equal by chance once in 3.5e13
    assert FIXED_DATE not in real[0]


@pytest.mark.docker
async def test_the_image_and_the_task_keep_their_own_values(docker_client, base_image, run_id):
    image = f"{base_image}-hashseed-test"
    docker_client.images.build(
        fileobj=io.BytesIO(f"FROM {base_image}\nENV PYTHONHASHSEED=7\n".encode()),
        tag=image,
        rm=True,
    )
    try:
        task = SandboxLimits(env={"GIT_COMMITTER_DATE": "2020-02-02T00:00:00+00:00"})
        async with DockerSandbox(docker_client, image, task, run_id=run_id) as sandbox:
            probe = "echo $PYTHONHASHSEED $GIT_COMMITTER_DATE $GIT_AUTHOR_DATE"
            expected = f"7 2020-02-02T00:00:00+00:00 {FIXED_DATE}\n"
            assert (await sandbox.run(probe)).stdout == expected
    finally:
        docker_client.images.remove(image, force=True)
