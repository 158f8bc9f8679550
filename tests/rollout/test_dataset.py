"""Shards: the explicit schema, atomic appearance, and what a resumed run reads back."""

from __future__ import annotations

import datasets
import pyarrow.parquet as pq
import pytest

from obsspec.rollout.dataset import (
    SCHEMA,
    ShardWriter,
    completed_episodes,
    remove_partial_shards,
    trajectory_row,
)
from obsspec.trajectory import SpeculationRecord, Trajectory, Turn


def trajectory(task_id: str = "t1", reward: float | None = 1.0, speculated: bool = False):
    turn = Turn(
        0,
        "```bash\nls\n```",
        "command",
        "ls",
        "a\n[exit code: 0]",
        [5, 6, 2],
        [-0.1, -0.2, -0.3],
        [7, 8],
        exit_code=0,
        exec_s=0.01,
        speculation=SpeculationRecord(attempted=True, source="rules", matched=True)
        if speculated
        else None,
    )
    return Trajectory(
        task_id,
        "h" * 64,
        "tiny",
        3,
        [1, 2],
        turns=[turn],
        context_ids=[1, 2, 5, 6, 2, 7, 8],
        mask=[0, 0, 1, 1, 1, 0, 0],
        logprobs=[None, None, -0.1, -0.2, -0.3, None, None],
        finish_reason="done",
        reward=reward,
    )


def row(task_id="t1", index=0, **kw):
    return trajectory_row(
        trajectory(task_id, **kw), run_id="r", episode_index=index, policy="p", attempts=1
    )


def test_rows_follow_the_schema_and_load_with_plain_datasets(tmp_path):
    writer = ShardWriter(tmp_path, "shard-a-w00", shard_episodes=2)
    writer.add(row("t1", 0))
    writer.add(row("t2", 0, reward=None, speculated=True))  # not verified, speculated turn
    assert len(writer.shards) == 1 and writer.pending == 0
    assert pq.read_schema(writer.shards[0]).equals(SCHEMA, check_metadata=False)
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "*.parquet"), split="train")
    first, second = ds[0], ds[1]
    assert first["task_id"] == "t1" and first["reward"] == 1.0 and first["success"]
    assert second["reward"] is None and not second["success"]
    assert first["mask"] == [0, 0, 1, 1, 1, 0, 0]
    assert first["logprobs"][:3] == [None, None, pytest.approx(-0.1)]
    assert first["turns"][0]["command"] == "ls" and first["turns"][0]["speculation"] is None
    assert second["turns"][0]["speculation"]["source"] == "rules"


def test_a_shard_appears_whole_or_not_at_all(tmp_path):
    writer = ShardWriter(tmp_path, "shard-a-w00", shard_episodes=10)
    writer.add(row())
    assert list(tmp_path.iterdir()) == []  # buffered, nothing on disk yet
    writer.close()
    assert [p.name for p in tmp_path.iterdir()] == ["shard-a-w00-00000.parquet"]


def test_a_writer_killed_mid_write_leaves_only_a_hidden_temp_file(tmp_path):
    (tmp_path / ".shard-x-w00-00000.parquet.tmp").write_bytes(b"PAR1 half a shard")
    writer = ShardWriter(tmp_path, "shard-b-w00", shard_episodes=1)
    writer.add(row("t1", 4))
    assert completed_episodes(tmp_path) == {("t1", 4): "h" * 64}  # the temp file is not read
    assert remove_partial_shards(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["shard-b-w00-00000.parquet"]


def test_time_due_flush_writes_a_partial_shard(tmp_path):
    writer = ShardWriter(tmp_path, "s", shard_episodes=100, shard_seconds=0.0)
    writer.flush_if_due()  # nothing buffered: nothing written
    writer.add(row())
    writer.flush_if_due()
    assert len(writer.shards) == 1


def test_every_reward_key_and_the_verifier_output_are_stored(tmp_path):
    rich = trajectory(reward=0.5)
    rich.rewards = {"correctness": 1.0, "performance": 0.5}
    rich.verifier_output = "[... 10 earlier characters cut ...]\n2 passed"
    writer = ShardWriter(tmp_path, "s", shard_episodes=2)
    writer.add(trajectory_row(rich, run_id="r", episode_index=0, policy="p", attempts=1))
    writer.add(row("t2", 0, reward=None))  # the verifier did not run: no keys, no output
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "*.parquet"), split="train")
    stored = {r["key"]: r["value"] for r in ds[0]["rewards"]}
    assert stored == {"correctness": 1.0, "performance": 0.5} and ds[0]["reward"] == 0.5
    assert ds[0]["verifier_output"].endswith("2 passed")
    assert ds[1]["rewards"] == [] and ds[1]["verifier_output"] == ""


def test_shards_written_before_the_reward_columns_still_read(tmp_path):
    import pyarrow as pa

    from obsspec.runs import read_rows

    old_schema = pa.schema([f for f in SCHEMA if f.name not in ("rewards", "verifier_output")])
    old = {k: v for k, v in row("old", 0).items() if k in old_schema.names}
    (tmp_path / "data").mkdir()
    old_shard = tmp_path / "data" / "shard-old-00000.parquet"
    pq.write_table(pa.Table.from_pylist([old], schema=old_schema), old_shard)
    ShardWriter(tmp_path / "data", "shard-new", shard_episodes=1).add(row("new", 0))
    assert completed_episodes(tmp_path / "data") == {("old", 0): "h" * 64, ("new", 0): "h" * 64}
    rows = {r["task_id"]: r for r in read_rows(tmp_path)}
    assert "rewards" not in rows["old"] and rows["new"]["rewards"] == []
    old_only = str(tmp_path / "data" / "shard-old-*.parquet")
    assert datasets.load_dataset("parquet", data_files=old_only, split="train")[0]["reward"] == 1.0


WM_FIELDS = ("wm_asked", "wm_guesses", "wm_matched", "wm_matched_any", "wm_near_miss")


def test_the_world_model_fields_round_trip_and_old_shards_read_as_zero(tmp_path):
    import pyarrow as pa

    from obsspec.rollout.dataset import SPECULATION, TURN
    from obsspec.runs import read_rows
    from obsspec.speculation.totals import SpeculationTotals

    scored = trajectory(speculated=True)
    scored.turns[0].speculation = SpeculationRecord(
        attempted=True, source="lm", predictions=2, matched=True, wm_asked=True, wm_guesses=2,
        wm_matched=False, wm_matched_any=True, wm_near_miss=True,
    )  # fmt: skip
    (tmp_path / "data").mkdir()
    writer = ShardWriter(tmp_path / "data", "shard-new", shard_episodes=1)
    writer.add(trajectory_row(scored, run_id="r", episode_index=0, policy="p", attempts=1))
    # a shard written before the fields existed: the speculation struct without them
    old_speculation = pa.struct([f for f in SPECULATION if f.name not in WM_FIELDS])
    old_turn = pa.struct(
        [pa.field("speculation", old_speculation) if f.name == "speculation" else f for f in TURN]
    )
    old_schema = pa.schema(
        [pa.field("turns", pa.list_(old_turn)) if f.name == "turns" else f for f in SCHEMA]
    )
    old = row("old", 0, speculated=True)
    for turn in old["turns"]:
        for key in WM_FIELDS:
            del turn["speculation"][key]
    pq.write_table(
        pa.Table.from_pylist([old], schema=old_schema), tmp_path / "data" / "shard-old.parquet"
    )
    rows = {r["task_id"]: r for r in read_rows(tmp_path)}
    stored = rows["t1"]["turns"][0]["speculation"]
    assert {k: stored[k] for k in WM_FIELDS} == {
        "wm_asked": True, "wm_guesses": 2, "wm_matched": False, "wm_matched_any": True,
        "wm_near_miss": True,
    }  # fmt: skip
    new, legacy = SpeculationTotals.of_row(rows["t1"]), SpeculationTotals.of_row(rows["old"])
    assert new.summary()["match_rate_wm"] == 0.0 and new.summary()["match_rate_wm_any"] == 1.0
    assert new.summary()["near_miss_rate"] == 1.0
    assert "wm_asked" not in rows["old"]["turns"][0]["speculation"]
    assert (legacy.wm_asked, legacy.wm_matched, legacy.summary()["match_rate_wm"]) == (0, 0, None)
    assert legacy.summary()["match_rate_attempted"] == 1.0  # the old figures are intact
