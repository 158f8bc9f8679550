"""`obsspec env run` as a user runs it: exit codes, time and memory of the whole process."""

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from obsspec.environments.sandbox import LABEL_PID

pytestmark = pytest.mark.docker

OBSSPEC = str(Path(sys.executable).with_name("obsspec"))
ADDRESS_SPACE_CAP = 3 * 2**30  # a regression must fail the test, not take the host's memory


@dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    max_rss_mb: float

    def __repr__(self) -> str:
        return f"exit {self.returncode}, {self.seconds:.1f} s, {self.max_rss_mb:.0f} MiB peak RSS"


def cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def as_in_a_terminal() -> None:
    """A test run in the background (CI) inherits SIGINT ignored; a shell's user has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM: the peak RSS of the process's own memory since its exec. (wait4's ru_maxrss is
    no measure: Linux carries into it the peak of the memory the child was forked with, i.e.
    the test process's, hundreds of MiB late in a full test session.)"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((x for x in status.splitlines() if x.startswith("VmHWM:")), None)
    return int(line.split()[1]) / 1024 if line else None  # a zombie has no memory lines


@pytest.fixture
def env_run(docker_client, base_image):
    """Runs `obsspec env run ARGS` and measures it (peak RSS sampled from /proc as it runs);
    afterwards removes whatever container that process left behind, failing if there was one."""
    pids = []

    def run(*args: str, timeout: float = 120) -> Measured:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            proc = subprocess.Popen(
                [OBSSPEC, "env", "run", *args], stdout=out, stderr=err, preexec_fn=cap_address_space
            )
            pids.append(proc.pid)
            peak = 0.0
            while not (waited := os.wait4(proc.pid, os.WNOHANG))[0]:
                peak = max(peak, peak_rss_mb(proc.pid) or 0.0)
                if time.monotonic() - start > timeout:
                    proc.kill()
                    waited = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.05)
            proc.returncode = os.waitstatus_to_exitcode(waited[1])
            seconds = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            return Measured(
                proc.returncode,
                out.read().decode(),
                err.read().decode(),
                seconds,
                peak,
            )

    yield run
    left = [
        c
        for pid in pids
        for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL_PID}={pid}"})
    ]
    for container in left:
        container.remove(force=True, v=True)
    assert left == [], "env run left its container behind"


def test_timeout_exits_124_soon(env_run):
    result = env_run("--timeout", "2", "--json", "--", "sleep 30")
    assert result.returncode == 124, result.stderr
    report = json.loads(result.stdout)
    assert (report["exit_code"], report["timed_out"]) == (124, True)
    assert result.seconds < 15  # a loaded daemon can take seconds to start a container


def test_flood_costs_bounded_memory_and_time(env_run):
    # Many tiny lines (each a JSON record in Docker's json-file log), then bulk bytes.
    flood = "yes | head -c 1M; head -c 100M /dev/zero | tr '\\0' x; echo; echo end"
    result = env_run("--json", "--", flood)
    assert result.max_rss_mb < 250 and result.seconds < 60, result
    assert result.returncode == 0, result.stderr[-500:]
    report = json.loads(result.stdout)
    assert report["truncated"] and report["stdout"].startswith("y\ny\n")
    assert report["stdout"].endswith("xxx\nend\n") and len(report["stdout"]) < 600_000


def test_endless_output_stops_at_the_timeout(env_run):
    result = env_run("--timeout", "3", "--json", "--", "yes")
    assert result.max_rss_mb < 250 and result.seconds < 20, result
    assert result.returncode == 124, result.stderr[-500:]
    assert json.loads(result.stdout)["truncated"]


FORK_100 = """python3 -c '
import os, time
started = 0
for _ in range(100):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
    except OSError:
        break
    started += 1
print(started)'"""


def test_limit_flags_apply(env_run):
    cgroup = "/sys/fs/cgroup"
    show = (
        f"cat {cgroup}/cpu.max 2>/dev/null || cat {cgroup}/cpu/cpu.cfs_quota_us;"
        f"cat {cgroup}/memory.max 2>/dev/null || cat {cgroup}/memory/memory.limit_in_bytes;"
    )
    flags = ("--cpus", "0.5", "--memory-mb", "96", "--pids", "32")
    result = env_run(*flags, "--json", "--", show + FORK_100)
    quota, memory, started = json.loads(result.stdout)["stdout"].split()[-3:]
    assert (int(quota), int(memory)) == (50_000, 96 * 2**20)  # 0.5 of a 100 ms period
    assert int(started) < 32
    bad = env_run("--pids", "3", "--", "true")
    assert bad.returncode == 2 and "--pids" in bad.stderr


def test_ctrl_c_removes_the_container(docker_client, env_run):
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [OBSSPEC, "env", "run", "--", "sleep 60"], stderr=err, preexec_fn=as_in_a_terminal
        )
        label = {"label": f"{LABEL_PID}={proc.pid}"}
        deadline = time.monotonic() + 30
        while not docker_client.containers.list(filters=label) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert docker_client.containers.list(filters=label), "the container never started"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) != 0
        left = docker_client.containers.list(all=True, filters=label)
        for container in left:
            container.remove(force=True, v=True)
        assert left == []
