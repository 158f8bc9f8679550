"""run_once: a throwaway container with a sandbox's isolation and limits, bounded output."""

import uuid

import pytest

from obsspec.environments.errors import SandboxError
from obsspec.environments.oneshot import OUTPUT_CAP_BYTES, TIMEOUT_EXIT_CODE, run_once
from obsspec.environments.sandbox import LABEL_RUN, SandboxLimits
from obsspec.types import TRUNCATION_MARKER

pytestmark = pytest.mark.docker


@pytest.fixture
def oneshot(docker_client, base_image):
    """run_once on the base image under a run id of its own; nothing may be left behind."""
    run_id = f"pytest-oneshot-{uuid.uuid4().hex[:8]}"

    def run(command: str, **kwargs):
        return run_once(docker_client, base_image, command, run_id=run_id, **kwargs)

    yield run
    left = docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    assert left == [], "run_once left its container behind"


def test_an_init_is_pid_1(oneshot):
    result = oneshot('echo "$$ $(cat /proc/1/comm)"')
    shell_pid, init = result.stdout.split()
    assert shell_pid != "1" and init != "bash", result.stdout


FORK = """
import os, time
started = 0
for _ in range(%d):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    started += 1
print(started)
"""


def test_processes_stop_at_the_default_pids_limit(oneshot):
    result = oneshot(f"python3 -c '{FORK % 700}'", timeout_s=120)
    assert not result.timed_out, result.stderr
    assert int(result.stdout) < SandboxLimits().pids


def test_no_raw_sockets_no_device_nodes(oneshot):
    raw = "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
    result = oneshot(f"python3 -c '{raw}' 2>&1 | tail -1; mknod /tmp/null c 1 3")
    assert "PermissionError" in result.stdout
    assert result.exit_code != 0 and "Operation not permitted" in result.stderr


def test_memory_limit_applies(oneshot):
    cgroup = "/sys/fs/cgroup"
    limit = f"cat {cgroup}/memory.max 2>/dev/null || cat {cgroup}/memory/memory.limit_in_bytes"
    assert int(oneshot(limit).stdout) == SandboxLimits().memory_mb * 2**20
    hog = oneshot("python3 -c 'b = b\"x\" * (400 * 2**20)'", limits=SandboxLimits(memory_mb=128))
    assert hog.exit_code == 137  # killed by the OOM killer


def test_flood_keeps_head_and_tail_of_each_stream(oneshot):
    result = oneshot("seq 1 2000000; seq 1 300000 >&2; echo last")
    assert result.exit_code == 0 and result.truncated
    assert result.stdout.startswith("1\n2\n3\n") and result.stdout.endswith("2000000\nlast\n")
    assert result.stderr.startswith("1\n2\n") and result.stderr.endswith("\n300000\n")
    for text in (result.stdout, result.stderr):
        assert TRUNCATION_MARKER in text and len(text) <= 2 * OUTPUT_CAP_BYTES + 200


def test_timeout_reports_124_and_keeps_output(oneshot):
    result = oneshot("echo started; sleep 30", timeout_s=2)
    assert (result.exit_code, result.timed_out) == (TIMEOUT_EXIT_CODE, True)
    assert result.stdout == "started\n" and result.seconds < 15


def test_endless_output_stops_at_the_timeout(oneshot):
    result = oneshot("yes", timeout_s=3)
    assert result.timed_out and result.truncated and result.seconds < 20
    assert result.stdout.startswith("y\ny\n")


def test_missing_image_is_one_clear_error(docker_client):
    with pytest.raises(SandboxError, match="obsspec/no-such-image:none does not exist"):
        run_once(docker_client, "obsspec/no-such-image:none", "true")
