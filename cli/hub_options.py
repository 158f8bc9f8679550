"""--push-to-hub REPO, shared by collect, export, train-wm and sft: the hub is checked before
any work (an unreachable hub costs nothing), the result pushed after it; a failed push keeps
the local result and says where it is."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from obsspec.errors import HubError
from obsspec.hub import RepoType, check_hub, push_file, push_folder

PushToHubOption = Annotated[
    str | None,
    typer.Option(
        "--push-to-hub",
        metavar="REPO",
        help="Also upload the result to this Hugging Face repository (a dataset for collect "
        "and export, a model for train-wm and sft); needs a reachable hub, a token and "
        "HF_HUB_OFFLINE=0, checked before any work.",
        rich_help_panel="Output",
    ),
]


def check_push(repo: str | None) -> None:
    """Before any work: a push that cannot happen is refused now, not after an hour."""
    if repo:
        check_hub(repo)


def push(path: Path, repo: str, *, repo_type: RepoType) -> str:
    """Upload path (a file, or a folder's files) to repo; its URL. On failure the HubError
    says the local result is kept, and where."""
    try:
        if path.is_dir():
            return push_folder(path, repo, repo_type=repo_type)
        return push_file(path, repo)
    except HubError as e:
        raise HubError(f"{e}; the result is kept here: {path}", hint=e.hint) from e
