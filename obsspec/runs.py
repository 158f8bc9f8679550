"""Reading collected runs: the episodes a `collect` run directory holds.

    RUN_DIR/manifest.json              what the run is (written by obsspec.rollout)
    RUN_DIR/data/*.parquet             finished shards, one row per episode

Readers (world-model training, SFT, profiling) need only this module; the writing side,
with its atomic shards and resume, lives in obsspec.rollout.dataset.
"""

from __future__ import annotations

from pathlib import Path

from obsspec.errors import ConfigError

DATA_DIR = "data"
MANIFEST = "manifest.json"
SHARD_GLOB = "*.parquet"


def shard_paths(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob(SHARD_GLOB))


def read_rows(run_dir: Path, *, flag: str = "--data") -> list[dict]:
    """Every episode of a run, as dicts in the dataset schema (README, "Dataset schema")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not run_dir.is_dir():
        raise ConfigError(f"{flag} {run_dir}: no such run directory")
    shards = shard_paths(run_dir / DATA_DIR)
    if not shards:
        raise ConfigError(
            f"{flag} {run_dir}: no episodes (no {DATA_DIR}/{SHARD_GLOB}); "
            "is it the --out of an `obsspec collect` run that finished at least one shard?"
        )
    try:
        return pq.read_table(shards).to_pylist()
    except (OSError, pa.ArrowException) as e:
        raise ConfigError(f"{flag} {run_dir}: unreadable dataset shard: {e}") from e


def read_run_manifest(run_dir: Path, *, flag: str = "--data") -> dict:
    """The run's manifest.json (empty when the run has none: a dataset copied without it)."""
    import json

    path = run_dir / MANIFEST
    if not path.is_file():
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{flag} {run_dir}: unreadable {MANIFEST}: {e}") from e
    return manifest if isinstance(manifest, dict) else {}


def action_format(manifest: dict) -> str:
    """The action format the run's policy used (it decides the observation's chat role)."""
    limits = (manifest.get("identity") or {}).get("limits") or {}
    return limits.get("action_format", "markdown")
