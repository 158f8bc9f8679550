"""Pushing results to a Hugging Face Hub repository (`--push-to-hub REPO`).

    user = check_hub(repo)                          # before any work: the hub answers
    url = push_file(path, repo)                     # export's file, into a dataset repo
    url = push_folder(out, repo, repo_type="model") # train-wm/sft's model, collect's dataset

Nothing else in obsspec needs a hub (models are local directories, and the CLI runs with
HF_HUB_OFFLINE=1 unless the environment sets it), so a push fails with one line that says
why when the hub cannot be used: offline mode, no token, no connection, or the hub's own
refusal (obsspec.errors.HubError, retryable: the same command may work where the hub is
reachable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from obsspec.errors import HubError

RepoType = Literal["dataset", "model"]

FLAG = "--push-to-hub"


def check_hub(repo: str, *, endpoint: str | None = None) -> str:
    """The name of the user the hub knows the token as; a HubError when it cannot be used."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import OfflineModeIsEnabled
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
        if constants.is_offline_mode():  # before the token: offline, none would be used
            raise OfflineModeIsEnabled("offline mode is enabled")
        return HfApi(endpoint=endpoint).whoami()["name"]
    except Exception as e:  # the hub client raises httpx's, OSError's and its own errors
        raise hub_error(repo, e) from e


def push_file(path: Path, repo: str, *, endpoint: str | None = None) -> str:
    """Upload path into dataset repository repo (made if missing); the file's URL."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint)
    try:
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        return api.upload_file(
            path_or_fileobj=path,
            path_in_repo=path.name,
            repo_id=repo,
            repo_type="dataset",
            commit_message=f"obsspec: {path.name}",
        )
    except Exception as e:
        raise hub_error(repo, e) from e


def push_folder(
    folder: Path, repo: str, *, repo_type: RepoType, endpoint: str | None = None
) -> str:
    """Upload folder's files into repository repo (made if missing), hidden files (a run's
    locks and temporary files) left out; the commit's URL."""
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint)
    try:
        api.create_repo(repo, repo_type=repo_type, exist_ok=True)
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo,
            repo_type=repo_type,
            ignore_patterns=[".*", "**/.*"],
            commit_message=f"obsspec: {folder.name}",
        )
    except Exception as e:
        raise hub_error(repo, e) from e
    return str(getattr(commit, "commit_url", commit))


def hub_error(repo: str, error: Exception) -> HubError:
    from huggingface_hub.errors import (
        HfHubHTTPError,
        HFValidationError,
        LocalTokenNotFoundError,
        OfflineModeIsEnabled,
    )

    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if isinstance(error, HFValidationError):
        return HubError(f"{FLAG} {repo}: not a repository id ({first_line})", hint="e.g. user/name")
    if isinstance(error, OfflineModeIsEnabled):
        return HubError(
            f"{FLAG} {repo}: the hub cannot be reached: offline mode (HF_HUB_OFFLINE) is on",
            hint="obsspec sets HF_HUB_OFFLINE=1 unless the environment sets it; run with "
            "HF_HUB_OFFLINE=0 where the hub is reachable",
        )
    if isinstance(error, LocalTokenNotFoundError):
        return HubError(
            f"{FLAG} {repo}: no Hugging Face token to push with",
            hint="log in with `hf auth login` or set HF_TOKEN",
        )
    if isinstance(error, HfHubHTTPError):
        return HubError(f"{FLAG} {repo}: the hub refused: {first_line}")
    return HubError(
        f"{FLAG} {repo}: the hub cannot be reached ({type(error).__name__}: {first_line})",
        hint="check the network, or HF_ENDPOINT if you use a mirror",
    )
