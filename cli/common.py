"""What every command shares: consoles, JSON output, the config options, progress lines."""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from obsspec.cli.terminal import TerminalConsole
from obsspec.config import ConfigDeprecationWarning, GlobalConfig, load_global_config
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.verifier_kit.plan import KitMode
from obsspec.overrides import Key, Overrides, parse_setting

try:  # typer >= 0.20 ships its own copy of click
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover
    from click import get_current_context

# Tables and results go to stdout; progress, warnings and errors go to stderr, so that
# `--json` output can be piped into other tools untouched.
# emoji=False: a `:name:` in a task's text or a command's output is printed as typed.
# TerminalConsole: their control characters are shown as escapes (cli.terminal).
out = TerminalConsole(highlight=False, soft_wrap=True, emoji=False)
err = TerminalConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)
if not out.is_terminal:
    out.width = 120  # rich's 80-column default for pipes folds paths in tables

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Config file, TOML or YAML (.yaml, .yml); --set and flags override its values.",
        dir_okay=False,
        rich_help_panel="Configuration",
    ),
]


def check_set_entries(entries: list[str] | None) -> list[str] | None:
    """--set's entries as typed; a malformed one is a usage error naming --set."""
    for entry in entries or []:
        try:
            parse_setting(entry)
        except ValueError as e:
            raise typer.BadParameter(f"{entry!r}: {e}") from None
    return entries


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Set a config key, e.g. grpo.lr=1e-6: KEY as in the command's \\[table] of "
        "--config, or a shared key (default_model); VALUE as TOML, else text. Repeatable; "
        "overrides --config; a flag for the same key as well is an error.",
        callback=check_set_entries,
        rich_help_panel="Configuration",
    ),
]
CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Model cache directory \\[default: ~/.cache/obsspec].",
        file_okay=False,
        rich_help_panel="Configuration",
    ),
]
SANDBOX = "Sandbox"


def check_image_map_entries(entries: list[str] | None) -> list[str] | None:
    """--image-map's entries as typed; a malformed one is a usage error naming the flag."""
    from obsspec.environments.tasks.image_map import FLAG, parse_entries
    from obsspec.errors import ConfigError

    try:
        parse_entries(entries or [], FLAG)
    except ConfigError as e:
        raise typer.BadParameter(str(e).removeprefix(f"{FLAG}: ")) from None
    return entries


ImageMapOption = Annotated[
    list[str] | None,
    typer.Option(
        "--image-map",
        metavar="SRC=DST",
        help="Build on local image DST where a task says FROM SRC, e.g. "
        "python:3.13-slim=obsspec/base ('*=IMAGE': every image not here); repeatable. "
        "Adds to OBSSPEC_IMAGE_MAP and the config's \\[images] map.",
        callback=check_image_map_entries,
        rich_help_panel=SANDBOX,
    ),
]
NetworkOption = Annotated[
    NetworkPolicy | None,
    typer.Option(
        "--network",
        help="Who gets a network: none, verify (only the verifier), all (the agent too; "
        "also a task's allow_internet under verify) \\[default: none]. Task image builds "
        "get one unless none.",
        case_sensitive=False,
        rich_help_panel=SANDBOX,
    ),
]
VerifierKitOption = Annotated[
    KitMode | None,
    typer.Option(
        "--verifier-kit",
        case_sensitive=False,
        help="Serve verifiers what they download at verify time (uv, its installer, pinned "
        "Python packages) from a kit fetched once on this machine: auto, those without a "
        "network; on, all; off, none \\[default: auto]. `obsspec env kit` prepares it.",
        rich_help_panel=SANDBOX,
    ),
]
WandbProjectOption = Annotated[
    str | None,
    typer.Option(
        "--wandb-project",
        metavar="NAME",
        help="Also log every step's figures to this Weights & Biases project (needs "
        "pip install 'obsspec\\[wandb]'; WANDB_MODE=offline logs locally). Entity and run "
        "name: the command's wandb table in --config, e.g. \\[rl.wandb].",
        rich_help_panel="Logging",
    ),
]


def json_flag(ctx: typer.Context, value: bool) -> bool:
    """--json as parsed (main's guess from the command line covers what fails before). A
    group's own --json left unset (`obsspec profile`'s) leaves the guess alone: it is parsed
    before the subcommand's, so `profile simulate --calibrate FILE --json` would otherwise
    lose --json when --calibrate is refused before simulate's --json is reached."""
    if value or not isinstance(ctx.command, typer.core.TyperGroup):
        json_stdout.requested = value
    return value


JsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON object on stdout and nothing else there.",
        callback=json_flag,
    ),
]


def global_config(
    config_file: Path | None,
    cache_dir: Path | None = None,
    *,
    sets: Overrides | None = None,
    table: str | None = None,
    image_map: list[str] | None = None,
    runs_tasks: bool = False,
) -> GlobalConfig:
    """Defaults < config file < --set < the flags the user actually set. A command with its
    own table in the file (table) leaves the --set keys that are not shared to that table's
    loader. Commands that run tasks (runs_tasks) also take OBSSPEC_IMAGE_MAP, which
    --image-map entries override."""
    overrides: dict[str, Any] = {}
    if cache_dir is not None:
        overrides["paths"] = {"cache_dir": cache_dir.expanduser()}
    if runs_tasks and (mapped := image_map_overrides(image_map)):
        overrides["images"] = {"map": mapped}
    return load_global_config(config_file, overrides, sets, table=table)


def config_sets(entries: list[str] | None) -> Overrides:
    """--set's entries, parsed, able to name the flag typed here that sets a key too."""
    return Overrides.parse(entries or [], flag_for=typed_flag)


def typed_flag(key: Key) -> str | None:
    """The flag typed on this command line that most likely set config key `key`: the one
    whose name shares most words with it (--lr: grpo.lr, --workers:
    placement.rollout_workers, --no-cotrain: cotrain.enabled); None when none shares one."""
    ctx = get_current_context(silent=True)
    if ctx is None:
        return None
    wanted = [word for part in key for word in part.split("_")]
    best, most = None, 0
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name else None
        if param.name == "set_keys" or getattr(source, "name", None) != "COMMANDLINE":
            continue
        words = [w for w in param.name.split("_") if w != "no"]
        shared = sum(any(alike(w, k) for k in wanted) for w in words)
        if shared > most:
            best, most = max(param.opts, key=len), shared
    return best


def alike(a: str, b: str) -> bool:
    """The same word, or one of its forms (image, images; speculate, speculation)."""
    n = min(len(a), len(b), 5)
    return a[:n] == b[:n]


def task_access_flags(
    image_map: list[str] | None, network: NetworkPolicy | None, verifier_kit: str | None = None
) -> dict:
    """The pipeline-config flags of --image-map (with OBSSPEC_IMAGE_MAP: they win over the
    pipeline's own `images` table), --network and --verifier-kit, where set."""
    flags: dict[str, Any] = {"network": network, "verifier_kit": verifier_kit}
    if mapped := image_map_overrides(image_map):
        flags["images"] = {"map": mapped}
    return flags


def image_map_overrides(entries: list[str] | None) -> dict[str, str]:
    """OBSSPEC_IMAGE_MAP's entries, then --image-map's (a source named twice: the flag wins);
    a malformed entry is a ConfigError naming the variable or the flag."""
    from obsspec.environments.tasks.image_map import ENV_VAR, FLAG, parse_entries, parse_env_value

    merged = parse_env_value(os.environ.get(ENV_VAR, ""))
    merged.update(parse_entries(entries or [], FLAG))
    return merged


def show_config_warnings() -> None:
    """A deprecated config key is one `warning: ...` line on stderr, once, not Python's
    warning format (file, line and source of the library)."""
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, ConfigDeprecationWarning):
            err.print(f"warning: {message}", markup=False, highlight=False)
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    warnings.simplefilter("once", ConfigDeprecationWarning)


def drop_unset(flags: dict[str, Any]) -> dict[str, Any]:
    """Only the flags the user set: unset options (None) and empty tables never override
    the config file."""
    return {k: v for k, v in flags.items() if v not in (None, {})}


class JsonOutput:
    """Under --json, stdout carries exactly one JSON object, however the command ends: the
    command's own (emit_json), or else the outcome cli.app.main writes for a usage error, an
    error, Ctrl-C or SIGTERM: {"status", "error", "hint", "exit_code"} over what `partial()`
    returns (what the command had done by then, e.g. collect's summary so far)."""

    def __init__(self) -> None:
        self.requested = False  # --json: guessed by cli.app.main, then set as parsed
        self.silent = False  # a torchrun rank other than 0 (only rank 0 prints)
        self.emitted = False
        self.partial: Callable[[], dict] | None = None

    def emit(self, payload: Any) -> None:
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        sys.stdout.flush()
        self.emitted = True

    def emit_outcome(self, status: str, error: str, hint: str | None, exit_code: int) -> None:
        """The object of a command that ended without its own (nothing if it has one)."""
        if not self.requested or self.emitted or self.silent:
            return
        done = self.partial() if self.partial is not None else {}
        self.emit(
            {
                **done,
                "status": status,
                "error": error,
                "hint": hint or done.get("hint"),
                "exit_code": exit_code,
            }
        )


json_stdout = JsonOutput()


def emit_json(payload: Any) -> None:
    json_stdout.emit(payload)


def progress_printer(quiet: bool = False) -> Callable[[str], None]:
    """A callback for library progress messages: dim lines on stderr."""

    def show(message: str) -> None:
        if not quiet:
            err.print(f"[dim]{escape(message)}[/dim]", markup=True, soft_wrap=True)

    return show
