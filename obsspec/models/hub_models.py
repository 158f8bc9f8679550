"""Models named by Hugging Face Hub id (`owner/name`, optionally `owner/name@revision`).

    hub_id = parse_hub_id("Qwen/Qwen3-8B@main")     # None for anything that is not one
    path = hub_model_dir(models_dir, hub_id)        # <models_dir>/hub/Qwen--Qwen3-8B@main
    downloaded(path)                                # complete and undamaged (sizes checked)
    fetch_hub_model(hub_id, models_dir)             # download (only what a model needs)

The hub is used only when the user turns it on: obsspec's CLI sets HF_HUB_OFFLINE=1 unless the
environment sets it, and huggingface_hub reads that setting. Offline, a model downloaded
before still resolves from the models directory; one that was not is a ModelError saying
how to get it.

A download goes into a hidden `.<dir>.partial` directory (a killed download resumes there),
is checked against the file list the hub gave, gets a manifest of content hashes
(obsspec.models.store), and is renamed into place: a directory with a manifest is complete.
Only the files a model needs are fetched (top-level config, safetensors weights, tokenizer,
generation config, chat template), never other weight formats or subfolders.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from obsspec.errors import ModelDownloadError, ModelError
from obsspec.models.store import (
    ModelManifest,
    build_manifest,
    exclusive_lock,
    read_manifest,
    swap_into_place,
    verify_files,
    write_manifest,
)

HUB_SUBDIR = "hub"
# owner/name as the hub spells repository ids ("--" and ".." are not allowed in them, which
# keeps owner--name a one-to-one directory name), then an optional @revision.
_HUB_ID = re.compile(
    r"(?P<repo>[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*)(?:@(?P<revision>[\w.\-/]+))?"
)
MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer.model",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "chat_template.jinja",
        "chat_template.json",
    }
)

Step = Callable[[str], None]


@dataclass(frozen=True)
class HubId:
    repo: str  # owner/name
    revision: str | None = None  # a branch, tag or commit; None: the default branch

    def __str__(self) -> str:
        return self.repo if self.revision is None else f"{self.repo}@{self.revision}"

    @property
    def dir_name(self) -> str:
        """owner--name[@revision], a revision's slashes (refs/pr/1) as '--' too."""
        name = self.repo.replace("/", "--")
        return name if self.revision is None else f"{name}@{self.revision.replace('/', '--')}"


def parse_hub_id(text: str) -> HubId | None:
    """The hub id `text` spells, or None. Says nothing about paths: the caller decides
    first whether an existing directory of that name wins (it does in resolve_model)."""
    match = _HUB_ID.fullmatch(text)
    if match is None or ".." in match["repo"] or "--" in match["repo"]:
        return None
    if match["repo"].endswith(".git"):
        return None
    return HubId(match["repo"], match["revision"])


def hub_model_dir(models_dir: Path, hub_id: HubId) -> Path:
    return models_dir / HUB_SUBDIR / hub_id.dir_name


def hub_is_on() -> bool:
    """huggingface_hub's own reading of HF_HUB_OFFLINE (the CLI's default is 1: off)."""
    from huggingface_hub import constants

    return not constants.is_offline_mode()


def downloaded(path: Path) -> bool:
    """A complete download: a manifest whose files are all there at their recorded sizes."""
    manifest = read_manifest(path)
    return manifest is not None and not verify_files(path, manifest, full=False)


def is_model_file(name: str) -> bool:
    """Whether a repository file (its path in the repository) is one a model needs."""
    return "/" not in name and (name in MODEL_FILES or name.endswith(".safetensors"))


def fetch_hub_model(
    hub_id: HubId, models_dir: Path, *, force: bool = False, on_step: Step = lambda _: None
) -> Path:
    """Download hub_id into the models directory, unless complete there already (or force);
    its directory. A ModelError when the hub is off, a ModelDownloadError when it fails."""
    target = hub_model_dir(models_dir, hub_id)
    if not hub_is_on():
        raise hub_off_error(hub_id, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(target.parent / f".{hub_id.dir_name}.lock"):
        if downloaded(target) and not force:  # another process finished it while we waited
            return target
        partial = target.with_name(f".{target.name}.partial")
        on_step(f"downloading {hub_id} from the Hugging Face Hub into {target}")
        commit, files = download_snapshot(hub_id, partial)
        missing = sorted(name for name in files if not (partial / name).is_file())
        if missing:
            raise ModelDownloadError(
                f"the download of {hub_id} is incomplete: {', '.join(missing[:5])} missing",
                hint="run the command again: the download resumes where it stopped",
            )
        on_step(f"recording content hashes of {len(files)} files")
        source = f"hf:{hub_id.repo}@{commit}"
        write_manifest(partial, build_manifest(partial, str(hub_id), source, "", dtype(partial)))
        shutil.rmtree(partial / ".cache", ignore_errors=True)  # the hub client's resume notes
        swap_into_place(partial, target)
    return target


def download_snapshot(hub_id: HubId, dest: Path) -> tuple[str, list[str]]:
    """The one place obsspec talks to the hub for models: the commit hub_id names, and the
    model files of that commit, downloaded into dest (with the hub client's progress bars).
    The file list comes first so that a download cut short is seen as one."""
    from huggingface_hub import HfApi, snapshot_download

    try:
        info = HfApi().model_info(hub_id.repo, revision=hub_id.revision)
        files = [s.rfilename for s in info.siblings or [] if is_model_file(s.rfilename)]
        if not any(name.endswith(".safetensors") for name in files):
            raise ModelError(
                f"{hub_id} has no safetensors weights on the hub (obsspec downloads no other "
                "weight format)",
                hint="convert it to safetensors and pass the local directory",
            )
        snapshot_download(hub_id.repo, revision=info.sha, local_dir=dest, allow_patterns=files)
    except ModelError:
        raise
    except Exception as e:  # the hub client raises httpx's, OSError's and its own errors
        raise download_error(hub_id, e) from e
    return str(info.sha), files


def dtype(path: Path) -> str:
    """The weights' dtype as the model's config.json records it ('' when it does not)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return ""
    return str(config.get("torch_dtype") or config.get("dtype") or "")


def hub_off_error(hub_id: HubId, target: Path) -> ModelError:
    state = "is incomplete or damaged in" if target.exists() else "is not downloaded to"
    return ModelError(
        f"model '{hub_id}' is a Hugging Face Hub id (no directory of that name exists here) "
        f"that {state} {target}, and the hub is off (HF_HUB_OFFLINE=1, obsspec's default)",
        hint=f"turn the hub on: HF_HUB_OFFLINE=0 obsspec models pull {hub_id}; or pull it on "
        f"a machine that reaches the hub and copy {target.name} into {target.parent}; or pass "
        f"a local model directory (e.g. from `hf download {hub_id.repo} --local-dir DIR`)",
    )


def download_error(hub_id: HubId, error: Exception) -> ModelError:
    from huggingface_hub.errors import (
        GatedRepoError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if isinstance(error, OfflineModeIsEnabled):  # turned off under us (the check came first)
        return ModelError(
            f"cannot download {hub_id}: the hub is off (HF_HUB_OFFLINE=1, obsspec's default)",
            hint=f"run with HF_HUB_OFFLINE=0 where the hub is reachable: "
            f"HF_HUB_OFFLINE=0 obsspec models pull {hub_id}",
        )
    if isinstance(error, RevisionNotFoundError):
        return ModelError(f"{hub_id}: the hub has no revision {hub_id.revision!r}")
    if isinstance(error, GatedRepoError):
        return ModelError(
            f"{hub_id} is gated: {first_line}",
            hint="accept its terms on the hub, then log in with `hf auth login` or set HF_TOKEN",
        )
    if isinstance(error, RepositoryNotFoundError):
        return ModelError(
            f"{hub_id}: no such model on the hub (or it is private)",
            hint="check the id's spelling; a private model needs `hf auth login` or HF_TOKEN; "
            "a relative path must exist (an existing directory wins over a hub id)",
        )
    return ModelDownloadError(
        f"could not download {hub_id} from the Hugging Face Hub "
        f"({type(error).__name__}: {first_line})",
        hint="check the network, or HF_ENDPOINT if you use a mirror; "
        "the download resumes where it stopped",
    )


def installed_hub_models(models_dir: Path) -> list[tuple[Path, ModelManifest]]:
    """Every complete hub download under models_dir, sorted by directory name."""
    root = models_dir / HUB_SUBDIR
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.iterdir()):
        manifest = read_manifest(path) if not path.name.startswith(".") else None
        if path.is_dir() and manifest is not None:
            found.append((path, manifest))
    return found
