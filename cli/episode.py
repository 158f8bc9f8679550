"""`obsspec episode`: run one episode of a model on a task and print the transcript."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from obsspec.agent.protocol import ActionFormat
from obsspec.cli.common import (
    CacheDirOption,
    ConfigOption,
    ImageMapOption,
    JsonOption,
    NetworkOption,
    SetOption,
    config_sets,
    emit_json,
    global_config,
    progress_printer,
)
from obsspec.cli.common import out as console


def episode(
    task: Annotated[Path, typer.Argument(help="Task directory (Harbor or Terminal-Bench v1).")],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Policy: model name or HF directory \\[default: the default model]."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Sampling seed of the episode.")] = 0,
    max_turns: Annotated[int, typer.Option(min=1, help="Turns before the episode stops.")] = 15,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens per reply.")] = 384,
    temperature: Annotated[float, typer.Option(min=0, help="Sampling temperature.")] = 0.7,
    action_format: Annotated[
        ActionFormat, typer.Option("--format", help="Action format the policy is told to use.")
    ] = ActionFormat.markdown,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Use an OpenAI-compatible server at this URL instead of vLLM in process.",
            rich_help_panel="Engine",
        ),
    ] = None,
    served_name: Annotated[
        str | None,
        typer.Option(
            "--served-name",
            help="Model name on the server \\[default: --model].",
            rich_help_panel="Engine",
        ),
    ] = None,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Run one episode and print its transcript: every reply, command and observation.

    The policy sees exactly what it would during collection; nothing is stored.
    """
    from obsspec.agent.episode import EpisodeLimits
    from obsspec.agent.transcript import format_transcript
    from obsspec.environments.sandbox import NetworkPolicy
    from obsspec.rollout.single import watch_episode

    settings = global_config(
        config, cache_dir, sets=config_sets(set_keys), image_map=image_map, runs_tasks=True
    )
    limits = EpisodeLimits(
        max_turns=max_turns,
        max_tokens=max_tokens,
        temperature=temperature,
        action_format=action_format,
    )
    trajectory = asyncio.run(
        watch_episode(
            task,
            model or settings.default_model,
            settings,
            limits,
            seed=seed,
            server=server,
            served_name=served_name,
            network=network or NetworkPolicy.none,
            on_log=progress_printer(),
        )
    )
    if json_output:
        emit_json(trajectory.to_dict())
    else:
        from obsspec.environments.tasks import load_task

        console.print(
            format_transcript(trajectory, load_task(task).instruction),
            markup=False,
            highlight=False,
        )
    if trajectory.error_kind == "infra":
        raise typer.Exit(1)
