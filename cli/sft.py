"""`obsspec sft`: warm-start a policy on expert trajectories, or evaluate one."""

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
from obsspec.cli.hub_options import PushToHubOption, check_push
from obsspec.cli.sft_view import render_evaluation, training_table
from obsspec.cli.train_view import TrainView
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

EVALUATION = "Evaluation"


def sft(
    data: Annotated[
        list[Path] | None,
        typer.Option(
            "--data",
            help="Collect run directory to learn from (repeat for several).",
            file_okay=False,
            metavar="RUN_DIR",
        ),
    ] = None,
    base: BaseOption = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Directory for the warm-started policy.")
    ] = None,
    min_reward: Annotated[
        float | None,
        typer.Option(
            "--min-reward",
            help="Learn only from episodes with at least this reward (rejection sampling, "
            "e.g. 1 with policy runs) \\[default: every episode].",
        ),
    ] = None,
    eval_only: Annotated[
        bool, typer.Option("--eval-only", help="Only evaluate --model on --eval-tasks.")
    ] = False,
    model: Annotated[
        str | None, typer.Option("--model", help="Policy to evaluate (with --eval-only).")
    ] = None,
    epochs: EpochsOption = None,
    lr: LrOption = None,
    batch_tokens: BatchTokensOption = None,
    max_len: MaxLenOption = None,
    max_steps: MaxStepsOption = None,
    lora: LoraOption = None,
    resume: ResumeOption = False,
    overwrite: OverwriteOption = False,
    eval_tasks: Annotated[
        str | None,
        typer.Option(
            "--eval-tasks",
            help="Held-out tasks: a task directory, a directory of tasks, or a glob.",
            metavar="TASKS",
            rich_help_panel=EVALUATION,
        ),
    ] = None,
    eval_episodes: Annotated[
        int | None,
        typer.Option(
            "--eval-episodes",
            min=1,
            help="Episodes of each held-out task \\[default: 1].",
            rich_help_panel=EVALUATION,
        ),
    ] = None,
    eval_temperature: Annotated[
        float | None,
        typer.Option(
            "--eval-temperature",
            min=0,
            help="Sampling temperature of the evaluation \\[default: 0, greedy].",
            rich_help_panel=EVALUATION,
        ),
    ] = None,
    no_base: Annotated[
        bool,
        typer.Option(
            "--no-base",
            help="Do not evaluate the base model for comparison.",
            rich_help_panel=EVALUATION,
        ),
    ] = False,
    no_eval: Annotated[
        bool,
        typer.Option(
            "--no-eval", help="Skip the evaluation after training.", rich_help_panel=EVALUATION
        ),
    ] = False,
    wandb_project: WandbProjectOption = None,
    push_to_hub: PushToHubOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Fine-tune a policy on the replies of collected episodes (loss on its own tokens).

    Every action turn of the runs is learned on exactly the context the policy saw
    (the same exact tokens as rollouts), with the loss on the reply's tokens only.
    Typical data: `obsspec collect --policy oracle` runs (expert demonstrations),
    plus successful episodes of a policy with --min-reward 1 (rejection sampling).
    OUT becomes a Hugging Face model directory that `obsspec collect --policy OUT`
    and vLLM use as is; OUT/obsspec-train.json records the run.

    After training, the policy and its base run --eval-tasks through the real collect
    path (into OUT/eval/); their valid-action rate, success rate and mean turns are
    compared. Held-out tasks must not share content with the training data. With
    --eval-only, --model is evaluated (rerunning with the same settings resumes).
    Rarely changed settings (warm-up, the evaluation engine, its turn and token
    limits) live in the \\[sft] table of --config.
    """
    from obsspec.config import load_pipeline_config
    from obsspec.errors import ConfigError
    from obsspec.sft.config import EvalPolicyConfig, SFTConfig
    from obsspec.sft.evaluate import evaluate_policy
    from obsspec.sft.training import train_policy

    if push_to_hub and eval_only:
        raise ConfigError("--push-to-hub pushes the trained model: it does not go with --eval-only")
    check_push(push_to_hub)  # before any work
    if wandb_project and eval_only:
        raise ConfigError("--wandb-project logs training steps: it does not go with --eval-only")
    sets = config_sets(set_keys)
    settings = global_config(config, cache_dir, sets=sets, table="sft")
    evaluation = drop_unset(
        {
            "tasks": eval_tasks,
            "episodes_per_task": eval_episodes,
            "temperature": eval_temperature,
            "compare_base": False if no_base else None,
        }
    )
    if eval_only:
        flags = {"model": model, "base": base, "eval": evaluation}
        eval_config = load_pipeline_config(
            EvalPolicyConfig,
            "sft",
            config,
            drop_unset(flags),
            required={"model": "--model"},
            sets=sets,
        )
        with TrainView(live=not json_output) as view:
            emit = emitter(view.on_episodes, progress_printer())
            report = evaluate_policy(eval_config, settings.paths.models_dir, emit)
        render_evaluation(report, json_output)
        return
    trainer = trainer_flags(epochs, lr, batch_tokens, max_len, max_steps, lora)
    flags = {
        "data": data or None,
        "base": base,
        "out": out_dir,
        "min_reward": min_reward,
        "resume": resume or None,
        "overwrite": overwrite or None,
        "evaluate": False if no_eval else None,
        "train": trainer,
        "wandb": drop_unset({"project": wandb_project}),
        "eval": evaluation,
    }
    sft_config = load_pipeline_config(
        SFTConfig,
        "sft",
        config,
        drop_unset(flags),
        required={"data": "--data", "out": "--out"},
        defaults={"base": settings.default_model},
        sets=sets,
    )

    def run(view, note):
        return train_policy(
            sft_config, settings.paths.models_dir, view.on_step, note, view.on_episodes
        )

    train_and_show(
        run, str(sft_config.out), json_output, training_table, render_evaluation, push_to_hub
    )


def emitter(on_episodes, note):
    """The evaluation's emit(kind, *payload), in this process (--eval-only)."""
    handlers = {"progress": on_episodes, "note": note}
    return lambda kind, *payload: handlers[kind](*payload)
