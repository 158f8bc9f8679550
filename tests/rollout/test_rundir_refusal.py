"""A refused collect leaves --out as it found it; a collect with no episode pins nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from obsspec.errors import ClusterError, ConfigError
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.events import Note

GREETING = Path(__file__).parents[1] / "fixtures" / "tasks" / "harbor-greeting"


def snapshot(path: Path) -> dict[str, str] | None:
    """Every entry under path, hidden ones too, with its bytes' hash; None: no such path."""
    if not path.exists():
        return None
    if path.is_file():
        return {"": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "/"
        for p in sorted(path.rglob("*"))
    }


def oracle(out: Path, tasks: Path = GREETING, **fields) -> CollectConfig:
    return CollectConfig(tasks=str(tasks), out=out, policy="oracle", **fields)


def another_run(out: Path) -> Path:
    """A finished run with other settings, as copied from elsewhere (no .lock)."""
    (out / "data").mkdir(parents=True)
    (out / "data" / "shard-x-w00-00000.parquet").write_bytes(b"episodes")
    manifest = {"format": "obsspec-collect/1", "identity": oracle(out, seed=5).identity()}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


async def test_a_refused_collect_leaves_the_directory_as_it_found_it(
    tmp_path, settings, default_model_dir
):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    refusals = {
        "is a file": oracle(tmp_path / "file"),
        "holds a different run": oracle(another_run(tmp_path / "other")),
        "not a collect run": oracle(notes),
        "MiB free": oracle(tmp_path / "new" / "run", min_free_mb=1 << 40),
    }
    for message, config in refusals.items():
        before = snapshot(config.out)
        with pytest.raises(ConfigError, match=message):
            await collect(config, settings.paths.models_dir)
        assert snapshot(config.out) == before, message
    assert not (tmp_path / "new").exists()  # not even the parent of a refused --out is made


async def test_no_cluster_at_the_ray_address_fails_before_anything_is_made(
    tmp_path, settings, default_model_dir
):
    config = oracle(tmp_path / "run", workers=1, ray_address="127.0.0.1:1")  # nothing on port 1
    with pytest.raises(ClusterError, match=r"no Ray cluster answers at 127\.0\.0\.1:1"):
        await collect(config, settings.paths.models_dir)  # in seconds: Ray would retry minutes
    assert not config.out.exists()


@pytest.mark.docker
async def test_a_run_that_saved_no_episode_is_replaced_by_other_settings(
    tmp_path, settings, default_model_dir
):
    """Every task broken: nothing ran, so a corrected command is not refused for the settings
    of the failed one; it says it replaces that run."""
    broken = tmp_path / "tasks" / "broken"
    shutil.copytree(GREETING, broken)
    (broken / "instruction.md").unlink()
    out = tmp_path / "run"
    first = await collect(oracle(out, broken.parent), settings.paths.models_dir)
    assert first["episodes"] == 0 and (out / "manifest.json").is_file()

    events = []
    second = oracle(out, broken.parent, seed=3)
    await collect(second, settings.paths.models_dir, lambda event, _: events.append(event))
    assert json.loads((out / "manifest.json").read_text())["identity"]["seed"] == 3
    notes = [e.message for e in events if isinstance(e, Note)]
    assert any("replacing an empty run" in n and "seed: 0 there, 3 now" in n for n in notes)
