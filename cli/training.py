"""What `train-wm` and `sft` share: the trainer's flags (obsspec.train.config.TrainSettings)
and the run itself (torchrun ranks, the progress view, the final tables or JSON)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from obsspec.cli.common import drop_unset, emit_json, json_stdout, out, progress_printer
from obsspec.cli.hub_options import push
from obsspec.cli.train_view import TrainView

TRAINING = "Training"

BaseOption = Annotated[
    str | None,
    typer.Option("--base", help="Model to fine-tune \\[default: the default model]."),
]
EpochsOption = Annotated[
    int | None,
    typer.Option(
        "--epochs", min=1, help="Passes over the data \\[default: 2].", rich_help_panel=TRAINING
    ),
]
LrOption = Annotated[
    float | None,
    typer.Option(
        "--lr", min=0, help="Peak learning rate \\[default: 1e-4].", rich_help_panel=TRAINING
    ),
]
BatchTokensOption = Annotated[
    int | None,
    typer.Option(
        "--batch-tokens",
        min=16,
        help="Tokens per forward pass, padding included \\[default: 8192].",
        rich_help_panel=TRAINING,
    ),
]
MaxLenOption = Annotated[
    int | None,
    typer.Option(
        "--max-len", min=8, help="Longest training sequence \\[default: 4096].",
        rich_help_panel=TRAINING,
    ),
]  # fmt: skip
MaxStepsOption = Annotated[
    int | None,
    typer.Option(
        "--max-steps", min=1, help="Stop after N optimizer steps.", rich_help_panel=TRAINING
    ),
]
LoraOption = Annotated[
    int | None,
    typer.Option(
        "--lora",
        min=1,
        help="Train LoRA adapters of this rank (merged on save).",
        rich_help_panel=TRAINING,
    ),
]
ResumeOption = Annotated[
    bool,
    typer.Option(
        "--resume", help="Continue from --out's last checkpoint.", rich_help_panel=TRAINING
    ),
]
OverwriteOption = Annotated[
    bool, typer.Option("--overwrite", help="Replace what --out holds.", rich_help_panel=TRAINING)
]


def trainer_flags(
    epochs: int | None,
    lr: float | None,
    batch_tokens: int | None,
    max_len: int | None,
    max_steps: int | None,
    lora: int | None,
) -> dict[str, Any]:
    """The `train` table the flags set (unset flags leave the config file's values)."""
    return drop_unset(
        {
            "epochs": epochs,
            "lr": lr,
            "batch_tokens": batch_tokens,
            "max_len": max_len,
            "max_steps": max_steps,
            "lora": {"rank": lora} if lora else None,
        }
    )


def train_and_show(
    train: Callable[[TrainView, Callable[[str], None]], dict],
    out_dir: str,
    json_output: bool,
    training_table: Callable[[dict], Any],
    render_evaluation: Callable[[dict, bool], None],
    push_to_hub: str | None = None,
) -> None:
    """Run train(view, note), which returns the training record, on every torchrun rank (or
    in this one process); rank 0 pushes the model when asked (`--push-to-hub`, checked
    before the training), then prints the summary and the evaluation."""
    from obsspec.train import distributed

    ranks = distributed.init_from_env(os.environ)  # launched by torchrun: join its group
    note = progress_printer(quiet=not ranks.main)  # rank 0 speaks for all
    try:
        with TrainView(live=not json_output, quiet=not ranks.main) as view:
            record = train(view, note)
    finally:
        distributed.shutdown()
    if not ranks.main:
        return
    summary = {
        "out": out_dir,
        **record["training"],
        "data": record["data"],
        **({"evaluation": record["evaluation"]} if "evaluation" in record else {}),
    }
    if push_to_hub:
        json_stdout.partial = lambda: summary  # a failed push still reports the training
        summary["pushed"] = push(Path(out_dir), push_to_hub, repo_type="model")
    if json_output:
        emit_json(summary)
        return
    out.print(training_table(summary))
    if "evaluation" in record:
        render_evaluation(record["evaluation"], False)
