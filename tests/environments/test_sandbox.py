"""DockerSandbox against a real Docker engine: terminal semantics and every bad input."""

import asyncio
import resource
import subprocess
import time

import pytest

from obsspec.environments.errors import SandboxError
from obsspec.environments.sandbox import LABEL_RUN, DockerSandbox, SandboxLimits
from obsspec.types import render_observation

pytestmark = pytest.mark.docker


@pytest.fixture
async def sandbox(docker_client, base_image, run_id):
    async with DockerSandbox(
        docker_client, base_image, SandboxLimits(pids=128), run_id=run_id
    ) as sb:
        yield sb


async def test_shell_state_persists_like_a_terminal(sandbox):
    setup = "cd /tmp && x=41 && f() { echo \"f:$1\"; } && alias hi='echo alias-hi'"
    assert (await sandbox.run(setup)).exit_code == 0
    result = await sandbox.run("pwd; echo $((x + 1)); f arg; hi")
    assert result.stdout == "/tmp\n42\nf:arg\nalias-hi\n"
    await sandbox.run("false")
    assert (await sandbox.run("echo $?")).stdout == "1\n"  # $? of the previous command


async def test_streams_exit_codes_and_deterministic_messages(sandbox):
    result = await sandbox.run("echo out; echo err >&2; exit_code() { return 3; }; exit_code")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    first = await sandbox.run("no-such-command")
    await sandbox.run("echo one\necho two\necho three")
    second = await sandbox.run("no-such-command")
    assert first.stderr == second.stderr == "bash: line 1: no-such-command: command not found\n"
    assert first.exit_code == 127


async def test_timeout_kills_the_command_and_the_shell_survives(sandbox):
    await sandbox.run("cd /srv")
    start = time.monotonic()
    result = await sandbox.run("echo begun; sleep 1000", timeout_s=2)
    assert time.monotonic() - start < 4
    assert result.timed_out and result.exit_code is None and not result.shell_restarted
    assert result.stdout == "begun\n" and result.stderr == ""
    assert render_observation(result).endswith("[command timed out after 2 s and was killed]")
    after = await sandbox.run("pwd; ps -e -o args= | grep -c '^sleep 1000' || true")
    assert after.stdout == "/srv\n0\n"  # same shell, and the sleep is gone


async def test_stuck_shell_builtin_loop_restarts_the_shell(sandbox):
    result = await sandbox.run("while :; do :; done", timeout_s=1)
    assert result.timed_out and result.shell_restarted
    assert (await sandbox.run("echo alive")).stdout == "alive\n"


async def test_huge_output_is_capped_while_streaming(sandbox):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = await sandbox.run("yes | head -c 100000000", timeout_s=60)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.exit_code == 0 and result.truncated
    assert len(result.stdout) < 1_000_000
    assert grown_mb < 100
    assert result.stdout.startswith("y\ny\n") and result.stdout.endswith("y\ny\n")


async def test_stdin_is_eof_not_a_hang(sandbox):
    result = await sandbox.run("cat; read line; echo read=$?; python3 -c 'input()'", timeout_s=10)
    assert not result.timed_out
    assert "read=1" in result.stdout and "EOFError" in result.stderr


async def test_exit_restarts_the_session_and_says_so(sandbox):
    await sandbox.run("cd /tmp; x=1")
    result = await sandbox.run("exit 3")
    assert result.shell_restarted and result.exit_code == 3
    assert (await sandbox.run("pwd; echo x=$x")).stdout == "/root\nx=\n"  # fresh shell


async def test_binary_output_gives_valid_text(sandbox):
    result = await sandbox.run("head -c 3000 /dev/urandom; printf '\\xff\\xfe\\x00tail'")
    text = render_observation(result)
    text.encode("utf-8")  # valid text: encodes without error
    assert "\x00" not in text and text.endswith("tail\n[exit code: 0]")


async def test_no_network_by_default(sandbox):
    result = await sandbox.run(
        'ls /sys/class/net; python3 -c "import socket; '
        "socket.create_connection(('1.1.1.1', 53), timeout=2)\""
    )
    assert result.stdout.split() == ["lo"]
    assert result.exit_code != 0 and "unreachable" in result.stderr.lower()


async def test_fork_bomb_is_contained_by_the_pids_limit(docker_client, base_image, run_id):
    async with DockerSandbox(
        docker_client, base_image, SandboxLimits(pids=64), run_id=run_id
    ) as sb:
        await sb.run("bomb() { bomb | bomb & }; bomb", timeout_s=5)
        await asyncio.sleep(2)
        processes = (await asyncio.to_thread(sb.container.top))["Processes"]
        assert 32 < len(processes) <= 64  # the bomb ran, and hit the limit
        assert subprocess.run(["true"], timeout=10).returncode == 0  # the host still forks
    assert docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}) == []


async def test_container_killed_from_outside_is_a_typed_error(docker_client, base_image, run_id):
    async with DockerSandbox(docker_client, base_image, run_id=run_id) as sb:
        task = asyncio.create_task(sb.run("sleep 30", timeout_s=60))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(sb.container.kill)
        start = time.monotonic()
        with pytest.raises(SandboxError, match=r"killed from outside|no longer exists|removed"):
            await task
        assert time.monotonic() - start < 15


async def test_background_output_arrives_with_a_later_command(sandbox):
    await sandbox.run("(sleep 0.3; echo late) &")
    await asyncio.sleep(0.6)
    assert "late" in (await sandbox.run("echo now")).stdout


async def test_upload_and_read_file(sandbox, tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "check.sh").write_text("echo checked\n")
    await sandbox.upload(tmp_path / "tests", "/")
    assert (await sandbox.run("bash /tests/check.sh")).stdout == "checked\n"
    assert await sandbox.read_file("/tests/check.sh") == b"echo checked\n"
    assert await sandbox.read_file("/no/such/file") is None


async def test_limits_and_labels_are_applied(sandbox, run_id):
    attrs = sandbox.container.attrs["HostConfig"]
    assert attrs["PidsLimit"] == 128 and attrs["NanoCpus"] == 1_000_000_000
    assert "no-new-privileges" in attrs["SecurityOpt"] and attrs["NetworkMode"] == "none"
    assert sandbox.container.labels[LABEL_RUN] == run_id
    assert (await sandbox.run("hostname; date +%Z; umask")).stdout == "sandbox\nUTC\n0022\n"


async def test_quotes_tabs_and_non_ascii_reach_bash_unchanged(sandbox):
    command = "printf '<%s>\\n' 'it'\\''s' \"$(printf 'a\\tb')\" 'é ü' \"back\\\\slash\""
    result = await sandbox.run(command)
    assert result.stdout == "<it's>\n<a\tb>\n<é ü>\n<back\\slash>\n"


async def test_top_level_continue_and_syntax_errors_read_as_bash_c(sandbox):
    await sandbox.run("cd /tmp; v=kept")
    result = await sandbox.run("continue; echo after")
    assert result.stdout == "after\n" and result.exit_code == 0
    assert "continue: only meaningful in a `for', `while', or `until' loop" in result.stderr
    broken = await sandbox.run("echo a\nif then")
    assert broken.stderr.startswith("bash: -c: line 2: syntax error near unexpected token")
    assert (await sandbox.run("pwd; echo $v")).stdout == "/tmp\nkept\n"  # nothing lost


async def test_an_exit_trap_fires_when_the_shell_ends_as_in_a_terminal(sandbox):
    assert (await sandbox.run("trap 'echo bye from EXIT' EXIT")).stdout == ""
    assert (await sandbox.run("echo working")).stdout == "working\n"
    ended = await sandbox.run("exit 2")
    assert ended.stdout == "bye from EXIT\n" and ended.exit_code == 2 and ended.shell_restarted
    assert render_observation(ended).endswith(
        "[exit code: 2; the shell ended and a new one was started]"
    )


async def test_a_one_off_exec_past_its_timeout_is_a_sandbox_error(sandbox):
    """On an overloaded machine a one-off exec (the verifier's upload) can outlast its timeout:
    a retryable SandboxError for that episode, not a bare TimeoutError ending the run."""
    with pytest.raises(SandboxError, match=r"did not return within 0\.5 s"):
        await sandbox.exec_oneoff(["sleep", "5"], timeout_s=0.5)
    result = await sandbox.run("echo still here", timeout_s=10)
    assert result.stdout == "still here\n"


async def test_a_sandbox_docker_refuses_is_an_error_and_leaves_no_container(
    docker_client, base_image, run_id
):
    """Docker refuses the sandbox (cores this machine does not have): a SandboxError naming
    why, and no container of the run is left for `env gc`."""
    limits = SandboxLimits(cpuset="999")
    with pytest.raises(SandboxError, match="cannot start a sandbox"):
        async with DockerSandbox(docker_client, base_image, limits, run_id=run_id):
            pass
    left = docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    assert left == []
