"""Collection with an image map and a network policy: a registry-only FROM builds on the mapped
local image, an unmapped one is skipped with the one-line error, the verifier alone gets the
network under `verify`, and the run directory records both settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest

from obsspec.config import ImagesConfig
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"
REGISTRY_ONLY = "registry.invalid/library/python:3.13-slim"  # never pullable (RFC 2606)

pytestmark = pytest.mark.docker

# Reward 1 only with a network at verify time and none for the agent (its greeting file
# records what the agent saw: the reference solution runs as the agent).
NEEDS_VERIFY_NETWORK = """#!/bin/bash
agent_had=$(grep -c eth /root/agent-net.txt)
ok=0; grep -q eth /proc/net/dev && [ "$agent_had" = 0 ] && ok=1
echo "$ok" > /logs/verifier/reward.txt
"""


def registry_task(root: Path, name: str) -> None:
    shutil.copytree(GREETING, root / name)
    (root / name / "environment" / "Dockerfile").write_text(
        f"FROM {REGISTRY_ONLY}\nRUN mkdir -p /srv && echo Ada > /srv/user.txt\nWORKDIR /root\n"
    )
    (root / name / "solution" / "solve.sh").write_text("cat /proc/net/dev > /root/agent-net.txt\n")
    (root / name / "tests" / "test.sh").write_text(NEEDS_VERIFY_NETWORK)


async def test_mapped_task_collects_with_the_verifier_network_and_unmapped_is_skipped(
    tmp_path, settings, base_image
):
    tasks = tmp_path / "tasks"
    registry_task(tasks, "mapped")
    registry_task(tasks, "unmapped")
    (tasks / "unmapped" / "environment" / "Dockerfile").write_text(
        "FROM registry.invalid/elsewhere/ubuntu:24.04\n"
    )
    config = CollectConfig(
        tasks=str(tasks),
        out=tmp_path / "run",
        policy="oracle",
        images=ImagesConfig(map={REGISTRY_ONLY: base_image}),
        network=NetworkPolicy.verify,
    )
    summary = await collect(config, settings.paths.models_dir)
    assert summary["failures"] == {}
    reason = summary["skipped_tasks"]["unmapped"]
    assert "registry.invalid/elsewhere/ubuntu:24.04" in reason and "--image-map" in reason
    files = str(config.out / "data" / "*.parquet")
    [row] = datasets.load_dataset("parquet", data_files=files, split="train")
    assert (row["task_id"], row["reward"]) == ("mapped", 1.0)
    recorded = json.loads((config.out / "manifest.json").read_text())["config"]
    assert recorded["images"] == {"map": {REGISTRY_ONLY: base_image}}
    assert recorded["network"] == "verify"
