"""`obsspec collect`: run many episodes into a Hugging Face dataset (resumable; Ray optional)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from obsspec.agent.protocol import ActionFormat
from obsspec.cli.collect_view import CollectView, plain_line, summary_table
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
    json_stdout,
    out,
    task_access_flags,
)
from obsspec.cli.hub_options import PushToHubOption, check_push, push
from obsspec.cli.limit_options import MaxTokensOption, MaxTurnsOption, TemperatureOption
from obsspec.cli.speculation_options import (
    SPECULATION,
    BreadthOption,
    DepthOption,
    GateOption,
    WorldModelOption,
    speculation_flags,
)
from obsspec.errors import Incomplete, ObsspecError

T = TypeVar("T")
RUN = "Run"
ENGINE = "Engine"
SCALE = "Scale-out (Ray)"


def collect(
    tasks: Annotated[
        str | None,
        typer.Option("--tasks", help="Task directory, directory of tasks, or glob."),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="Run directory; rerun the same command to resume it."),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Model name or HF directory, or 'oracle' to replay reference solutions "
            "\\[default: the default model].",
        ),
    ] = None,
    episodes_per_task: Annotated[
        int | None,
        typer.Option("--episodes-per-task", "-k", min=1, help="Episodes per task \\[default: 1]."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", "-c", min=1, help="Episodes at once per worker \\[default: 1]."
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Base seed of the run \\[default: 0].")
    ] = None,
    max_turns: MaxTurnsOption = None,
    max_tokens: MaxTokensOption = None,
    temperature: TemperatureOption = None,
    action_format: Annotated[
        ActionFormat | None,
        typer.Option("--format", help="Action format \\[default: markdown].", rich_help_panel=RUN),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="A broken task stops the run.", rich_help_panel=RUN)
    ] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Delete a different run found in --out and start again.",
            rich_help_panel=RUN,
        ),
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="OpenAI-compatible server URL instead of vLLM in process.",
            rich_help_panel=ENGINE,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            help="Run N Ray workers, each with its own engine and sandboxes.",
            rich_help_panel=SCALE,
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Join this Ray cluster ('auto': the local one).",
            rich_help_panel=SCALE,
        ),
    ] = None,
    speculate: Annotated[
        bool,
        typer.Option(
            "--speculate",
            help="Start each next turn on a predicted observation while the command runs; "
            "kept only on an exact match, so the data are what a sequential run gives.",
            rich_help_panel=SPECULATION,
        ),
    ] = False,
    world_model: WorldModelOption = None,
    depth: DepthOption = None,
    breadth: BreadthOption = None,
    gate: GateOption = None,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    verifier_kit: VerifierKitOption = None,
    push_to_hub: PushToHubOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Run episodes of a policy on tasks and store them as a Hugging Face dataset.

    Shards go to OUT/data/*.parquet (load them with
    datasets.load_dataset("parquet", data_files="OUT/data/*.parquet")); OUT/manifest.json
    records the run. Rerunning the same command continues where a stopped run left off.
    Other settings (shard size, retries, engine memory) live in the \\[collect] table of --config.

    Exits 0 when every episode asked for is in the dataset, 3 when some are missing
    (broken tasks, failed episodes: see OUT/failures.jsonl), 1 when none is.
    """
    from obsspec.rollout.collect import collect as run_collection
    from obsspec.rollout.config import load_collect_config

    check_push(push_to_hub)  # before any work
    sets = config_sets(set_keys)
    settings = global_config(
        config, cache_dir, sets=sets, table="collect", image_map=image_map, runs_tasks=True
    )
    limits = {
        "max_turns": max_turns,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "action_format": action_format,
    }
    flags: dict[str, Any] = {
        "tasks": tasks,
        "out": out_dir,
        "policy": policy,
        "episodes_per_task": episodes_per_task,
        "concurrency": concurrency,
        "seed": seed,
        "strict": strict or None,
        "overwrite": overwrite or None,
        "workers": workers,
        "ray_address": ray_address,
        "limits": drop_unset(limits),
        **task_access_flags(image_map, network, verifier_kit),
        "engine": {"server": server} if server else {},
        "speculation": drop_unset(
            {
                "enabled": speculate or None,
                "world_model": world_model,
                **speculation_flags(depth, breadth, gate),
            }
        ),
    }
    flags = drop_unset(flags)
    collect_config = load_collect_config(
        config, flags, default_policy=settings.default_model, images=settings.images, sets=sets
    )

    view = CollectView()
    live = not json_output and err.is_terminal
    show = view.live_update if live else plain_line(err)

    def on_event(event, stats) -> None:
        view.stats = stats  # what Ctrl-C reports
        show(event, stats)

    def so_far() -> dict:
        """Under --json, an interrupted or failed run still reports what it did."""
        if view.stats is None:
            return {"out": str(collect_config.out)}
        hint = "rerun the same command to resume"
        return {**view.stats.summary(), "out": str(collect_config.out), "hint": hint}

    json_stdout.partial = so_far

    with view.live(err) if live else contextlib.nullcontext():
        try:
            summary = asyncio.run(
                stop_on_sigterm(run_collection(collect_config, settings.paths.models_dir, on_event))
            )
        except (KeyboardInterrupt, asyncio.CancelledError) as stop:
            err.print(
                f"interrupted: {view.saved} episodes of this invocation are saved in "
                f"{collect_config.out}; rerun the same command to resume"
            )
            raise typer.Exit(130 if isinstance(stop, KeyboardInterrupt) else 143) from None
    if push_to_hub and not summary["missing"]:
        json_stdout.partial = lambda: summary  # a failed push still reports the collection
        summary["pushed"] = push(collect_config.out, push_to_hub, repo_type="dataset")
    if json_output:
        emit_json(summary)
    else:
        out.print(summary_table(summary))
        if summary.get("pushed"):
            out.print(f"pushed to {summary['pushed']}")
    if summary["missing"]:
        if push_to_hub:
            err.print(f"not pushed to {push_to_hub}: the dataset is incomplete")
        raise not_all_collected(summary, collect_config.out)


def not_all_collected(summary: dict, out: Path) -> ObsspecError:
    """Exit code 3 when some episodes asked for are in the dataset, 1 when none is."""
    why = []
    if summary["skipped_tasks"]:
        why.append(f"{len(summary['skipped_tasks'])} task(s) skipped as broken")
    if summary["failures"]:
        kinds = ", ".join(f"{kind}: {n}" for kind, n in sorted(summary["failures"].items()))
        why.append(
            f"{sum(summary['failures'].values())} episode(s) failed ({kinds}): the "
            "infrastructure on every attempt, or a broken verifier"
        )
    error = Incomplete if summary["status"] == "incomplete" else ObsspecError
    return error(
        f"{summary['missing']} of {summary['total']} episodes are not in the dataset "
        f"({'; '.join(why) or 'not run'}); see {out / 'failures.jsonl'}",
        hint="fix the broken tasks, then rerun the same command to run the missing episodes",
    )


async def stop_on_sigterm(work: Coroutine[Any, Any, T]) -> T:
    """Run work; SIGTERM (a scheduler or `timeout` stopping the job) cancels it, which stops
    the run as cleanly as Ctrl-C does: finished episodes saved, containers removed."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    outside = signal.getsignal(signal.SIGTERM)  # cli.exits': SIGTERM after the run stops too
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, outside)
