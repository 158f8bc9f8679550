"""`obsspec export`: a run's episodes as chat conversations for other SFT tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from obsspec.cli.common import (
    CacheDirOption,
    JsonOption,
    emit_json,
    global_config,
    json_stdout,
    out,
)
from obsspec.cli.hub_options import PushToHubOption, check_push, push
from obsspec.rollout.export import ExportFormat

FILTERS = "Filters"
SOURCES = "Sources"


def export(
    run: Annotated[
        Path,
        typer.Argument(
            help="Run directory of `obsspec collect` or `obsspec rl`.", show_default=False
        ),
    ],
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="openai-jsonl (OpenAI, TRL), sharegpt (LLaMA-Factory, axolotl) or "
            "verl-parquet (verl's multi-turn SFT).",
            case_sensitive=False,
            show_default=False,
        ),
    ],
    out_file: Annotated[
        Path, typer.Option("--out", help="The file to write.", dir_okay=False, show_default=False)
    ],
    success_only: Annotated[
        bool,
        typer.Option(
            "--success-only", help="Only episodes that succeeded.", rich_help_panel=FILTERS
        ),
    ] = False,
    min_reward: Annotated[
        float | None,
        typer.Option(
            "--min-reward",
            help="Only episodes with at least this reward \\[default: every episode].",
            rich_help_panel=FILTERS,
        ),
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(
            "--tasks",
            help="The task set the run was collected on, where its text is \\[default: the "
            "one its manifest names; else the text is decoded from the prompt ids].",
            rich_help_panel=SOURCES,
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Model name or directory with the policy's tokenizer \\[default: the run's "
            "policy].",
            rich_help_panel=SOURCES,
        ),
    ] = None,
    skip_unverified: Annotated[
        bool,
        typer.Option(
            "--skip-unverified",
            help="Leave out episodes whose rebuilt text does not re-encode to their token "
            "ids, and export the others (without it, any such episode is an error).",
        ),
    ] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace --out if it exists.")
    ] = False,
    push_to_hub: PushToHubOption = None,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
) -> None:
    """Export a run's episodes as chat conversations for SFT tools.

    Each episode becomes its policy's conversation: the system prompt, the task, then each
    reply and the observation that followed it, in the role the policy saw it in. Every
    conversation is checked by re-encoding it with the policy's tokenizer: it must give the
    episode's own token ids. Broken episodes (infrastructure errors, no reply) are left
    out and counted. See docs/export.md.
    """
    from obsspec.models.tokenizer import load_tokenizer
    from obsspec.rollout.export import (
        RUN,
        ExportRequest,
        export_run,
        policy_tokenizer,
        preflight,
    )
    from obsspec.runs import read_run_manifest

    request = ExportRequest(
        run,
        fmt,
        out_file,
        tasks=tasks,
        success_only=success_only,
        min_reward=min_reward,
        skip_unverified=skip_unverified,
    )
    preflight(run, out_file, overwrite=overwrite, tasks=tasks)
    check_push(push_to_hub)  # an unreachable hub fails before anything is written
    models_dir = global_config(None, cache_dir).paths.models_dir
    manifest = read_run_manifest(run, flag=RUN)
    report = export_run(request, load_tokenizer(policy_tokenizer(manifest, tokenizer, models_dir)))
    summary = report.as_dict()
    json_stdout.partial = lambda: summary  # a failed push still reports the export
    if push_to_hub:
        summary["pushed"] = push(out_file, push_to_hub, repo_type="dataset")
    if json_output:
        emit_json({**summary, "status": "ok"})
    else:
        render(summary)


def render(summary: dict) -> None:
    left_out = [
        f"{summary['skipped_broken']} broken (infrastructure error or no reply)",
        f"{summary['skipped_by_filter']} left out by the filters",
    ]
    if summary["unverified"]:
        left_out.append(f"{summary['unverified']} unverified (skipped)")
    sources = ", ".join(f"{n} from the {src}" for src, n in sorted(summary["task_text"].items()))
    out.print(
        f"exported {summary['exported']} of {summary['episodes']} episodes to "
        f"{escape(summary['out'])} ({summary['format']}); {', '.join(left_out)}; "
        f"task text: {sources}"
    )
    for example in summary["unverified_examples"]:
        out.print(f"  unverified: {escape(example)}")
    if summary.get("pushed"):
        out.print(f"pushed to {escape(summary['pushed'])}")
