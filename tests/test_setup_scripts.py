"""make setup's platform choice (scripts/detect-platform.sh) and its refusals
(scripts/install-python.sh): a GPU is found without nvidia-smi on PATH, a virtual
environment of the other platform is refused naming the way out, and so is a driver too old
for vLLM's CUDA build. Nothing is installed: each refusal comes before pip runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def run(script: str, *args: str, proc: Path, dev: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OBSSPEC_NVIDIA_SMI": "false",  # as if nvidia-smi were not on PATH
        "OBSSPEC_NVIDIA_PROC": str(proc),
        "OBSSPEC_DEV_DIR": str(dev),
    }
    return subprocess.run(
        [str(ROOT / "scripts" / script), *args], capture_output=True, text=True, env=env
    )


@pytest.mark.parametrize(
    ("make", "platform"),
    [
        ((), "cpu"),
        (("proc/gpus/0000:01:00.0/",), "gpu"),  # the driver's entry for one GPU
        (("dev/nvidia0",), "gpu"),  # a container given the device, not nvidia-smi
        (("dev/nvidiactl",), "cpu"),  # the control device alone is no GPU
    ],
)
def test_the_platform_is_found_without_nvidia_smi(tmp_path, make, platform):
    for path in make:
        target = tmp_path / path
        if path.endswith("/"):
            target.mkdir(parents=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch()
    done = run("detect-platform.sh", proc=tmp_path / "proc", dev=tmp_path / "dev")
    assert done.returncode == 0 and done.stdout.strip() == platform


DRIVER_575 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  575.51.03  Wed May  7 2025\n"
DRIVER_590 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.44.01  Release\n"


def fake_venv(root: Path, platform: str) -> Path:
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text("#!/bin/sh\nexit 1\n")  # never asked: the marker says it
    python.chmod(0o755)
    (root / ".obsspec-platform").write_text(f"{platform}\n")
    return root


def test_a_venv_of_the_other_platform_is_refused_naming_the_way_out(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text(DRIVER_590)
    venv = fake_venv(tmp_path / "venv", "cpu")
    done = run("install-python.sh", str(venv), "gpu", proc=tmp_path / "proc", dev=tmp_path)
    assert done.returncode == 1
    assert "holds the cpu build" in done.stderr and "needs the gpu one" in done.stderr
    assert f"rm -rf {venv}" in done.stderr and "VENV=.venv-gpu" in done.stderr
    assert (venv / ".obsspec-platform").read_text() == "cpu\n"  # left as it was


def test_a_driver_older_than_cuda_13_needs_is_refused_before_installing(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text(DRIVER_575)
    venv = tmp_path / "venv"
    done = run("install-python.sh", str(venv), "gpu", proc=tmp_path / "proc", dev=tmp_path)
    assert done.returncode == 1 and not venv.exists()
    assert "575.51.03" in done.stderr and "580 or newer" in done.stderr
    assert "EXTRA=cpu" in done.stderr
