"""The kit as it lands in a sandbox: one folder per plan, staged on the host once.

    <cache>/verifier-kit/staged/<key>/obsspec-kit/
        bin/uv, bin/uvx          the wrapper (shims/uv): notes each command, runs libexec's
        bin/curl, bin/wget       shims/fetch: uv's installer from the kit, else the real tool
        bin/apt-get, bin/apt     shims/apt-get, for a verifier without a network
        libexec/uv, libexec/uvx  uv's binaries
        install.sh, place-uv.sh  what the fetched installer runs
        wheels/                  the plan's wheels
        served.log               empty: the shims write what they served

Files are hard links into the cache where the file system allows (a copy otherwise), and the
folder is built under a temporary name and renamed, so a stage is whole or absent.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from obsspec.environments.verifier_kit.plan import KitPlan
from obsspec.environments.verifier_kit.prepare import ensure_dir

KIT_NAME = "obsspec-kit"  # lands at /obsspec-kit
SHIMS = resources.files("obsspec.environments.verifier_kit") / "shims"
# name in bin/ -> the shim that serves it, and whether it serves only without a network
UV_SHIMS = {"uv": "uv", "uvx": "uv", "curl": "fetch", "wget": "fetch"}
OFFLINE_SHIMS = {"apt-get": "apt-get", "apt": "apt-get"}


def stage_key(plan: KitPlan) -> str:
    """Names a stage by what it holds: the plan, and the shims' text (a newer obsspec's
    shims get a new stage)."""
    shims = [(p.name, p.read_bytes().hex()) for p in sorted(SHIMS.iterdir(), key=str)]
    text = json.dumps(
        [plan.uv_version, str(plan.uv_dir), sorted(map(str, plan.wheels)), plan.offline, shims]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def stage_kit(root: Path, plan: KitPlan) -> Path:
    """The staged obsspec-kit folder of plan (made once), ready to upload to /."""
    folder = root / "staged" / stage_key(plan) / KIT_NAME
    if folder.is_dir():
        return folder
    with tempfile.TemporaryDirectory(dir=ensure_dir(root / "staged")) as tmp:
        staged = Path(tmp) / KIT_NAME
        fill(staged, plan)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            staged.rename(folder)
        except OSError:  # another process staged it first
            if not folder.is_dir():
                raise
    return folder


def fill(staged: Path, plan: KitPlan) -> None:
    for sub in ("bin", "libexec", "wheels"):
        (staged / sub).mkdir(parents=True)
    shims = dict(UV_SHIMS) if plan.uv_dir else {}
    if plan.offline:
        shims |= OFFLINE_SHIMS
    for name, shim in shims.items():
        write_executable(staged / "bin" / name, (SHIMS / shim).read_bytes())
    for name in ("install.sh", "place-uv.sh"):
        write_executable(staged / name, (SHIMS / name).read_bytes())
    if plan.uv_dir:
        for name in ("uv", "uvx"):
            link_or_copy(plan.uv_dir / name, staged / "libexec" / name)
    for wheel in plan.wheels:
        link_or_copy(wheel, staged / "wheels" / wheel.name)
    (staged / "served.log").write_text("")
    (staged / "served.log").chmod(0o666)


def write_executable(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o755)


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
