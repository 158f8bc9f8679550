"""An RL run directory: the manifest, per-step metrics, TensorBoard logs and checkpoints.

    OUT/rl-run.json                       identity, config, status, steps done
    OUT/metrics.jsonl                     one row per step (METRIC_KEYS on every row)
    OUT/data/step-00000005.parquet        that step's episodes (collect's dataset schema)
    OUT/tensorboard/                      the same figures for TensorBoard
    OUT/curves.png                        reward, match rate, losses, seconds per step
    OUT/sync/{policy,world_model}/        the weights the engines last reloaded
    OUT/checkpoints/step-00000005/        policy/{model,trainer.pt}, world_model/{...},
                                          driver.json (step, identity, data cursor, the
                                          world-model update a row has yet to report)
    OUT/.lock                             held (flock) by the process running the run

A checkpoint is written under a temporary name and renamed when whole, and a step's episodes
and then its metrics row are written only after the step finished, so a run killed at any
moment resumes from its last checkpoint; the rows and episodes of steps after it are dropped
then (they will be run again). `datasets.load_dataset("parquet",
data_files="OUT/data/*.parquet")` loads the episodes, and `obsspec train-wm --data OUT`
reads them like a collected run.

Nothing is written into OUT before the run is accepted (`check` reads; the driver takes the
lock only once Ray is up with the GPUs asked for), so a refused or failed start leaves OUT as
it was. A run that finished no step (its roles failed to start, say) pins nothing: the next
command replaces it, without --overwrite, and says so.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from obsspec.config import first_difference
from obsspec.errors import ConfigError
from obsspec.rollout.dataset import SCHEMA, remove_partial_shards, write_atomically
from obsspec.rollout.rundir import LOCK, locked, now
from obsspec.rundirs import Inputs, check_replaceable, is_empty, mark, task_set_change
from obsspec.runs import RL_MANIFEST, read_json_object
from obsspec.train.checkpoint import Checkpoints

MANIFEST = RL_MANIFEST
METRICS = "metrics.jsonl"
DRIVER_STATE = "driver.json"

# Every metrics row has these keys (null where a figure does not apply, e.g. no speculation).
METRIC_KEYS = (
    "step",
    "reward_mean",
    "reward_std",
    "success_rate",
    "spec_match_rate",
    "spec_match_rate_wm",
    "spec_near_miss_rate",
    "spec_match_rate_attempted",
    "spec_match_rate_used",
    "tokens_wasted",
    "wm_loss",
    "policy_loss",
    "clip_fraction",
    "logprob_mismatch",
    "rollout_seconds",
    "train_seconds",
    "sync_seconds",
    # where speculation's work went, and what the world model's co-training used
    "spec_exec_won",
    "spec_overlap_s",
    "spec_tokens_ahead",
    "spec_tokens_committed",
    "spec_tokens_wasted",
    "rollback",
    "wm_examples_used",
    "wm_dropped_too_long",
    "wm_skipped_turns",
    # when co-training ran: one step behind the rollout or not (obsspec.rl.cotrain_overlap)
    "cotrain_overlap",
    "wm_trained_on_step",
    "wm_wait_s",
)


def json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: they are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RLRunDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.checkpoints = root / "checkpoints"
        self.sync = root / "sync"
        self.data = root / "data"

    def check(self, *, resume: bool, overwrite: bool, inputs: Inputs | None = None) -> str | None:
        """Refuse, touching nothing, an OUT this run may not use (what it replaces must be an
        rl run apart from its `inputs`: obsspec.rundirs); a note when the run will replace
        one that finished no step."""
        root = self.root
        if root.exists() and not root.is_dir():
            raise ConfigError(f"--out {root} is a file, not a directory")
        if resume and not (root / MANIFEST).is_file():
            raise ConfigError(f"--resume: {root} holds no rl run to resume")
        if resume or not root.exists() or is_empty(root):
            return None
        if overwrite:
            check_replaceable(root, "rl", inputs)
            return None
        if self.finished_no_step():
            check_replaceable(root, "rl", inputs)
            return f"replacing the rl run in {root}: it finished no step"
        raise ConfigError(
            f"--out {root} is not empty; use --resume to continue its run, --overwrite "
            "to replace it, or another --out"
        )

    def finished_no_step(self) -> bool:
        return (
            (self.root / MANIFEST).is_file()
            and not self.read_manifest().get("steps_done")
            and Checkpoints(self.checkpoints, keep=1).latest() is None
            and not self.read_metrics()
        )

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive use of OUT by this process (it makes OUT)."""
        return locked(self.root, "rl")

    def prepare(self, *, resume: bool, overwrite: bool, inputs: Inputs | None = None) -> None:
        """With the lock held: check again, then clear OUT for a new run (overwrite, or one
        that finished no step) or tidy it for a resumed one."""
        replacing = self.check(resume=resume, overwrite=overwrite, inputs=inputs) is not None
        self.root.mkdir(parents=True, exist_ok=True)
        if overwrite or replacing:
            for entry in self.root.iterdir():
                if entry.name == LOCK:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        mark(self.root, "rl")
        Checkpoints(self.checkpoints, keep=1).remove_partial()
        if self.data.is_dir():
            remove_partial_shards(self.data)

    # the manifest
    def read_manifest(self) -> dict:
        return read_json_object(self.root / MANIFEST, flag="--out")

    def write_manifest(self, manifest: dict) -> None:
        write_json(self.root / MANIFEST, {**manifest, "updated_at": now()})

    # checkpoints
    def resume_point(
        self, identity: dict, task_set: dict[str, str] | None = None
    ) -> tuple[int, Path | None]:
        """(steps done, checkpoint) to continue from; (0, None) when none was saved yet.
        task_set (id -> content hash, whose digest is in identity) names what changed."""
        latest = Checkpoints(self.checkpoints, keep=1).latest()
        if latest is None:
            return 0, None
        state = read_json_object(latest / DRIVER_STATE, flag="--resume")
        recorded = state.get("identity") or {}
        if "task_set" not in recorded:  # saved before the task set was recorded
            identity = {k: v for k, v in identity.items() if k != "task_set"}
        if recorded != identity:
            if {**recorded, "task_set": None} == {**identity, "task_set": None}:
                why = task_set_change(self.read_manifest().get("tasks"), task_set or {})
            else:
                why = first_difference(recorded, identity)
            raise ConfigError(
                f"--resume: {latest} belongs to a run with other settings ({why}); resume "
                "with the same ones, or start a new --out"
            )
        return int(state["step"]), latest

    def checkpoint_tmp(self, step: int) -> Path:
        return Checkpoints(self.checkpoints, keep=1).begin(step)

    def commit_checkpoint(self, tmp: Path, step: int, state: dict, keep: int) -> Path:
        write_json(tmp / DRIVER_STATE, state)
        return Checkpoints(self.checkpoints, keep).commit(tmp, step)

    # metrics
    def append_metrics(self, row: dict) -> None:
        with (self.root / METRICS).open("a") as out:
            out.write(json.dumps({k: json_safe(v) for k, v in row.items()}) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def read_metrics(self) -> list[dict]:
        path = self.root / METRICS
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    # episodes
    def write_episodes(self, step: int, rows: list[dict]) -> None:
        self.data.mkdir(exist_ok=True)
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        write_atomically(self.episodes_path(step), lambda tmp: pq.write_table(table, tmp))

    def episodes_path(self, step: int) -> Path:
        return self.data / f"step-{step:08d}.parquet"

    def keep_steps_through(self, step: int) -> None:
        """Drop the metrics rows and episodes of steps after `step` (they are about to be
        run again)."""
        self.keep_metrics_through(step)
        for path in self.data.glob("step-*.parquet"):
            if int(path.stem.removeprefix("step-")) > step:
                path.unlink()

    def keep_metrics_through(self, step: int) -> None:
        """Drop rows of steps after `step`."""
        rows = [r for r in self.read_metrics() if r["step"] <= step]
        tmp = self.root / f".{METRICS}.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.replace(tmp, self.root / METRICS)


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)
