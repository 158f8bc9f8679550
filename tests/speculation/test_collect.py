"""`obsspec collect --speculate` end to end: real sandboxes, the predictor cascade, and the
same data as a sequential collection."""

from __future__ import annotations

import shutil

import pytest

from obsspec.errors import ConfigError
from obsspec.inference.scripted import PacedEngine
from obsspec.rollout.collect import collect
from obsspec.rollout.config import CollectConfig
from obsspec.runs import read_rows
from tests.cli.test_cli import obsspec
from tests.rollout.test_collect import greeting_tasks
from tests.speculation.fakes import fake_policy

pytestmark = pytest.mark.docker

SPECULATE = {"enabled": True, "gate": {"mode": "always"}}


def by_episode(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["task_id"], r["episode_index"]))


def data_of(row: dict) -> dict:
    turns = [
        {k: t[k] for k in ("command", "observation", "action_ids", "observation_ids")}
        for t in row["turns"]
    ]
    return {k: row[k] for k in ("context_ids", "mask", "reward", "finish_reason")} | {
        "turns": turns
    }


async def test_speculative_oracle_collection_equals_the_sequential_one(
    tmp_path, settings, base_image
):
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a", "greet-b"])
    common = {"tasks": str(tasks), "policy": "oracle", "episodes_per_task": 2, "concurrency": 2}
    sequential = CollectConfig.model_validate({**common, "out": tmp_path / "seq"})
    speculative = CollectConfig.model_validate(
        {**common, "out": tmp_path / "spec", "speculation": SPECULATE}
    )
    await collect(sequential, settings.paths.models_dir)
    summary = await collect(speculative, settings.paths.models_dir)

    seq_rows, spec_rows = (
        by_episode(read_rows(sequential.out)),
        by_episode(read_rows(speculative.out)),
    )
    assert [data_of(r) for r in spec_rows] == [data_of(r) for r in seq_rows]
    assert all(t["speculation"] is None for r in seq_rows for t in r["turns"])
    records = [t["speculation"] for r in spec_rows for t in r["turns"] if t["action"] == "command"]
    assert records and all(r is not None and r["attempted"] for r in records)
    spec = summary["speculation"]
    assert spec["attempted"] == len(records) and spec["matched"] > 0  # the rules know `cd`
    assert spec["lossless_violations"] == 0


async def test_world_model_predictions_on_real_engines(
    tmp_path, settings, base_image, tiny_engine, tiny_model_dir
):
    """The whole cascade with the world model (the tiny model on its own requests), a policy
    paced by real generations: exact contexts, records, nothing left in the engine."""
    tasks = greeting_tasks(tmp_path / "tasks", ["greet-a"])
    config = CollectConfig.model_validate(
        {
            "tasks": str(tasks),
            "out": tmp_path / "run",
            "policy": str(tiny_model_dir),
            "episodes_per_task": 2,
            "concurrency": 2,
            "limits": {"max_turns": 4, "max_tokens": 64},
            "speculation": {**SPECULATE, "world_model": str(tiny_model_dir), "breadth": 2},
        }
    )
    engine = PacedEngine(
        tiny_engine, fake_policy(tiny_engine_tokenizer(tiny_model_dir)), min_tokens=8
    )
    wm_engine = CountingEngine(tiny_engine)
    summary = await collect(config, settings.paths.models_dir, engine=engine, wm_engine=wm_engine)
    assert summary["episodes"] == 2 and summary["failures"] == {}
    for row in read_rows(config.out):
        rebuilt = list(row["prompt_ids"])
        for turn in row["turns"]:
            rebuilt += turn["action_ids"] + turn["observation_ids"]
        assert row["context_ids"] == rebuilt
    assert summary["speculation"]["attempted"] > 0
    # The world model was asked (greedy and one sample: breadth 2) where the cache and the
    # rules had nothing; the tiny random model never ends an observation, so never answers.
    assert wm_engine.calls >= 2 and wm_engine.calls % 2 == 0
    assert tiny_engine.unfinished_requests() == 0


class CountingEngine:
    def __init__(self, engine) -> None:
        self.engine, self.calls = engine, 0

    async def generate(self, prompt_ids, sampling, **kwargs):
        self.calls += 1
        return await self.engine.generate(prompt_ids, sampling, **kwargs)

    def stats(self):
        return self.engine.stats()


def tiny_engine_tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


async def test_a_world_model_with_another_tokenizer_is_refused_first(
    tmp_path, settings, tiny_model_dir
):
    other = tmp_path / "other-wm"
    shutil.copytree(tiny_model_dir, other)
    tokenizer = tiny_engine_tokenizer(other)
    tokenizer.add_tokens(["<obsspec-extra>"])
    tokenizer.save_pretrained(other)
    config = CollectConfig.model_validate(
        {
            "tasks": str(greeting_tasks(tmp_path / "tasks", ["greet-a"])),
            "out": tmp_path / "run",
            "policy": str(tiny_model_dir),
            "speculation": {"enabled": True, "world_model": str(other)},
        }
    )
    with pytest.raises(ConfigError, match="different tokenizers"):
        await collect(config, settings.paths.models_dir)
    assert not config.out.exists()  # refused before anything was made


def test_world_model_without_speculate_names_the_flags(tmp_path):
    result = obsspec(
        "collect", "--tasks", str(tmp_path), "--out", str(tmp_path / "o"), "--world-model", "x"
    )
    assert result.returncode != 0
    assert "--world-model" in result.stderr and "speculation" in result.stderr


def test_an_unknown_world_model_names_the_flag(tmp_path, default_model_dir):
    result = obsspec(
        "collect", "--tasks", str(tmp_path), "--out", str(tmp_path / "o"), "--speculate",
        "--world-model", "no-such-wm",
    )  # fmt: skip
    assert result.returncode != 0
    assert "--world-model (speculation.world_model): 'no-such-wm'" in result.stderr
    assert not (tmp_path / "o").exists()
