"""`obsspec env generate|validate|shell`: the task suite and working inside a task's sandbox."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from obsspec.cli.common import (
    CacheDirOption,
    ConfigOption,
    ImageMapOption,
    JsonOption,
    NetworkOption,
    SetOption,
    VerifierKitOption,
    config_sets,
    emit_json,
    err,
    global_config,
    out,
    progress_printer,
)
from obsspec.cli.gate_options import (
    FailOverOption,
    FailUnderOption,
    exit_on_failed_gate,
    gated,
    parse_gate_flags,
)
from obsspec.cli.limit_options import TIMEOUT_RANGE, timeout_seconds
from obsspec.environments.sandbox import NetworkPolicy, denied_internet
from obsspec.environments.verifier_kit.plan import KitMode
from obsspec.types import visible_controls


def generate(
    out_dir: Annotated[Path, typer.Option("--out", help="Directory to write tasks into.")],
    n: Annotated[int, typer.Option("--n", min=1, help="Number of tasks.")] = 24,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, byte-identical tasks.")] = 0,
    families: Annotated[
        str | None, typer.Option("--families", help="Comma-separated families \\[default: all].")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Write N Harbor-format tasks from the built-in procedural families (round robin)."""
    from obsspec.environments.suite import FAMILIES
    from obsspec.environments.suite import generate as write_suite

    chosen = [f.strip() for f in families.split(",") if f.strip()] if families else None
    try:
        paths = write_suite(out_dir, n, seed, chosen)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--families") from None
    names = sorted({p.name.rsplit("-", 1)[0] for p in paths})
    if json_output:
        emit_json({"out": str(out_dir), "tasks": len(paths), "seed": seed, "families": names})
        return
    out.print(f"wrote {len(paths)} tasks ({len(names)} families of {len(FAMILIES)}) to {out_dir}")


def validate(
    tasks: Annotated[
        str, typer.Argument(help="A task directory, a directory of tasks, or a glob.")
    ],
    concurrency: Annotated[
        int, typer.Option(min=1, help="Tasks checked at once (1 gives honest timings).")
    ] = 1,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    verifier_kit: VerifierKitOption = None,
    cache_dir: CacheDirOption = None,
    fail_under: FailUnderOption = None,
    fail_over: FailOverOption = None,
    json_output: JsonOption = False,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Check every task: the reference solution must get reward 1, doing nothing reward 0.

    The solution runs as a script, as Harbor and Terminal-Bench run it. A task directory that
    does not load is reported as a failed task. Exits 1 if any task fails; the JSON has one
    row per task with its problems and, on failure, the tails of the solution's and the
    verifier's output. With gates (--fail-under solution_pass_rate=0.9), the gates decide
    instead: exit 3 when one fails, 0 when all pass.
    """
    from obsspec.environments.gc import run_scope
    from obsspec.environments.validate import summarize, validate_tasks

    gates = parse_gate_flags(fail_under, fail_over, summarize([]))

    settings = global_config(
        config, cache_dir, sets=config_sets(set_keys), image_map=image_map, runs_tasks=True
    )
    loaded, broken = load_or_report(tasks)
    network = network or NetworkPolicy.none
    warn_denied_internet([t for t in loaded if denied_internet(t.limits, network)])
    total, done = len(loaded) + len(broken), 0

    def show(report) -> None:
        nonlocal done
        done += 1
        show_report(report, f"[{done}/{total}]")

    for report in broken:
        show(report)
    loaded = asyncio.run(
        kits_for(loaded, verifier_kit, network, settings.paths.cache_dir)
    )  # fmt: skip
    with run_scope("validate") as (client, run_id):
        reports = asyncio.run(
            validate_tasks(
                loaded,
                client,
                run_id,
                concurrency=concurrency,
                on_done=show,
                image_map=settings.images.map,
                network=network,
            )
        )
    summary = gated(summarize([*broken, *reports]), gates)
    if json_output:
        emit_json(summary)
    else:
        render_summary(summary)
    if gates:
        exit_on_failed_gate(summary)
    elif summary["ok"] != summary["tasks"]:
        raise typer.Exit(1)


async def kits_for(tasks: list, mode: KitMode | None, network: NetworkPolicy, cache_dir) -> list:
    """tasks, those the verifier kit serves (mode, default auto) carrying it; its notes on
    stderr."""
    from obsspec.environments.verifier_kit.attach import with_verifier_kits

    def note(message: str) -> None:
        err.print(f"note: {message}", markup=False, highlight=False)

    return await with_verifier_kits(tasks, mode or KitMode.auto, network, cache_dir, note)


def load_or_report(spec: str):
    """The tasks that load, and a failed report for each task directory that does not."""
    from obsspec.environments.tasks.load import load_tasks_report
    from obsspec.environments.validate import TaskValidation

    loaded, broken = load_tasks_report(spec)
    return loaded, [TaskValidation(path.name, "", errors=[str(e)]) for path, e in broken]


def show_report(report, counter: str) -> None:
    """One progress line on stderr; for a failure, its problems and output tails below it.
    Task text goes out as rich Text (never parsed): a `[/]` in a task id prints as is. Its
    control characters are made visible before it becomes Text (cli.terminal)."""
    mark = ("ok", "green") if report.ok else ("FAIL", "red")
    task = visible_controls(report.task)
    err.print(Text.assemble(f"{counter} ", mark, f" {task} ({report.seconds:.1f} s)"))
    if not report.ok:
        for line in failure_lines(report.row()):
            err.print(line, markup=False)


def failure_lines(row: dict) -> list[str]:
    """A failed task's problems, then the tails of its outputs, indented."""
    lines = [f"  - {problem}" for problem in row["problems"]]
    for key, title in TAILS:
        if row[key]:
            lines.append(f"  {title} (last lines):")
            lines += [f"    | {line}" for line in row[key].splitlines()]
    return lines


TAILS = (
    ("solution_output", "solution output"),
    ("verifier_output", "verifier output after the solution"),
    ("noop_verifier_output", "verifier output with nothing done"),
)


def warn_denied_internet(tasks) -> None:
    if tasks:
        names = ", ".join(t.id for t in tasks[:5]) + (", ..." if len(tasks) > 5 else "")
        err.print(
            f"note: {len(tasks)} task(s) allow internet, but --network is none: they get no "
            f"network ({names}); --network verify or all gives their agent one",
            markup=False,
        )


def render_summary(summary: dict) -> None:
    table = Table(title="task validation")
    for column in ("task", "solution reward", "no-op reward", "seconds", "result"):
        table.add_column(column)
    for row in summary["rows"]:
        table.add_row(
            Text(visible_controls(row["task"])),  # measured as it will print
            reward_text(row["solution_reward"]),
            reward_text(row["noop_reward"]),
            f"{row['seconds']:.1f}",
            result_text(row["problems"]),
        )
    out.print(table)
    out.print(
        f"{summary['ok']}/{summary['tasks']} tasks ok; solution gets 1: "
        f"{summary['solution_pass']}, no-op gets 0: {summary['noop_fail']}; "
        f"{len(summary['families'])} families; slow solutions (>= 1 s): "
        f"{summary['slow_command_share']:.0%}",
        markup=False,
    )
    for row in summary["rows"]:
        if row["problems"]:
            out.print(Text(f"{visible_controls(row['task'])}:", style="red"))
            for line in failure_lines(row):
                out.print(line, markup=False)


def result_text(problems: list[str]) -> Text:
    if not problems:
        return Text("ok", style="green")
    return Text(f"{len(problems)} problem{'s' if len(problems) > 1 else ''}", style="red")


def reward_text(reward: float | None) -> str:
    return "-" if reward is None else f"{reward:g}"


def shell(
    task: Annotated[
        Path | None, typer.Argument(help="Task directory (its image is built).")
    ] = None,
    image: Annotated[str | None, typer.Option("--image", help="Use an image, not a task.")] = None,
    solution: Annotated[
        bool, typer.Option("--solution", help="Run the reference solution first.")
    ] = False,
    verify_after: Annotated[
        bool, typer.Option("--verify", help="Run the verifier at the end.")
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(callback=timeout_seconds, help=f"Seconds per command ({TIMEOUT_RANGE})."),
    ] = 120.0,
    image_map: ImageMapOption = None,
    network: NetworkOption = None,
    verifier_kit: VerifierKitOption = None,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """A persistent shell in a task's sandbox, for humans debugging tasks.

    Reads commands from stdin as a terminal does (a heredoc, loop or open quote continues on
    the next lines; a prompt when stdin is a terminal, a script when piped) and prints each
    command's observation exactly as the agent would see it.

    At the prompt, Ctrl-C drops the line typed so far and Ctrl-D leaves (`exit` is run in
    the sandbox: its shell restarts, as the agent's would); Ctrl-C while a command runs
    leaves too. Leaving removes the sandbox.
    """
    if (task is None) == (image is None):
        raise typer.BadParameter("give a task directory or --image, not both")
    settings = global_config(
        config, cache_dir, sets=config_sets(set_keys), image_map=image_map, runs_tasks=True
    )
    network = network or NetworkPolicy.none
    kit = verifier_kit if verify_after else KitMode.off
    asyncio.run(_shell(task, image, solution, verify_after, timeout, settings, network, kit))


async def _shell(task_dir, image, solution, verify_after, timeout, settings, network, kit):
    from obsspec.environments.ceiling import SandboxCeiling, capped, within_machine
    from obsspec.environments.gc import run_scope
    from obsspec.environments.sandbox import DockerSandbox, SandboxLimits, with_network
    from obsspec.environments.tasks import load_task
    from obsspec.environments.tasks.images import TaskImages

    task = load_task(task_dir) if task_dir else None
    if task is not None:
        [task] = await kits_for([task], kit, network, settings.paths.cache_dir)
    with run_scope("shell") as (client, run_id):
        if task is not None:
            images = TaskImages(
                client, image_map=settings.images.map, on_log=progress_printer(), network=network
            )
            image = await images.ensure(task)
            instruction = visible_controls(task.instruction.strip())
            err.print(Text.assemble((visible_controls(task.id), "bold"), ": ", instruction))
        limits, lowered = capped(
            with_network(task.limits if task else SandboxLimits(), network),
            within_machine(SandboxCeiling(), client),
        )
        if lowered:
            err.print(f"note: capped by the sandbox ceiling: {', '.join(lowered)}", markup=False)
        warn_denied_internet([task] if task and denied_internet(task.limits, network) else [])
        async with DockerSandbox(client, image, limits, run_id=run_id) as sb:
            await _session(task, sb, solution, verify_after, timeout)


async def _session(task, sb, solution, verify_after, timeout) -> None:
    """The reference solution as a script (if asked), then stdin's commands, then the
    verifier with its output."""
    from obsspec.environments.tasks.solution_run import run_solution_script
    from obsspec.environments.tasks.verifier import verify
    from obsspec.types import render_observation

    if task is not None and solution:
        err.print("[dim]-- reference solution --[/dim]")
        run = await run_solution_script(task, sb)
        out.print(f"$ {run.command}", markup=False)
        out.print(render_observation(run.result), markup=False)
        if not run.ok:
            err.print(run.problem(), markup=False)
    for command in read_commands():
        result = await sb.run(command, timeout_s=timeout)
        if not sys.stdin.isatty():
            out.print(f"$ {command}", markup=False)
        out.print(render_observation(result), markup=False)
    if task is not None and verify_after:
        outcome = await verify(task, sb)  # the agent phase (solution, stdin) ends here
        err.print("[dim]-- verifier output --[/dim]")
        out.print(outcome.output.rstrip("\n") or "(no output)", markup=False)
        keys = "" if list(outcome.rewards) == ["reward"] else f" {dict(outcome.rewards)}"
        out.print(f"reward: {outcome.reward:g}{keys} (verifier {outcome.seconds:.1f} s)")


def read_commands():
    """Commands from stdin, as a terminal reads them: a heredoc, a loop or an open quote takes
    the lines that finish it (environments.tasks.bash_commands.typed_commands). With a
    terminal, a `sandbox$` prompt, `>` on continuation lines, Ctrl-C to drop what was typed,
    and Ctrl-D to end."""
    from obsspec.environments.tasks.bash_commands import typed_commands

    interactive = sys.stdin.isatty()

    def read_line(continuation: bool) -> str | None:
        if interactive:
            line = read_typed_line("> " if continuation else "[bold cyan]sandbox$[/bold cyan] ")
        else:
            line = sys.stdin.readline()
        return line.rstrip("\n") if line else None

    return typed_commands(read_line)


def read_typed_line(prompt: str) -> str:
    """A line from the terminal after prompt; Ctrl-C drops what was typed (LineCancelled) and
    says how to leave, as bash and Python's prompt do. asyncio.run's own SIGINT handler only
    cancels the main task, which a blocking read never notices: the first Ctrl-C showed
    nothing and cancelled the next command instead."""
    from obsspec.environments.tasks.bash_commands import LineCancelled

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # before the prompt
    try:
        err.print(prompt, end="")
        return sys.stdin.readline()
    except KeyboardInterrupt:
        err.print("\n(Ctrl-D leaves the shell)", markup=False, highlight=False)
        raise LineCancelled from None
    finally:
        if previous is not None:  # None: not set from Python; ours stays
            signal.signal(signal.SIGINT, previous)
