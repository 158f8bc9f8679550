"""`obsspec collect` stopped while a task image builds: it ends in seconds, as interrupted,
with the build's container gone (not after the build's `RUN sleep`)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.cli.test_cli import OBSSPEC

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = pytest.mark.docker


def containers_running(token: str) -> list[str]:
    """Containers (running or not) whose command names token: the build's RUN step."""
    result = subprocess.run(
        ["docker", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Command}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.split()[0] for line in result.stdout.splitlines() if token in line]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_task_image_build_ends_collect_in_seconds(
    tmp_path, base_image, signum, code
):
    task = tmp_path / "tasks" / "slow-build"
    shutil.copytree(GREETING, task)
    token = uuid.uuid4().hex
    (task / "environment" / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN sleep 120 && echo {token}\n"
    )
    args = [OBSSPEC, "collect", "--tasks", str(task), "--out", str(tmp_path / "run")]
    proc = subprocess.Popen(
        [*args, "--policy", "oracle"],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    deadline = time.monotonic() + 60
    while not containers_running(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert containers_running(token), "".join(lines)
    time.sleep(0.5)

    start = time.monotonic()
    proc.send_signal(signum)
    try:
        assert proc.wait(30) == code, "".join(lines)
    finally:
        proc.kill()
    # seconds: the interpreter's own teardown takes a few on a loaded machine
    assert time.monotonic() - start < 12, "".join(lines)
    assert containers_running(token) == []
    time.sleep(0.2)
    assert "Traceback" not in "".join(lines)
    assert any("interrupted" in line for line in lines), "".join(lines)
