"""A command timeout leaves nothing running, and nothing of it in the next observation.

Small limits (64 processes, 256 MiB) keep the host safe while fork bombs and memory hogs run.
"""

import asyncio
import time

import pytest

from obsspec.environments.sandbox import DockerSandbox, SandboxLimits
from obsspec.environments.shell import SHELL_ENV

pytestmark = pytest.mark.docker

# init, the container's entrypoint, and the persistent shell (ps itself is left out)
LEFT = ["/sbin/docker-init -- sleep infinity", "sleep infinity", "bash --noprofile --norc"]


@pytest.fixture
async def sandbox(docker_client, base_image, run_id):
    limits = SandboxLimits(pids=64, memory_mb=256)
    async with DockerSandbox(docker_client, base_image, limits, run_id=run_id) as sb:
        yield sb


async def bash_c(sandbox, command: str) -> tuple[str, str]:
    """(stdout, stderr) of a fresh `bash -c` of command, in a separate exec of the sandbox."""

    def run():
        return sandbox.container.exec_run(
            ["bash", "-c", command], environment=SHELL_ENV, demux=True
        )

    out, err = (await asyncio.to_thread(run)).output
    return (out or b"").decode(), (err or b"").decode()


async def assert_only_init_and_shell_left(sandbox):
    start = time.monotonic()
    result = await sandbox.run("ps -e -o pid=,ppid=,stat=,args=; echo ok", timeout_s=10)
    assert time.monotonic() - start < 2 and not result.timed_out
    lines = [line.strip() for line in result.stdout.splitlines()]
    others = [
        line for line in lines if not line.endswith(("ps -e -o pid=,ppid=,stat=,args=", "ok"))
    ]
    left = sorted(line.split(None, 3)[3] for line in others)
    assert left == sorted(LEFT), result.stdout
    assert lines[-1] == "ok" and result.stderr == "" and result.exit_code == 0


@pytest.mark.parametrize(
    "command",
    [
        ":(){ :|:& };:; sleep 1000",  # a fork bomb, up against the pids limit
        "(sleep 1000 &); sleep 1000",  # a double fork: reparented to init
        "setsid -f sleep 1000; (nohup yes >/dev/null 2>&1 &); sleep 1000",  # new session
        "nohup bash -c 'while :; do sleep 0.01 & done' >/dev/null 2>&1 & sleep 1000",
    ],
)
async def test_a_timeout_kills_everything_the_command_started(sandbox, command):
    await sandbox.run("cd /tmp; kept=yes")
    start = time.monotonic()
    result = await sandbox.run(command, timeout_s=3)
    assert time.monotonic() - start < 20
    assert result.timed_out and result.exit_code is None
    assert result.killed_processes >= 1 and not result.sandbox_restarted
    assert not result.shell_restarted
    await assert_only_init_and_shell_left(sandbox)
    assert (await sandbox.run("pwd; echo $kept")).stdout == "/tmp\nyes\n"  # the same shell


async def test_processes_left_by_earlier_commands_go_with_a_timeout(sandbox):
    await sandbox.run("(sleep 1000 &); setsid sleep 2000 &")  # ends at once: nothing killed
    assert "sleep 2000" in (await sandbox.run("ps -e -o args=")).stdout
    result = await sandbox.run("sleep 1000", timeout_s=2)
    assert result.timed_out
    await assert_only_init_and_shell_left(sandbox)


async def test_a_stuck_shell_and_its_escaped_children_are_all_replaced(sandbox):
    start = time.monotonic()
    result = await sandbox.run("(setsid sleep 1000 &); while :; do :; done", timeout_s=2)
    assert time.monotonic() - start < 20
    assert result.timed_out and result.shell_restarted
    await assert_only_init_and_shell_left(sandbox)


async def test_if_the_killer_cannot_finish_the_container_restarts(sandbox, monkeypatch):
    from obsspec.environments import shell

    await sandbox.run("echo kept > /root/file; (setsid sleep 1000 &)")
    gave_up = ["bash", "-c", "echo killed=0 left=1"]  # as when the killer's budget ran out
    monkeypatch.setattr(shell, "kill_all_command", lambda *a, **k: gave_up)
    start = time.monotonic()
    result = await sandbox.run("sleep 1000", timeout_s=2)
    assert time.monotonic() - start < 20
    assert result.timed_out and result.sandbox_restarted and result.shell_restarted
    monkeypatch.undo()
    await assert_only_init_and_shell_left(sandbox)
    assert (await sandbox.run("cat /root/file")).stdout == "kept\n"  # files are kept


async def test_an_episode_deadline_ends_the_command_and_all_it_started(sandbox):
    """The caller cancels (asyncio.timeout around an episode): nothing runs on under the
    verifier, and the next command gets a fresh shell."""
    command = "(setsid sleep 1000 &); bomb() { bomb | bomb & }; bomb; sleep 1000"
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(3):
            await sandbox.run(command, timeout_s=60)
    assert time.monotonic() - start < 20
    _, ps = await sandbox.exec_oneoff(["ps", "-e", "-o", "args="])
    assert sorted(ps.decode().splitlines()) == sorted([*LEFT[:2], "ps -e -o args="])
    assert (await sandbox.run("echo ok")).stdout == "ok\n"
    await assert_only_init_and_shell_left(sandbox)


async def test_no_job_notice_reaches_the_next_observation(sandbox):
    """After a timeout that killed a background loop, and after an OOM kill, the next
    command prints exactly what `bash -c` prints: bash's "line 1: PID Killed ..." report
    of the lost jobs names a PID that no model can predict."""
    timed_out = await sandbox.run("while true; do :; done & sleep 1000", timeout_s=2)
    assert timed_out.timed_out
    probe = "echo next; ls /nonexistent"
    expected = await bash_c(sandbox, probe)
    assert "next" in expected[0] and "/nonexistent" in expected[1]
    after_timeout = await sandbox.run(probe)
    assert (after_timeout.stdout, after_timeout.stderr) == expected

    oom = await sandbox.run("python3 -c 'x = bytearray(10**10)'", timeout_s=30)
    assert oom.exit_code == 137 and "Killed" not in oom.stderr  # as bash -c: no notice
    after_oom = await sandbox.run(probe)
    assert (after_oom.stdout, after_oom.stderr) == expected

    # a background job that the OOM killer ends between two commands
    await sandbox.run("(python3 -c 'import time; x = bytearray(10**10)') &")
    await asyncio.sleep(2)
    after_background_oom = await sandbox.run(probe)
    assert (after_background_oom.stdout, after_background_oom.stderr) == expected


PROCESSES = r"""for d in /proc/[0-9]*; do
  read -r l < $d/stat 2>/dev/null || continue; f=(${l##*) }); echo ${d#/proc/} ${f[1]} ${f[19]}
done"""


def processes(container) -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks) of every process in the container."""
    output = container.exec_run(["bash", "-c", PROCESSES]).output.decode()
    rows = (line.split() for line in output.splitlines())
    return {int(pid): (int(ppid), int(start)) for pid, ppid, start in rows}


async def test_an_entrypoint_that_started_late_is_spared(docker_client, base_image, run_id):
    """Under load the entrypoint can start seconds after init (here: a 1% CPU quota delays
    init's fork by 2-3 s). The killer tells it apart as init's oldest child, whenever it
    started: killing it would stop the container under the verifier that comes next."""
    from obsspec.environments.containment import kill_all_command, parse_report
    from obsspec.environments.sandbox import run_labels

    container = docker_client.containers.run(
        base_image, ["infinity"], entrypoint=["sleep"], detach=True, init=True,
        cpu_period=100_000, cpu_quota=1_000, labels=run_labels(run_id),
    )  # fmt: skip
    try:
        children: list[int] = []
        for _ in range(100):  # wait for the slow entrypoint to exist
            table = processes(container)
            children = [pid for pid, (ppid, _) in table.items() if ppid == 1]
            if children:
                break
            await asyncio.sleep(0.2)
        assert table[children[0]][1] - table[1][1] > 100  # it started over a second late
        container.update(cpu_quota=100_000, cpu_period=100_000)  # the killer at full speed
        _, output = container.exec_run(kill_all_command(0, keep_shell=False, budget_s=5))
        container.reload()
        assert container.status == "running", output
        assert parse_report(output).left == 0
    finally:
        container.remove(force=True)
