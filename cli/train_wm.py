"""`obsspec train-wm`: fine-tune the world model on collected runs, or evaluate one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from obsspec.cli.common import (
    CacheDirOption,
    ConfigOption,
    JsonOption,
    SetOption,
    WandbProjectOption,
    config_sets,
    drop_unset,
    global_config,
    progress_printer,
)
from obsspec.cli.gate_options import (
    FailOverOption,
    FailUnderOption,
    exit_on_failed_gate,
    gated,
    parse_gate_flags,
)
from obsspec.cli.hub_options import PushToHubOption, check_push
from obsspec.cli.train_view import TrainView
from obsspec.cli.train_wm_view import render_evaluation, training_table
from obsspec.cli.training import (
    BaseOption,
    BatchTokensOption,
    EpochsOption,
    LoraOption,
    LrOption,
    MaxLenOption,
    MaxStepsOption,
    OverwriteOption,
    ResumeOption,
    train_and_show,
    trainer_flags,
)

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
    base: BaseOption = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Directory for the trained world model.")
    ] = None,
    eval_only: Annotated[
        bool, typer.Option("--eval-only", help="Only evaluate --model on --data's unseen tasks.")
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="World model to evaluate (with --eval-only).")
    ] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers",
            min=2,
            metavar="K",
            help="Start from K of --base's decoder layers: the first, the last and evenly "
            "spaced ones between (a world model a fraction of the policy's cost) "
            "\\[default: all].",
        ),
    ] = None,
    teacher: Annotated[
        str | None,
        typer.Option(
            "--teacher",
            metavar="DIR",
            help="Distil from this trained world model (name or directory; the same tokenizer "
            "as --base): the loss adds the KL divergence from its next-token distribution "
            "(\\[train_wm.distill] alpha 0.5, temperature 1).",
        ),
    ] = None,
    epochs: EpochsOption = None,
    lr: LrOption = None,
    batch_tokens: BatchTokensOption = None,
    max_len: MaxLenOption = None,
    max_steps: MaxStepsOption = None,
    lora: LoraOption = None,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
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
    fail_under: FailUnderOption = None,
    fail_over: FailOverOption = None,
    wandb_project: WandbProjectOption = None,
    push_to_hub: PushToHubOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Fine-tune a causal LM to predict command output; measure its exact match.

    Each command turn of the runs is an example: the policy's exact context up to
    the action, then the real observation (loss on observation tokens only). Tasks
    are split into training and held-out by a stable hash, or by --eval-data;
    never one task on both sides. OUT becomes a Hugging Face model directory that
    vLLM serves as is, with OUT/obsspec-train.json recording the run.

    After training, held-out turns are predicted through vLLM: exact-match rate of
    the world model and of the cascade (cache, rules, repeats, world model), latency, and
    real-execution / prediction speed. With --eval-only, --model is scored on the
    tasks of --data it was not trained on. Rarely changed settings (warm-up,
    gradient accumulation, LoRA alpha, the evaluation engine) live in the
    \\[train_wm] table of --config. In CI, --eval-only with --fail-under
    match_rate_wm=0.4 exits 3 when the figure is below its bound.
    """
    from obsspec.config import load_pipeline_config
    from obsspec.errors import ConfigError
    from obsspec.world_model.config import EvalWMConfig, TrainWMConfig
    from obsspec.world_model.evaluate import report_keys
    from obsspec.world_model.training import evaluate_world_model, train_world_model

    gates = parse_gate_flags(fail_under, fail_over, report_keys())
    if push_to_hub and eval_only:
        raise ConfigError("--push-to-hub pushes the trained model: it does not go with --eval-only")
    check_push(push_to_hub)  # before any work
    if wandb_project and eval_only:
        raise ConfigError("--wandb-project logs training steps: it does not go with --eval-only")
    if layers is not None and eval_only:
        raise ConfigError("--layers chooses the layers training starts from: not with --eval-only")
    if teacher is not None and eval_only:
        raise ConfigError("--teacher is a model to learn from while training: not with --eval-only")
    if gates and not eval_only:
        raise ConfigError(
            "--fail-under/--fail-over gate an evaluation: use them with --eval-only "
            "(train, then `obsspec train-wm --eval-only --model OUT ...` with the gates)"
        )

    sets = config_sets(set_keys)
    settings = global_config(config, cache_dir, sets=sets, table="train_wm")
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
            sets=sets,
        )
        with TrainView(live=not json_output) as view:
            report = evaluate_world_model(
                eval_config, settings.paths.models_dir, view.on_prediction, progress_printer()
            )
        report = gated(report, gates)
        render_evaluation(report, json_output)
        exit_on_failed_gate(report)
        return
    trainer = trainer_flags(epochs, lr, batch_tokens, max_len, max_steps, lora)
    flags = {
        **split,
        "base": base,
        "layers": layers,
        "teacher": teacher,
        "out": out_dir,
        "resume": resume or None,
        "overwrite": overwrite or None,
        "evaluate": False if no_eval else None,
        "train": trainer,
        "wandb": drop_unset({"project": wandb_project}),
    }
    train_config = load_pipeline_config(
        TrainWMConfig,
        "train_wm",
        config,
        drop_unset(flags),
        required={"data": "--data", "out": "--out"},
        defaults={"base": settings.default_model},
        sets=sets,
    )

    def run(view, note):
        return train_world_model(
            train_config, settings.paths.models_dir, view.on_step, note, view.on_prediction
        )

    train_and_show(
        run, str(train_config.out), json_output, training_table, render_evaluation, push_to_hub
    )
