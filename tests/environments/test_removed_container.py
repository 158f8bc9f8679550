"""A sandbox container removed from outside (`docker rm -f`, `obsspec env gc --all`) must be a
SandboxError, as a killed one is: retryable, so collect retries the episode (found by the
chaos runs of issue 20: a NotFound ended the whole run, a missing reward file broke the task)."""

import asyncio

import pytest

from obsspec.environments.errors import SandboxError
from obsspec.environments.sandbox import DockerSandbox

pytestmark = pytest.mark.docker


async def test_a_command_after_the_container_was_removed_is_a_sandbox_error(
    docker_client, base_image, run_id
):
    async with DockerSandbox(docker_client, base_image, run_id=run_id) as sb:
        await sb.run("true")
        await asyncio.to_thread(sb.container.remove, force=True)
        with pytest.raises(SandboxError, match="removed from outside"):
            await sb.run("echo after")


async def test_reading_a_file_of_a_removed_container_is_a_sandbox_error(
    docker_client, base_image, run_id
):
    async with DockerSandbox(docker_client, base_image, run_id=run_id) as sb:
        await sb.run("echo 1 > /root/reward.txt")
        assert await sb.read_file("/root/reward.txt") == b"1\n"
        await asyncio.to_thread(sb.container.remove, force=True)
        with pytest.raises(SandboxError):
            await sb.read_file("/root/reward.txt")
