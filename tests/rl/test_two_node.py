"""`obsspec rl` on a two-node Ray cluster started on this machine: the rollout worker goes to
the node its `rollout_resources` name, the trainers to the head.

Both nodes are `ray start --block` processes in their own sessions with a private temp dir
(so no other Ray user on the machine finds this cluster) and ports of their own (two raylets
on one machine cannot share the node-manager, object-manager, agent or metrics ports). They
are ended by their process groups, and every process they had spawned by its id, whatever
the test's outcome: never `ray stop`, which would end every Ray on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.cli.test_cli import obsspec
from tests.rl.conftest import TINY_FLAGS

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.docker, pytest.mark.vllm]

RAY = str(Path(sys.executable).parent / "ray")
# This cluster alone: no token auth (a token in ~/.ray would otherwise turn it on for the
# nodes but not for every client), and no usage reporting.
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def own_ports() -> list[str]:
    """The ports every raylet opens, distinct for each node on one machine."""
    flags = (
        "--node-manager-port",
        "--object-manager-port",
        "--dashboard-agent-listen-port",
        "--dashboard-agent-grpc-port",
        "--runtime-env-agent-port",
        "--metrics-export-port",
    )
    return [part for flag in flags for part in (flag, str(free_port()))]


def start_node(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [RAY, "start", "--block", "--num-cpus", "2", "--object-store-memory", str(200 << 20),
         *own_ports(), *args],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, **RAY_ENV},
    )  # fmt: skip


def node_ids(address: str, expected: int) -> dict[str, str]:
    """{custom resource: id of the node that has it}, once `expected` nodes are alive."""
    script = f"""
import json, time, ray
ray.init(address={address!r}, log_to_driver=False)
for _ in range(300):
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) == {expected}:
        break
    time.sleep(0.2)
print(json.dumps({{key: n["NodeID"] for n in nodes for key in n["Resources"]}}))
"""
    listed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env={**os.environ, **RAY_ENV},
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr[-2000:]
    return json.loads(listed.stdout.strip().splitlines()[-1])


def end_node(node: subprocess.Popen) -> None:
    """The node's processes (raylet, GCS, ...) and every worker they spawned, by their ids."""
    with contextlib.suppress(psutil.Error):
        spawned = psutil.Process(node.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
        for process in spawned:
            with contextlib.suppress(psutil.Error):
                process.kill()
    node.wait(30)


@pytest.fixture
def two_nodes() -> Iterator[tuple[str, dict[str, str]]]:
    """A head with {"head": 1} and a second node with {"second_node": 1}: (address, ids)."""
    temp = Path(tempfile.mkdtemp(prefix="obsspec-2n-", dir="/tmp"))  # short: socket paths
    port = free_port()
    nodes = []
    try:
        nodes.append(start_node(
            ["--head", "--port", str(port), "--temp-dir", str(temp), "--include-dashboard",
             "false", "--dashboard-port", str(free_port()), "--ray-client-server-port",
             str(free_port()), "--resources", json.dumps({"head": 1})],
            temp / "head.log",
        ))  # fmt: skip
        address_file = temp / "ray_current_cluster"
        deadline = time.monotonic() + 60
        while not address_file.exists():
            assert nodes[0].poll() is None, (temp / "head.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the head did not start in 60 s"
            time.sleep(0.2)
        address = address_file.read_text().strip()
        nodes.append(start_node(
            ["--address", address, "--resources", json.dumps({"second_node": 1})],
            temp / "second.log",
        ))  # fmt: skip
        yield address, node_ids(address, expected=2)
    finally:
        for node in reversed(nodes):
            end_node(node)
        shutil.rmtree(temp, ignore_errors=True)


def test_rollout_worker_runs_on_the_node_its_resources_name(
    two_nodes, rl_tasks, tiny_model_dir, base_image, tmp_path
):
    address, ids = two_nodes
    assert ids["head"] != ids["second_node"]
    out = tmp_path / "run"
    result = obsspec(
        "rl", *TINY_FLAGS, "--tasks", str(rl_tasks), "--policy", str(tiny_model_dir),
        "--out", str(out), "--steps", "1", "--max-turns", "1", "--no-cotrain",
        "--set", "grpo.tasks_per_step=1", "--ray-address", address,
        "--set", "placement.rollout_resources={second_node = 1}",
        "--set", "placement.trainer_resources={head = 1}",
        "--set", "placement.placement_timeout_s=60",
        "--json", env=RAY_ENV, timeout=420,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["steps_done"] == 1
    where = [line for line in result.stderr.splitlines() if line.startswith("placement:")]
    assert len(where) == 1, result.stderr[-3000:]
    assert f"rollout worker 0 on node {ids['second_node'][:8]}" in where[0]
    assert f"policy trainer rank 0 on node {ids['head'][:8]}" in where[0]
