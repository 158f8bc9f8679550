"""Collection scaled out: two Ray workers on a local cluster share one run directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.rollout.dataset import completed_episodes
from obsspec.rollout.events import EpisodeDone
from obsspec.runs import shard_paths

GREETING = Path(__file__).parent.parent / "fixtures" / "tasks" / "harbor-greeting"

pytestmark = [pytest.mark.ray, pytest.mark.docker]


async def test_two_ray_workers_collect_each_episode_once(tmp_path, settings, base_image):
    for name in ("greet-a", "greet-b", "greet-c"):
        shutil.copytree(GREETING, tmp_path / "tasks" / name)
    config = CollectConfig(
        tasks=str(tmp_path / "tasks"),
        out=tmp_path / "run",
        policy="oracle",
        episodes_per_task=2,
        concurrency=2,
        workers=2,
    )
    workers = set()

    def seen(event, _stats):
        if isinstance(event, EpisodeDone):
            workers.add(event.worker)

    summary = await collect(config, settings.paths.models_dir, seen)
    assert summary["episodes"] == 6 and summary["mean_reward"] == 1.0
    assert workers == {0, 1}  # both actors ran episodes, reported through the driver
    names = {path.name.split("-")[2] for path in shard_paths(config.out / "data")}
    assert names == {"w00", "w01"}  # each wrote its own shards, no collisions
    expected = {(f"greet-{t}", i) for t in "abc" for i in range(2)}
    assert set(completed_episodes(config.out / "data")) == expected


@pytest.mark.vllm
@pytest.mark.slow
async def test_each_ray_worker_runs_its_own_engine(tmp_path, settings, base_image, tiny_model_dir):
    for name in ("greet-a", "greet-b"):
        shutil.copytree(GREETING, tmp_path / "tasks" / name)
    config = CollectConfig.model_validate(
        {
            "tasks": str(tmp_path / "tasks"),
            "out": tmp_path / "run",
            "policy": str(tiny_model_dir),
            "workers": 2,
            "limits": {"max_turns": 1, "max_tokens": 8},
            "engine": {"max_model_len": 1024, "kv_cache_gb": 0.25},
        }
    )
    summary = await collect(config, settings.paths.models_dir)
    assert summary["episodes"] == 2 and summary["failures"] == {}
    names = {path.name.split("-")[2] for path in shard_paths(config.out / "data")}
    assert names == {"w00", "w01"}
