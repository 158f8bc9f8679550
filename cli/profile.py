"""`obsspec profile`: sequential vs speculative vs oracle on the same episodes."""

from __future__ import annotations

import asyncio
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
    config_sets,
    drop_unset,
    emit_json,
    err,
    global_config,
    out,
    task_access_flags,
)
from obsspec.cli.gate_options import (
    FailOverOption,
    FailUnderOption,
    exit_on_failed_gate,
    gated,
    parse_gate_flags,
)
from obsspec.cli.limit_options import MaxTokensOption, MaxTurnsOption, TemperatureOption
from obsspec.cli.markdown import gate_table, markdown
from obsspec.cli.profile_compare import SummaryOption, check_summary, compare
from obsspec.cli.profile_simulate import simulate
from obsspec.cli.profile_view import concurrency_table, figures_table, printer
from obsspec.cli.speculation_options import (
    BreadthOption,
    DepthOption,
    GateOption,
    WorldModelOption,
    speculation_flags,
)

app = typer.Typer(no_args_is_help=False)
app.command("simulate")(simulate)
app.command("compare")(compare)


@app.callback(invoke_without_command=True)
def profile(
    ctx: typer.Context,
    tasks: Annotated[
        str | None,
        typer.Option("--tasks", help="Task directory, directory of tasks, or glob."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Model name or HF directory \\[default: the default model]."),
    ] = None,
    world_model: WorldModelOption = None,
    episodes_per_task: Annotated[
        int | None,
        typer.Option("--episodes-per-task", "-k", min=1, help="Episodes per task and arm."),
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Base seed \\[default: 0].")] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            "-c",
            help="Episodes at once in each arm, sharing the policy engine; several levels "
            "(e.g. 1,8) are each measured on the same episodes \\[default: 1].",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Write each arm's dataset and report.json here."),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an earlier profile in --out.")
    ] = False,
    max_turns: MaxTurnsOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    depth: DepthOption = None,
    breadth: BreadthOption = None,
    gate: GateOption = None,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    verifier_kit: VerifierKitOption = None,
    fail_under: FailUnderOption = None,
    fail_over: FailOverOption = None,
    summary: SummaryOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Run the same episodes sequentially, speculatively and with an oracle, and compare.

    The oracle is a perfect instant predictor: the ceiling. Arms are interleaved per wave of
    --concurrency episodes played at once (one at a time by default), the sequential and
    speculative arms swapping places from one wave to the next (the oracle runs last).

    Latency is the agent's turns per episode (sandbox start and verifier apart).

    Rates are pooled; latency reductions also come as medians with bootstrap 95% intervals.

    Limits, engine, gate parameters and oracle_delay_s: the \\[profile] table of --config.

    `obsspec profile simulate --calibrate OUT` then says where speculation would pay.

    In CI: --fail-under latency_reduction=0.05 --fail-over tokens_wasted_fraction=0.5 exits 3
    when a figure misses its bound (one line per gate on stderr; "gates" in --json);
    --summary markdown prints the tables for a CI job's summary page; `obsspec profile
    compare OLD NEW` fails on a significant regression between two profiles.
    """
    if ctx.invoked_subcommand is not None:
        return
    from obsspec.profile.config import load_profile_config
    from obsspec.profile.levels import parse_levels
    from obsspec.profile.run import profile as run_profile
    from obsspec.profile.run import report_keys

    levels = None if concurrency is None else parse_levels(concurrency)  # before any setup
    gates = parse_gate_flags(fail_under, fail_over, report_keys())
    check_summary(summary, json_output)
    sets = config_sets(set_keys)
    settings = global_config(
        config, cache_dir, sets=sets, table="profile", image_map=image_map, runs_tasks=True
    )
    speculation = drop_unset(
        {"world_model": world_model, **speculation_flags(depth, breadth, gate)}
    )
    flags: dict[str, Any] = drop_unset(
        {
            "tasks": tasks,
            "policy": policy,
            "episodes_per_task": episodes_per_task,
            "seed": seed,
            "concurrency": levels,
            "out": out_dir,
            "overwrite": overwrite or None,
            "speculation": speculation,
            **task_access_flags(image_map, network, verifier_kit),
            "limits": drop_unset(
                {"max_turns": max_turns, "max_tokens": max_tokens, "temperature": temperature}
            ),
        }
    )
    profile_config = load_profile_config(
        config, flags, default_policy=settings.default_model, images=settings.images, sets=sets
    )
    try:
        report = asyncio.run(
            stop_on_sigterm(run_profile(profile_config, settings.paths.models_dir, printer(err)))
        )
    except (KeyboardInterrupt, asyncio.CancelledError) as stop:
        err.print("interrupted: nothing was written to report.json")
        raise typer.Exit(130 if isinstance(stop, KeyboardInterrupt) else 143) from None
    report = gated(report, gates)
    levels = concurrency_table(report) if len(report["by_concurrency"]) > 1 else None
    if json_output:
        emit_json(report)
    elif summary:
        text = markdown(figures_table(report), levels, gate_table(report))
        out.print(text, markup=False, highlight=False)
    else:
        out.print(figures_table(report))
        if levels is not None:
            out.print(levels)
        if profile_config.out is not None:
            out.print(f"report: {profile_config.out / 'report.html'} (figures: report.json)")
    exit_on_failed_gate(report)
