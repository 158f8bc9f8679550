"""Episodes on disk: one row per episode, in Parquet shards that appear atomically.

    RUN_DIR/data/shard-<session>-w<worker>-<seq>.parquet     complete shards only
    RUN_DIR/data/.shard-....parquet.tmp                       a shard being written

A shard is written to a hidden temporary file, flushed to disk, then renamed into place, so a
reader (or a resumed run) never sees half a shard; the glob `data/*.parquet` matches finished
shards only. Every shard has the same explicit schema (SCHEMA), so plain
`datasets.load_dataset("parquet", data_files="RUN_DIR/data/*.parquet")` loads a run with no
obsspec code. The schema is documented in docs/datasets.md. Columns are only ever
added (e.g. `rewards` and `verifier_output`); readers use row.get for the newer ones, so that
shards written before them still read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from obsspec.runs import shard_paths
from obsspec.trajectory import Trajectory

SPECULATION = pa.struct(
    [
        ("attempted", pa.bool_()),
        ("source", pa.string()),
        ("predictions", pa.int32()),
        ("matched", pa.bool_()),
        ("exec_won", pa.bool_()),
        ("failed", pa.bool_()),
        ("gated", pa.bool_()),
        ("rollback", pa.bool_()),
        ("level", pa.int32()),
        ("tokens_ahead", pa.int32()),
        ("tokens_committed", pa.int32()),
        ("tokens_wasted", pa.int32()),
        ("wm_tokens", pa.int32()),
        ("overlap_s", pa.float64()),
        ("lossless_violation", pa.bool_()),
        ("error", pa.string()),
        ("wm_asked", pa.bool_()),
        ("wm_guesses", pa.int32()),
        ("wm_matched", pa.bool_()),
        ("wm_matched_any", pa.bool_()),
        ("wm_near_miss", pa.bool_()),
        ("resubmitted", pa.bool_()),
        ("gate", pa.string()),
    ]
)
TURN = pa.struct(
    [
        ("index", pa.int32()),
        ("reply", pa.string()),
        ("action", pa.string()),
        ("command", pa.string()),
        ("observation", pa.string()),
        ("action_ids", pa.list_(pa.int32())),
        ("action_logprobs", pa.list_(pa.float32())),
        ("observation_ids", pa.list_(pa.int32())),
        ("exit_code", pa.int32()),
        ("timed_out", pa.bool_()),
        ("generation_finish", pa.string()),
        ("gen_s", pa.float64()),
        ("exec_s", pa.float64()),
        ("predict_s", pa.float64()),
        ("gen_start_s", pa.float64()),
        ("exec_start_s", pa.float64()),
        ("predict_start_s", pa.float64()),
        ("weight_version", pa.int32()),
        ("speculation", SPECULATION),
    ]
)
# The verifier's rewards as a list of {key, value} (a map type, which `datasets` cannot load):
# {r["key"]: r["value"] for r in row["rewards"]} is the dict the verifier wrote.
REWARDS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float64())]))
SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("task_id", pa.string()),
        ("task_hash", pa.string()),
        ("episode_index", pa.int32()),
        ("seed", pa.int64()),
        ("policy", pa.string()),
        ("model", pa.string()),
        ("weight_version", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("context_ids", pa.list_(pa.int32())),
        ("mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("turns", pa.list_(TURN)),
        ("num_turns", pa.int32()),
        ("reward", pa.float64()),
        ("success", pa.bool_()),
        ("rewards", REWARDS),
        ("verifier_output", pa.string()),
        ("finish_reason", pa.string()),
        ("declared_done", pa.bool_()),
        ("error", pa.string()),
        ("error_kind", pa.string()),
        ("error_type", pa.string()),
        ("attempts", pa.int32()),
        ("sandbox_start_s", pa.float64()),
        ("agent_s", pa.float64()),
        ("verifier_s", pa.float64()),
        ("finished_at", pa.timestamp("ms", tz="UTC")),
    ]
)


def trajectory_row(
    trajectory: Trajectory, *, run_id: str, episode_index: int, policy: str, attempts: int
) -> dict:
    """One dataset row of an episode (the columns of SCHEMA, in order)."""
    t = asdict(trajectory)
    versions = [turn["weight_version"] for turn in t["turns"]]
    row = {
        "run_id": run_id,
        "task_id": t["task_id"],
        "task_hash": t["task_hash"],
        "episode_index": episode_index,
        "seed": t["seed"],
        "policy": policy,
        "model": t["model"],
        "weight_version": max(versions, default=0),
        "prompt_ids": t["prompt_ids"],
        "context_ids": t["context_ids"],
        "mask": t["mask"],
        "logprobs": t["logprobs"],
        "turns": t["turns"],
        "num_turns": len(t["turns"]),
        "reward": t["reward"],
        "success": t["reward"] == 1.0,
        "rewards": [{"key": k, "value": v} for k, v in t["rewards"].items()],
        "verifier_output": t["verifier_output"],
        "finish_reason": t["finish_reason"],
        "declared_done": t["declared_done"],
        "error": t["error"],
        "error_kind": t["error_kind"],
        "error_type": t["error_type"],
        "attempts": attempts,
        "sandbox_start_s": t["sandbox_start_s"],
        "agent_s": t["agent_s"],
        "verifier_s": t["verifier_s"],
        "finished_at": datetime.now(UTC),
    }
    return {name: row[name] for name in SCHEMA.names}


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Run write(tmp) on a hidden sibling, flush it to disk, then rename it to path."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)


class ShardWriter:
    """Buffers rows and writes them as shards: when `shard_episodes` rows are buffered, when
    `flush_if_due` finds the oldest row older than `shard_seconds`, and on `flush`/`close`."""

    def __init__(
        self,
        data_dir: Path,
        prefix: str,
        *,
        shard_episodes: int = 16,
        shard_seconds: float = 60.0,
        on_shard: Callable[[Path, list[dict]], None] = lambda _path, _rows: None,
    ) -> None:
        self.data_dir = data_dir
        self.prefix = prefix
        self.shard_episodes = shard_episodes
        self.shard_seconds = shard_seconds
        self.on_shard = on_shard
        self.shards: list[Path] = []
        self._rows: list[dict] = []
        self._oldest = 0.0

    def add(self, row: dict) -> None:
        if not self._rows:
            self._oldest = time.monotonic()
        self._rows.append(row)
        if len(self._rows) >= self.shard_episodes:
            self.flush()

    def flush_if_due(self) -> None:
        if self._rows and time.monotonic() - self._oldest >= self.shard_seconds:
            self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        path = self.data_dir / f"{self.prefix}-{len(self.shards):05d}.parquet"
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        write_atomically(path, lambda tmp: pq.write_table(table, tmp))
        self.shards.append(path)
        self.on_shard(path, rows)

    @property
    def pending(self) -> int:
        return len(self._rows)

    def close(self) -> None:
        self.flush()


def remove_partial_shards(data_dir: Path) -> int:
    """Delete temporary files a killed writer left; returns how many."""
    partial = list(data_dir.glob(".*.tmp"))
    for path in partial:
        path.unlink(missing_ok=True)
    return len(partial)


def completed_episodes(data_dir: Path) -> dict[tuple[str, int], str]:
    """(task_id, episode_index) -> task_hash of every episode in a finished shard."""
    done: dict[tuple[str, int], str] = {}
    for path in shard_paths(data_dir):
        table = pq.read_table(path, columns=["task_id", "episode_index", "task_hash"])
        for task_id, index, task_hash in zip(*(c.to_pylist() for c in table.columns), strict=True):
            done[(task_id, index)] = task_hash
    return done
