"""Fixtures of the rl tests: greeting tasks, and a tiny policy warm-started on them.

A randomly initialised tiny model never writes a command, so every reward would be 0 and
every GRPO group flat (nothing to learn, nothing to compare). A few seconds of SFT on the
oracle's episodes make it write the solution some of the time at temperature 1: rewards vary
within groups, the policy update, the world model's co-training and speculation all run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.cli.test_cli import obsspec
from tests.sft.test_sft import greeting_tasks

EXAMPLE = Path(__file__).parents[2] / "examples" / "rl_cpu_smoke.toml"
# The smoke config, made small enough for a tiny model in CI.
# The trainer computes in float32 on every CPU: runs compared "within float rounding" (resumed,
# sharded) must not depend on whether this CPU has native bfloat16 (where `auto` picks it, a
# sharded run computes wholly in bfloat16 and a single process only autocasts: their step-1
# policy losses differed by 2e-3, their gradient norms by 3%).
TINY_FLAGS = (
    "--config",
    str(EXAMPLE),
    "--max-turns",
    "3",
    "--max-tokens",
    "24",
    "--group-size",
    "2",
    "--set",
    "grpo.dtype=float32",
)


@pytest.fixture(scope="session")
def rl_tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rl-tasks")
    greeting_tasks(root, ["greet-a"], user="Ada")
    return greeting_tasks(root, ["greet-b"], user="Bob")


@pytest.fixture(scope="session")
def warm_tiny_policy(rl_tasks, tiny_model_dir, tmp_path_factory, settings, base_image) -> Path:
    from obsspec.rollout.collect import collect
    from obsspec.rollout.config import CollectConfig

    root = tmp_path_factory.mktemp("rl-policy")
    oracle = CollectConfig(tasks=str(rl_tasks), out=root / "oracle", policy="oracle")
    assert asyncio.run(collect(oracle, settings.paths.models_dir))["mean_reward"] == 1.0
    out = root / "policy"
    result = obsspec(
        "sft", "--data", str(oracle.out), "--base", str(tiny_model_dir), "--out", str(out),
        "--epochs", "80", "--lr", "3e-3", "--batch-tokens", "4096", "--no-eval", "--json",
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["last_loss"] < 0.5
    return out
