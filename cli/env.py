"""`obsspec env build|run`: sandbox images and a one-off command in a sandbox."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.markup import escape

from obsspec.cli import env_determinism, env_kit, env_tasks
from obsspec.cli.common import (
    ConfigOption,
    JsonOption,
    SetOption,
    config_sets,
    emit_json,
    err,
    global_config,
    out,
    progress_printer,
)
from obsspec.cli.limit_options import TIMEOUT_RANGE, timeout_seconds

app = typer.Typer(help="Sandboxes, images and tasks.", no_args_is_help=True)
app.command("generate")(env_tasks.generate)
app.command("validate")(env_tasks.validate)
app.command("shell")(env_tasks.shell)
app.command("determinism")(env_determinism.determinism)
app.command("kit")(env_kit.kit)


class BuildSource(StrEnum):
    auto = "auto"
    registry = "registry"
    debootstrap = "debootstrap"


@app.command()
def build(
    source: Annotated[
        BuildSource,
        typer.Option(
            "--source",
            help="Where the Debian root comes from: auto (a registry if one answers, "
            "else debootstrap from this machine's apt mirror), registry, or debootstrap.",
            case_sensitive=False,
        ),
    ] = BuildSource.auto,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even if the recipe is unchanged.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Build the sandbox base image obsspec/base (:latest and :<recipe-hash>).

    Rebuilt only when its recipe (environments/images/base) changes.
    """
    from obsspec.environments.docker_api import connect
    from obsspec.environments.image import ensure_base_image

    client = connect()
    try:
        result = ensure_base_image(
            client,
            source=source.value,  # type: ignore[arg-type]
            force=force,
            on_log=progress_printer(quiet=json_output),
        )
    finally:
        client.close()
    if json_output:
        emit_json(
            {
                "tags": result.tags,
                "image_id": result.image_id,
                "recipe_hash": result.recipe_hash,
                "source": result.source,
                "built": result.built,
                "seconds": round(result.seconds, 2),
            }
        )
        return
    what = f"built from {result.source}" if result.built else "up to date"
    out.print(f"{', '.join(result.tags)}: {what} ({result.seconds:.1f} s)")


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str], typer.Argument(help="Shell command (put it after --).")],
    image: Annotated[
        str | None, typer.Option("--image", help="Image \\[default: obsspec/base:latest].")
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            callback=timeout_seconds,
            help=f"Seconds for the whole call ({TIMEOUT_RANGE}); then it is killed.",
        ),
    ] = 60.0,
    cpus: Annotated[
        float | None,
        typer.Option("--cpus", min=0.01, help="CPU quota in cores.", rich_help_panel="Limits"),
    ] = None,
    memory_mb: Annotated[
        int | None,
        typer.Option(
            "--memory-mb", min=64, help="Memory limit in MiB (no swap).", rich_help_panel="Limits"
        ),
    ] = None,
    pids: Annotated[
        int | None,
        typer.Option("--pids", min=16, help="Most processes at once.", rich_help_panel="Limits"),
    ] = None,
    storage_mb: Annotated[
        int | None,
        typer.Option(
            "--storage-mb",
            min=1,
            help="Disk the command may write, MiB (a quota or a watchdog, see docs/tasks.md).",
            rich_help_panel="Limits",
        ),
    ] = None,
    json_output: JsonOption = False,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Run one shell command in a fresh sandbox container and print its output.

    The container has a sandbox's limits (no network; --cpus, --memory-mb, --pids and
    --storage-mb default to a sandbox's 1 core, 2048 MiB, 512 processes and 4096 MiB of disk);
    each stream keeps its first and last 256 KiB. Exits with the command's exit code (124 if
    it timed out; 1, with an error, if it was stopped for writing past its disk limit).
    """
    from obsspec.environments.docker_api import connect
    from obsspec.environments.oneshot import run_once
    from obsspec.environments.sandbox import SandboxLimits

    settings = global_config(config, sets=config_sets(set_keys))
    image = image or settings.base_image
    shell_command = " ".join(command)
    chosen = {"cpus": cpus, "memory_mb": memory_mb, "pids": pids, "storage_mb": storage_mb}
    limits = SandboxLimits(**{k: v for k, v in chosen.items() if v is not None})
    client = connect()
    try:
        result = run_once(client, image, shell_command, timeout_s=timeout, limits=limits)
    finally:
        client.close()
    if json_output:
        emit_json(
            {
                "image": image,
                "command": shell_command,
                "stdout": result.stdout,
                "stderr": result.stderr,
                "exit_code": result.exit_code,
                "timed_out": result.timed_out,
                "truncated": result.truncated,
                "seconds": round(result.seconds, 3),
                "disk_limit": result.disk_limit,
            }
        )
    else:
        out.file.write(result.stdout)  # as is: rich would cost ~1 KB per line of output
        out.file.flush()
        err.file.write(result.stderr)
        err.file.flush()
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        status = "stopped at its disk limit" if result.disk_limit else status
        status += ", output truncated" if result.truncated else ""
        err.print(f"[dim]({escape(image)}, {status}, {result.seconds:.2f} s)[/dim]", markup=True)
    if result.disk_limit is not None:
        stopped_for_disk(result.disk_limit, json_output)
    raise typer.Exit(result.exit_code)  # 124 when timed out


def stopped_for_disk(why: str, json_output: bool) -> None:
    """The command wrote past its disk limit: an error (exit 1), its output printed above."""
    from obsspec.environments.errors import DiskLimitExceeded

    if json_output:  # the object above says why; stdout holds only it
        raise typer.Exit(1)
    raise DiskLimitExceeded(why, hint="give it more disk with --storage-mb")


@app.command()
def gc(
    everything: Annotated[
        bool, typer.Option("--all", help="Remove every obsspec container, live runs' too.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list what would go.")] = False,
    images: Annotated[
        bool, typer.Option("--images", help="Also remove cached task images (rebuilt on demand).")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Remove sandbox containers (and their volumes) left behind by runs that died."""
    from obsspec.environments.docker_api import connect
    from obsspec.environments.gc import gc_containers, remove_task_images

    client = connect()
    try:
        report = gc_containers(client, everything=everything, dry_run=dry_run)
        removed_images = remove_task_images(client, dry_run=dry_run) if images else []
    finally:
        client.close()
    if json_output:
        emit_json(
            {
                "removed": report.removed,
                "removed_images": removed_images,
                "dry_run": dry_run,
                "kept_live": report.kept_live,
                "kept_other_host": report.kept_other_host,
            }
        )
        return
    verb = "would remove" if dry_run else "removed"
    out.print(
        f"{verb} {len(report.removed)} container(s); kept {report.kept_live} of live runs"
        f" and {report.kept_other_host} of other hosts"
        + (f"; {verb} {len(removed_images)} task image(s)" if images else "")
    )


@app.command()
def bench(
    n: Annotated[int, typer.Option("--n", min=5, help="Commands to time.")] = 100,
    starts: Annotated[int, typer.Option("--starts", min=2, help="Sandbox starts to time.")] = 10,
    image: Annotated[str | None, typer.Option("--image", help="Image \\[default: base].")] = None,
    json_output: JsonOption = False,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Time our sandbox against plain Docker: command round trip and sandbox acquisition."""
    import asyncio

    from obsspec.environments.bench import run_bench
    from obsspec.environments.gc import run_scope

    settings = global_config(config, sets=config_sets(set_keys))
    with run_scope("bench") as (client, run_id):
        result = asyncio.run(
            run_bench(client, image or settings.base_image, run_id, n_exec=n, n_acquire=starts)
        )
    if json_output:
        emit_json(result)
        return
    out.print(
        f"command round trip: {result['exec_ms_p50']:.2f} ms (docker exec "
        f"{result['docker_exec_ms_p50']:.1f} ms, ratio {result['exec_overhead_ratio']:.3f})"
    )
    out.print(
        f"sandbox acquire: {result['acquire_ms_p50']:.2f} ms warm, "
        f"{result['cold_start_ms_p50']:.0f} ms cold"
    )
