"""Optional Weights & Biases logging for `rl`, `train-wm` and `sft`, beside TensorBoard and
metrics.jsonl:

    require_wandb(config.wandb)                  # before any work: wandb must be installed
    with wandb_logger(config.wandb, OUT, config.model_dump(mode="json"), resume=...,
                      prefix="rl") as board:     # None when no project is set
        board.add({"step": 3, "reward_mean": 0.5, ...})

A row's numeric figures are logged as PREFIX/KEY against `step`, the row's own step (W&B's
x-axis for them), so a resumed run continues its curves where its last checkpoint left
them. The run's id is kept in OUT/wandb-run.json: `--resume` logs to the same W&B run, any
other start makes a new one. wandb reads its own environment as it always does (WANDB_MODE=
offline logs under WANDB_DIR, for `wandb sync` later; WANDB_API_KEY, WANDB_BASE_URL): this
module sets none of it. The W&B run is finished however the block ends: an exception marks
it failed (exit code 1, 130 when interrupted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pydantic import Field

from obsspec.config import StrictModel
from obsspec.errors import ConfigError, ObsspecError

RUN_FILE = "wandb-run.json"  # in the run directory: the W&B run's id, for --resume
INSTALL = "pip install 'obsspec[wandb]'"


class WandbSettings(StrictModel):
    project: str | None = Field(
        default=None,
        description="Log every step's figures to this W&B project (none: no W&B logging); "
        "WANDB_MODE=offline keeps the run under WANDB_DIR for `wandb sync`.",
    )
    entity: str | None = Field(
        default=None, description="The W&B team or user [default: wandb's default entity]."
    )
    run_name: str | None = Field(
        default=None, description="The W&B run's display name [default: the run directory's]."
    )


def require_wandb(settings: WandbSettings) -> None:
    """With a project set, wandb must be importable: refused before any work, not skipped."""
    if settings.project is None:
        return
    try:
        import wandb  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"--wandb-project {settings.project}: wandb is not installed",
            hint=f"install it ({INSTALL}), or leave --wandb-project (wandb.project) unset",
        ) from e


def wandb_logger(
    settings: WandbSettings, run_dir: Path, config: dict[str, Any], *, resume: bool, prefix: str
) -> contextlib.AbstractContextManager[WandbLogger | None]:
    """A WandbLogger for the block when a project is set, else None."""
    if settings.project is None:
        return contextlib.nullcontext()
    return WandbLogger(settings, run_dir, config, resume=resume, prefix=prefix)


def config_logger(config, prefix: str) -> Callable[[], AbstractContextManager]:
    """open_logger for obsspec.train.loop.train_into, from a training config with `wandb`,
    `out` and `resume` (sft's, train-wm's): the run's directory and resolved config."""
    return lambda: wandb_logger(
        config.wandb,
        config.out,
        config.model_dump(mode="json"),
        resume=config.resume,
        prefix=prefix,
    )


class WandbLogger:
    """One W&B run; add(row) and close() like the TensorBoard writer (obsspec.rl.metrics)."""

    def __init__(
        self,
        settings: WandbSettings,
        run_dir: Path,
        config: dict[str, Any],
        *,
        resume: bool,
        prefix: str,
    ) -> None:
        require_wandb(settings)
        import wandb

        self.prefix = prefix
        run_id = run_dir_id(run_dir, resume=resume)
        try:
            self.run = wandb.init(
                project=settings.project,
                entity=settings.entity,
                name=settings.run_name or run_dir.resolve().name,
                job_type=prefix,
                id=run_id,
                resume="allow",  # the same id: W&B continues the run when it has it
                config={"run_dir": str(run_dir.resolve()), **config},
            )
        except Exception as e:
            raise ObsspecError(
                f"W&B run {run_id} of project {settings.project} did not start: {e}",
                hint="check the W&B login and network, or set WANDB_MODE=offline to log "
                "locally and `wandb sync` later",
            ) from e
        self.run.define_metric("step")
        self.run.define_metric(f"{prefix}/*", step_metric="step")

    def add(self, row: dict) -> None:
        """The row's numeric figures (bools as 0/1; None and nested ones skipped)."""
        figures = {
            f"{self.prefix}/{key}": value
            for key, value in row.items()
            if key != "step" and isinstance(value, int | float)
        }
        self.run.log({"step": row["step"], **figures})

    def close(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None

    def __enter__(self) -> WandbLogger:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        stopped = isinstance(error, KeyboardInterrupt | asyncio.CancelledError)
        self.close(0 if error is None else 130 if stopped else 1)


def run_dir_id(run_dir: Path, *, resume: bool) -> str:
    """The W&B run id of a resumed run (kept in RUN_FILE), else a new one, written there."""
    path = run_dir / RUN_FILE
    if resume and path.is_file():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return str(json.loads(path.read_text())["id"])
    run_id = uuid.uuid4().hex[:12]
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{RUN_FILE}.tmp")
    tmp.write_text(json.dumps({"id": run_id}) + "\n")
    os.replace(tmp, path)
    return run_id
