"""Hub ids as models. No hub is reachable here: the download itself (download_snapshot, the
one call into the hub) is replaced by a fake that writes a model's files, and what is around
it is tested for real: the offline refusal, cache hits, path-before-id precedence, revision
naming, incomplete downloads, pull and list. The real hub client is run only to see its
failures become ModelErrors."""

import socket

import pytest
from huggingface_hub import constants

from obsspec.errors import ModelDownloadError, ModelError
from obsspec.models import hub_models
from obsspec.models.hub_models import HubId, is_model_file, parse_hub_id
from obsspec.models.listing import model_rows
from obsspec.models.pull import pull_model
from obsspec.models.registry import hub_id_of, resolve_model
from obsspec.models.store import read_manifest

FILES = {"config.json": "{}", "model.safetensors": "weights", "tokenizer.json": "{}"}


class FakeHub:
    """Stands in for download_snapshot: writes FILES (less `withhold`) into dest."""

    def __init__(self) -> None:
        self.calls: list[HubId] = []
        self.withhold: set[str] = set()

    def __call__(self, hub_id: HubId, dest):
        self.calls.append(hub_id)
        dest.mkdir(parents=True, exist_ok=True)
        for name, text in FILES.items():
            if name not in self.withhold:
                (dest / name).write_text(text)
        return "c0ffee" * 6 + "abcd", list(FILES)


@pytest.fixture
def hub(monkeypatch) -> FakeHub:
    """The hub turned on (as HF_HUB_OFFLINE=0 would) and answered by a FakeHub."""
    fake = FakeHub()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_models, "download_snapshot", fake)
    return fake


def test_hub_ids_and_their_directory_names():
    assert parse_hub_id("Qwen/Qwen3-8B") == HubId("Qwen/Qwen3-8B")
    assert parse_hub_id("Qwen/Qwen3-8B@main").dir_name == "Qwen--Qwen3-8B@main"
    assert parse_hub_id("a/b@refs/pr/1") == HubId("a/b", "refs/pr/1")
    assert parse_hub_id("a/b@refs/pr/1").dir_name == "a--b@refs--pr--1"
    for not_an_id in ("a/b/c", "a--b/c", "a/b..c", ".a/b", "plain", "a/b.git", "a/b@", "a/b@x y"):
        assert parse_hub_id(not_an_id) is None, not_an_id
    assert hub_id_of("smollm2-135m-instruct") is None
    assert hub_id_of("./a/b") is None and hub_id_of("/a/b") is None and hub_id_of("~/a") is None


def test_only_the_files_a_model_needs_are_fetched():
    wanted = ["config.json", "model-00001-of-00002.safetensors", "tokenizer_config.json"]
    wanted += ["generation_config.json", "chat_template.jinja", "merges.txt", "vocab.json"]
    unwanted = ["pytorch_model.bin", "README.md", "onnx/model.safetensors", "original/x.json"]
    assert [name for name in wanted + unwanted if is_model_file(name)] == wanted


def test_offline_an_id_not_downloaded_is_refused_with_how_to_turn_the_hub_on(tmp_path):
    assert constants.is_offline_mode()  # the tests run with HF_HUB_OFFLINE=1, the real client
    with pytest.raises(ModelError) as info:
        resolve_model("owner/model", tmp_path / "models")
    assert "hub is off" in str(info.value) and "HF_HUB_OFFLINE=0" in info.value.hint
    assert not (tmp_path / "models" / "hub").exists()


def test_a_download_is_made_once_then_found_offline(tmp_path, hub, monkeypatch):
    models = tmp_path / "models"
    path = resolve_model("owner/model", models)
    assert path == models / "hub" / "owner--model"
    assert sorted(p.name for p in path.iterdir()) == sorted([*FILES, "obsspec-model.json"])
    manifest = read_manifest(path)
    assert manifest.name == "owner/model" and manifest.source.startswith("hf:owner/model@c0ffee")
    assert resolve_model("owner/model", models) == path
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert resolve_model("owner/model", models) == path
    assert hub.calls == [HubId("owner/model")]


def test_a_revision_is_its_own_download(tmp_path, hub):
    path = resolve_model("owner/model@v1.0", tmp_path)
    assert path.name == "owner--model@v1.0"
    assert hub.calls == [HubId("owner/model", "v1.0")]


def test_an_existing_directory_wins_over_a_hub_id(tmp_path, hub, monkeypatch):
    local = tmp_path / "owner" / "model"
    local.mkdir(parents=True)
    for name, text in FILES.items():
        (local / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    assert resolve_model("owner/model", tmp_path / "models") == local.relative_to(tmp_path)
    assert hub_id_of("owner/model") is None
    assert hub.calls == []


def test_an_incomplete_download_is_not_a_model_and_resumes_in_place(tmp_path, hub):
    hub.withhold = {"model.safetensors"}
    with pytest.raises(ModelDownloadError, match=r"model\.safetensors missing"):
        resolve_model("owner/model", tmp_path)
    assert not (tmp_path / "hub" / "owner--model").exists()
    assert (tmp_path / "hub" / ".owner--model.partial" / "config.json").is_file()
    hub.withhold = set()
    assert resolve_model("owner/model", tmp_path).name == "owner--model"
    assert not (tmp_path / "hub" / ".owner--model.partial").exists()


def test_pull_downloads_verifies_and_repairs_and_list_shows_it(tmp_path, hub):
    first = pull_model("owner/model", tmp_path)
    assert (first.name, first.action) == ("owner/model", "downloaded")
    assert pull_model("owner/model", tmp_path).action == "present"
    (first.path / "model.safetensors").write_text("WEIGHTS")  # same size, other bytes
    assert pull_model("owner/model", tmp_path).action == "repaired"
    assert len(hub.calls) == 2
    [row] = [row for row in model_rows(tmp_path) if not row["known"]]
    assert (row["name"], row["status"], row["path"]) == ("owner/model", "pulled", str(first.path))
    assert row["source"].startswith("hf:owner/model@")


def test_the_real_hub_client_failing_is_a_model_error(tmp_path, monkeypatch):
    """Offline: the hub client's own refusal; online with nothing listening: a retryable one."""
    target = tmp_path / "dest"
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE=1"):
        hub_models.download_snapshot(HubId("owner/model"), target)
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(ModelDownloadError, match="could not download owner/model") as info:
        resolve_model("owner/model", tmp_path)
    assert info.value.retryable
