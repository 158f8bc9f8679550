"""What of the driver's environment reaches Ray's workers (obsspec.rollout.ray_workers):
vLLM's and NCCL's settings by prefix, never CUDA_VISIBLE_DEVICES (Ray sets each actor's) or
HF_TOKEN (Ray keeps a runtime environment in the cluster's metadata); checked in a real
actor too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from obsspec.rollout.ray_workers import forwarded_env
from tests.rl.test_two_node import RAY_ENV, end_node, free_port, start_node

DRIVER_ENV = {
    "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
    "VLLM_CONFIGURE_LOGGING": "0",
    "NCCL_SOCKET_IFNAME": "eth0",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "HF_HUB_OFFLINE": "1",
    "CUDA_VISIBLE_DEVICES": "3",
    "HF_TOKEN": "hf_secret",
    "HOME": "/root",
}


def test_vllm_and_nccl_settings_go_by_prefix_and_the_device_list_and_token_never():
    forwarded = forwarded_env(DRIVER_ENV)
    assert set(forwarded) == {
        "VLLM_ATTENTION_BACKEND",
        "VLLM_CONFIGURE_LOGGING",
        "NCCL_SOCKET_IFNAME",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "PYTORCH_CUDA_ALLOC_CONF",
        "HF_HUB_OFFLINE",
    }
    assert forwarded["NCCL_SOCKET_IFNAME"] == "eth0"


ACTOR = """
import json, os, sys, ray
from obsspec.rollout.ray_workers import init_ray
init_ray(sys.argv[1])
@ray.remote(num_cpus=0)
def seen():
    return {k: os.environ.get(k) for k in ("VLLM_TEST_SETTING", "NCCL_DEBUG", "HF_TOKEN")}
print(json.dumps(ray.get(seen.remote())))
ray.shutdown()
"""


@pytest.fixture
def head() -> Iterator[str]:
    """A Ray head started without the settings under test (its workers cannot inherit them
    from the driver, as they would from a cluster the driver starts itself)."""
    temp = Path(tempfile.mkdtemp(prefix="obsspec-env-", dir="/tmp"))  # short: socket paths
    port = free_port()
    node = start_node(
        ["--head", "--port", str(port), "--temp-dir", str(temp), "--include-dashboard",
         "false", "--dashboard-port", str(free_port()), "--ray-client-server-port",
         str(free_port())],
        temp / "head.log",
    )  # fmt: skip
    try:
        address_file = temp / "ray_current_cluster"
        deadline = time.monotonic() + 60
        while not address_file.exists():
            assert node.poll() is None, (temp / "head.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the head did not start in 60 s"
            time.sleep(0.2)
        yield address_file.read_text().strip()
    finally:
        end_node(node)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.ray
def test_a_worker_of_a_running_cluster_sees_the_forwarded_settings(head):
    env = {**os.environ, **RAY_ENV}
    env.update(VLLM_TEST_SETTING="on", NCCL_DEBUG="WARN", HF_TOKEN="hf_x")
    done = subprocess.run(
        [sys.executable, "-c", ACTOR, head], capture_output=True, text=True, env=env, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"VLLM_TEST_SETTING": "on", "NCCL_DEBUG": "WARN", "HF_TOKEN": None}
