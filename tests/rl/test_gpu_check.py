"""bench/gpu_check.py: the dry run plans a config per GPU without a GPU or the models; the
run's stages pass on CPUs with tiny Qwen3-shaped models (what it runs on a GPU machine)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.py"


def gpu_check(*args: str, timeout: int = 120) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--compact", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout)


def test_the_dry_run_plans_the_gpu_example():
    code, plan = gpu_check("--dry-run")
    assert code == 0 and plan["ok"] and plan["gpus_requested"] == 8
    roles = [role["role"] for gpu in plan["gpus"] for role in gpu["roles"]]
    assert roles.count("policy trainer rank 0/3") == 1 and "world-model co-trainer" in roles
    assert plan["policy"]["params_b"] == pytest.approx(8.19, abs=0.01)
    assert any("contexts of 32768 tokens" in note for note in plan["notes"])


def test_the_dry_run_fails_a_placement_that_does_not_fit():
    code, plan = gpu_check("--dry-run", "--gpu-gib", "40")
    assert code == 1 and not plan["ok"]
    assert [gpu["fits"] for gpu in plan["gpus"]].count(False) >= 3


def test_the_dry_run_names_a_bad_key(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[rl.engine]\ngpu_memory_utilisation = 0.5\n")
    code, answer = gpu_check("--dry-run", "--config", str(config))
    assert code == 2 and "gpu_memory_utilisation" in answer["error"]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.docker
def test_every_stage_passes_with_tiny_shapes_on_cpus(base_image):
    code, report = gpu_check("--tiny", "--tasks", "1", "--family", "git-bisect", timeout=600)
    stages = report["stages"]
    assert code == 0 and report["ok"], stages
    assert list(stages) == ["models", "engines", "episodes", "grpo", "sync", "cotrain"]
    assert stages["engines"]["policy"]["tokens_per_s"] > 0
    episodes = stages["episodes"]
    assert episodes["sandbox"] == "docker" and episodes["rewards"] == [1.0, 1.0]
    assert episodes["command_ms_median"] > 0 and episodes["prediction_ms_median"] > 0
    assert stages["sync"]["check_error"] < 0.1 and stages["grpo"]["trained_tokens"] > 0
    assert stages["cotrain"]["examples"] > 0
