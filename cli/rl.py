"""`obsspec rl`: GRPO on speculative rollouts, with the world model co-trained every step."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer

from obsspec.cli.collect import stop_on_sigterm
from obsspec.cli.common import (
    CacheDirOption,
    ConfigOption,
    ImageMapOption,
    JsonOption,
    NetworkOption,
    SetOption,
    VerifierKitOption,
    WandbProjectOption,
    config_sets,
    drop_unset,
    emit_json,
    err,
    global_config,
    out,
    task_access_flags,
)
from obsspec.cli.rl_view import RLView, plain_line, steps_table

RUN = "Run"
GRPO = "GRPO"
SCALE = "Scale"


def rl(
    tasks: Annotated[
        str | None, typer.Option("--tasks", help="Task directory, directory of tasks, or glob.")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Run directory: metrics.jsonl, TensorBoard, checkpoints."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Initial policy \\[default: the default model]."),
    ] = None,
    world_model: Annotated[
        str | None,
        typer.Option("--world-model", help="Initial world model \\[default: the policy's model]."),
    ] = None,
    steps: Annotated[
        int | None, typer.Option("--steps", min=1, help="Steps in all \\[default: 20].")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed \\[default: 0].")] = None,
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns", min=1, help="Turns per episode \\[default: 8].", rich_help_panel=RUN
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens", min=1, help="Tokens per reply \\[default: 128].", rich_help_panel=RUN
        ),
    ] = None,
    group_size: Annotated[
        int | None,
        typer.Option(
            "--group-size",
            min=2,
            help="Episodes per task per step \\[default: 4].",
            rich_help_panel=GRPO,
        ),
    ] = None,
    tasks_per_step: Annotated[
        int | None,
        typer.Option(
            "--tasks-per-step", min=1, help="Groups per step \\[default: 2].", rich_help_panel=GRPO
        ),
    ] = None,
    lr: Annotated[
        float | None,
        typer.Option("--lr", help="Policy learning rate \\[default: 1e-6].", rich_help_panel=GRPO),
    ] = None,
    no_speculate: Annotated[
        bool,
        typer.Option(
            "--no-speculate",
            help="Sequential rollouts (the baseline); the data are the same either way.",
            rich_help_panel=RUN,
        ),
    ] = False,
    no_cotrain: Annotated[
        bool,
        typer.Option("--no-cotrain", help="Keep the world model frozen.", rich_help_panel=RUN),
    ] = False,
    checkpoint_every: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-every",
            min=1,
            help="Checkpoint every N steps (and after the last) \\[default: 5].",
            rich_help_panel=RUN,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue OUT from its last checkpoint.", rich_help_panel=RUN
        ),
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option("--overwrite", help="Replace the run in OUT.", rich_help_panel=RUN),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", min=1, help="Rollout workers \\[default: 1].", rich_help_panel=SCALE
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Join this Ray cluster ('auto': the local one) instead of starting one.",
            rich_help_panel=SCALE,
        ),
    ] = None,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    verifier_kit: VerifierKitOption = None,
    wandb_project: WandbProjectOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Train a policy with GRPO on speculative rollouts, co-training the world model.

    Each step runs groups of episodes per task (speculatively: the policy starts its next turn
    on the world model's guess, kept only on an exact match), updates the policy on
    group-normalised advantages, fine-tunes the world model on the step's real observations,
    and reloads both into the engines. OUT/metrics.jsonl gets one row per step; checkpoints
    go to OUT/checkpoints. Everything else (clip, KL, replay, placement) lives in the \\[rl]
    table of --config; see examples/rl_cpu_smoke.toml.
    """
    from obsspec.rl.config import load_rl_config
    from obsspec.rl.driver import run_rl

    sets = config_sets(set_keys)
    settings = global_config(
        config, cache_dir, sets=sets, table="rl", image_map=image_map, runs_tasks=True
    )
    flags: dict[str, Any] = {
        "tasks": tasks,
        "out": out_dir,
        "policy": policy,
        "speculation": drop_unset({"world_model": world_model}),
        "steps": steps,
        "seed": seed,
        "speculate": False if no_speculate else None,
        "checkpoint_every": checkpoint_every,
        "resume": resume or None,
        "overwrite": overwrite or None,
        "limits": drop_unset({"max_turns": max_turns, "max_tokens": max_tokens}),
        "grpo": drop_unset({"group_size": group_size, "tasks_per_step": tasks_per_step, "lr": lr}),
        "cotrain": {"enabled": False} if no_cotrain else {},
        "placement": drop_unset({"rollout_workers": workers, "ray_address": ray_address}),
        "wandb": drop_unset({"project": wandb_project}),
        **task_access_flags(image_map, network, verifier_kit),
    }
    rl_config = load_rl_config(
        config,
        drop_unset(flags),
        default_policy=settings.default_model,
        images=settings.images,
        sets=sets,
    )
    view = RLView()
    live = not json_output and err.is_terminal
    plain = plain_line(err)

    def show(event) -> None:
        view.update(event)
        if not live:
            plain(event)

    with view.live(err) if live else contextlib.nullcontext():
        try:
            summary = asyncio.run(
                stop_on_sigterm(run_rl(rl_config, settings.paths.models_dir, show))
            )
        except (KeyboardInterrupt, asyncio.CancelledError) as stop:
            err.print(
                f"interrupted: steps up to the last checkpoint in {rl_config.out} are kept; "
                "rerun with --resume to continue"
            )
            raise typer.Exit(130 if isinstance(stop, KeyboardInterrupt) else 143) from None
    if json_output:
        emit_json(summary)
        return
    if not live and view.rows:
        out.print(steps_table(view.rows))
    out.print(
        f"{summary['steps_done']} steps done ({summary['steps_this_run']} in this run); "
        f"metrics: {rl_config.out / 'metrics.jsonl'}; last checkpoint: {summary['last_checkpoint']}"
    )
