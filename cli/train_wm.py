"""`obsspec train-wm`: fine-tune the world model on collected runs, or evaluate one."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from cli.common import (
    CacheDirOption,
    ConfigOption,
    JsonOption,
    emit_json,
    err,
    global_config,
    out,
    progress_printer,
)

TRAINING = "Training"
SPLIT = "Held-out split"

DataOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--data",
        help="Collect run directory (repeat for several).",
        file_okay=False,
        metavar="RUN_DIR",
    ),
]


def train_wm(
    data: DataOption = None,
    base: Annotated[
        str | None,
        typer.Option("--base", help="Model to fine-tune \\[default: the default model]."),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Directory for the trained world model.")
    ] = None,
    eval_only: Annotated[
        bool, typer.Option("--eval-only", help="Only evaluate --model on --data's unseen tasks.")
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="World model to evaluate (with --eval-only).")
    ] = None,
    epochs: Annotated[
        int | None,
        typer.Option(
            "--epochs", min=1, help="Passes over the data \\[default: 2].", rich_help_panel=TRAINING
        ),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option(
            "--lr", min=0, help="Peak learning rate \\[default: 1e-4].", rich_help_panel=TRAINING
        ),
    ] = None,
    batch_tokens: Annotated[
        int | None,
        typer.Option(
            "--batch-tokens",
            min=16,
            help="Tokens per forward pass, padding included \\[default: 8192].",
            rich_help_panel=TRAINING,
        ),
    ] = None,
    max_len: Annotated[
        int | None,
        typer.Option(
            "--max-len",
            min=8,
            help="Longest training sequence \\[default: 4096].",
            rich_help_panel=TRAINING,
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps", min=1, help="Stop after N optimizer steps.", rich_help_panel=TRAINING
        ),
    ] = None,
    lora: Annotated[
        int | None,
        typer.Option(
            "--lora",
            min=1,
            help="Train LoRA adapters of this rank (merged on save).",
            rich_help_panel=TRAINING,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue from --out's last checkpoint.", rich_help_panel=TRAINING
        ),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace what --out holds.", rich_help_panel=TRAINING),
    ] = False,
    eval_data: Annotated[
        list[Path] | None,
        typer.Option(
            "--eval-data",
            help="Held-out run directory (else a split of --data).",
            file_okay=False,
            metavar="RUN_DIR",
            rich_help_panel=SPLIT,
        ),
    ] = None,
    held_out: Annotated[
        float | None,
        typer.Option(
            "--held-out",
            min=0,
            max=0.99,
            help="Fraction of tasks held out \\[default: 0.2].",
            rich_help_panel=SPLIT,
        ),
    ] = None,
    no_eval: Annotated[
        bool,
        typer.Option(
            "--no-eval", help="Skip the evaluation after training.", rich_help_panel=SPLIT
        ),
    ] = False,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
) -> None:
    """Fine-tune a causal LM to predict command output; measure its exact match.

    Each command turn of the runs is an example: the policy's exact context up to
    the action, then the real observation (loss on observation tokens only). Tasks
    are split into training and held-out by a stable hash, or by --eval-data;
    never one task on both sides. OUT becomes a Hugging Face model directory that
    vLLM serves as is, with OUT/obsspec-train.json recording the run.

    After training, held-out turns are predicted through vLLM: exact-match rate of
    the world model and of the cascade (cache, rules, world model), latency, and
    real-execution / prediction speed. With --eval-only, --model is scored on the
    tasks of --data it was not trained on. Rarely changed settings (warm-up,
    gradient accumulation, LoRA alpha, the evaluation engine) live in the
    \\[train_wm] table of --config.
    """
    from obsspec.config import load_pipeline_config
    from obsspec.train import distributed
    from world_model.config import EvalWMConfig, TrainWMConfig
    from world_model.training import evaluate_world_model, train_world_model

    settings = global_config(config, cache_dir)
    note = progress_printer(quiet=False)
    split = {
        "data": data or None,
        "eval_data": eval_data or None,
        "held_out": held_out,
    }
    if eval_only:
        flags = {**split, "model": model}
        eval_config = load_pipeline_config(
            EvalWMConfig,
            "train_wm",
            config,
            drop_unset(flags),
            required={"data": "--data", "model": "--model"},
        )
        with prediction_progress(json_output) as on_prediction:
            report = evaluate_world_model(
                eval_config, settings.paths.models_dir, on_prediction, note
            )
        render_evaluation(report, json_output)
        return
    trainer = {
        "epochs": epochs,
        "lr": lr,
        "batch_tokens": batch_tokens,
        "max_len": max_len,
        "max_steps": max_steps,
        "lora": {"rank": lora} if lora else None,
    }
    flags = {
        **split,
        "base": base,
        "out": out_dir,
        "resume": resume or None,
        "overwrite": overwrite or None,
        "evaluate": False if no_eval else None,
        "train": drop_unset(trainer),
    }
    train_config = load_pipeline_config(
        TrainWMConfig,
        "train_wm",
        config,
        drop_unset(flags),
        required={"data": "--data", "out": "--out"},
        defaults={"base": settings.default_model},
    )
    # Launched by torchrun: join its process group (one process: nothing to do).
    ranks = distributed.init_from_env(os.environ)
    if not ranks.main:
        note, json_output = (lambda _: None), True  # rank 0 speaks for all
    on_step = step_printer() if ranks.main else (lambda _: None)
    try:
        with prediction_progress(json_output) as on_prediction:
            record = train_world_model(
                train_config, settings.paths.models_dir, on_step, note, on_prediction
            )
    finally:
        distributed.shutdown()
    if not ranks.main:
        return
    summary = {
        "out": str(train_config.out),
        **record["training"],
        "data": record["data"],
        **({"evaluation": record["evaluation"]} if "evaluation" in record else {}),
    }
    if json_output:
        emit_json(summary)
        return
    out.print(training_table(summary))
    if "evaluation" in record:
        render_evaluation(record["evaluation"], False)


def drop_unset(flags: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in flags.items() if v not in (None, {})}


def step_printer():
    """A line per step on stderr (a line every ~10 s when not a terminal)."""
    last = [0.0]

    def show(p) -> None:
        now = time.monotonic()
        if err.is_terminal or now - last[0] >= 10 or p.step == p.total_steps:
            last[0] = now
            eta = p.elapsed_s / p.step * (p.total_steps - p.step) if p.step else 0
            err.print(
                f"step {p.step}/{p.total_steps}  epoch {p.epoch + 1}  loss {p.loss:.4f}  "
                f"lr {p.lr:.2e}  {p.tokens_per_s:.0f} tok/s  eta {eta:.0f}s",
                highlight=False,
            )

    return show


class prediction_progress:
    """A rich progress bar for predictions on a terminal; nothing otherwise."""

    def __init__(self, json_output: bool) -> None:
        self.progress = None
        if err.is_terminal and not json_output:
            self.progress = Progress(
                TextColumn("predicting"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=err,
                transient=True,
            )

    def __enter__(self):
        if self.progress is None:
            return lambda done, total: None
        self.progress.start()
        task = self.progress.add_task("predict", total=None)
        return lambda done, total: self.progress.update(task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()


def fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def training_table(summary: dict) -> Table:
    table = Table(title="world model training", show_header=False)
    rows = [
        ("out", summary["out"]),
        ("steps", summary["steps"]),
        ("device / dtype", f"{summary['device']} / {summary['dtype']}"),
        ("loss first -> last step", f"{fmt(summary['first_loss'])} -> {fmt(summary['last_loss'])}"),
        (
            "held-out loss before -> after",
            f"{fmt(summary['eval_loss_before'])} -> {fmt(summary['eval_loss_after'])}",
        ),
        ("tokens", summary["tokens"]),
        ("seconds", f"{summary['seconds']:.0f}"),
        ("examples (train + held out)", summary["data"]["examples"]),
        ("skipped turns", summary["data"]["skipped"] or "none"),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


def render_evaluation(report: dict, json_output: bool) -> None:
    if json_output:
        emit_json(report)
        return
    head = Table(title="held-out exact match", show_header=False)
    for key in (
        "turns",
        "held_out_tasks",
        "exact_match_rate",
        "cascade_match_rate",
        "pred_ms_p50",
        "pred_ms_p90",
        "exec_to_pred_ratio_p50",
        "slow_turns",
    ):
        head.add_row(key, fmt(report.get(key)))
    out.print(head)
    families = Table("family", "turns", "world model", "cascade", title="by command family")
    for name, group in report["by_family"].items():
        families.add_row(
            name,
            str(group["turns"]),
            fmt(group["exact_match_rate"]),
            fmt(group["cascade_match_rate"]),
        )
    out.print(families)
    sources = Table(
        "source", "answered", "matched", "match rate", title="cascade answers by source"
    )
    for name, group in report["by_source"].items():
        sources.add_row(
            name, str(group["answered"]), str(group["matched"]), fmt(group["match_rate"])
        )
    out.print(sources)
