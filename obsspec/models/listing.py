"""Rows for `obsspec models list`: every known model and everything else in the cache
(converted models, and hub downloads under <models_dir>/hub/)."""

from __future__ import annotations

from pathlib import Path

from obsspec.models.hub_models import installed_hub_models
from obsspec.models.registry import KNOWN_MODELS, model_dir
from obsspec.models.store import ModelManifest, installed_models, read_manifest, verify_files


def model_rows(models_dir: Path) -> list[dict]:
    rows = []
    for name, spec in sorted(KNOWN_MODELS.items()):
        path = model_dir(models_dir, name)
        manifest = read_manifest(path)
        if manifest is None:
            status, size = "not pulled", 0
        else:
            status = "damaged" if verify_files(path, manifest, full=False) else "pulled"
            size = sum(f.size for f in manifest.files.values())
        rows.append(
            {
                "name": name,
                "known": True,
                "status": status,
                "pulled": status == "pulled",
                "path": str(path),
                "size_bytes": size,
                "source": f"pypi:{spec.pypi_package}=={spec.pypi_version}",
                "description": spec.description,
            }
        )
    for path, manifest in installed_models(models_dir):
        if path.name not in KNOWN_MODELS:
            rows.append(cached_row(path.name, path, manifest))
    for path, manifest in installed_hub_models(models_dir):
        rows.append(cached_row(manifest.name, path, manifest))  # named by its hub id
    return rows


def cached_row(name: str, path: Path, manifest: ModelManifest) -> dict:
    damaged = verify_files(path, manifest, full=False)
    return {
        "name": name,
        "known": False,
        "status": "damaged" if damaged else "pulled",
        "pulled": not damaged,
        "path": str(path),
        "size_bytes": sum(f.size for f in manifest.files.values()),
        "source": manifest.source,
        "description": "",
    }
