"""`obsspec train-wm`: fine-tune the world model on collected runs, or evaluate one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cli.common import (
    CacheDirOption,
    ConfigOption,
    JsonOption,
    drop_unset,
    emit_json,
    global_config,
    out,
    progress_printer,
)
from cli.train_view import TrainView
from cli.train_wm_view import render_evaluation, training_table

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
        with TrainView(live=not json_output) as view:
            report = evaluate_world_model(
                eval_config, settings.paths.models_dir, view.on_prediction, note
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
        note = progress_printer(quiet=True)  # rank 0 speaks for all
    try:
        with TrainView(live=not json_output, quiet=not ranks.main) as view:
            record = train_world_model(
                train_config, settings.paths.models_dir, view.on_step, note, view.on_prediction
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
