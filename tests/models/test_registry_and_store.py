from pathlib import Path

import pytest

from obsspec.errors import ModelError
from obsspec.models.pull import remove_leftovers, swap_into_place
from obsspec.models.registry import KNOWN_MODELS, resolve_model
from obsspec.models.store import (
    build_manifest,
    installed_models,
    read_manifest,
    verify_files,
    write_manifest,
)


def fake_model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"weights")
    (path / "tokenizer.json").write_text("{}")
    return path


def test_unknown_name_lists_known_models(tmp_path):
    with pytest.raises(ModelError) as info:
        resolve_model("no-such-model", tmp_path)
    for name in KNOWN_MODELS:
        assert name in str(info.value)


def test_known_but_not_pulled_hints_at_pull(tmp_path):
    with pytest.raises(ModelError) as info:
        resolve_model("smollm2-135m-instruct", tmp_path)
    assert "obsspec models pull smollm2-135m-instruct" in info.value.hint


def test_local_directory_paths_are_models(tmp_path):
    model = fake_model_dir(tmp_path / "mine")
    assert resolve_model(str(model), tmp_path / "cache") == model
    (model / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="no weights"):
        resolve_model(str(model), tmp_path / "cache")
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "absent"), tmp_path / "cache")


def test_manifest_detects_resized_and_altered_files(tmp_path):
    model = fake_model_dir(tmp_path / "models" / "m")
    write_manifest(model, build_manifest(model, "m", "test", "0" * 64, "float32"))
    manifest = read_manifest(model)
    assert manifest is not None and set(manifest.files) == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    assert verify_files(model, manifest, full=True) == []

    (model / "model.safetensors").write_bytes(b"WEIGHTS")  # same size, other bytes
    assert verify_files(model, manifest, full=False) == []
    assert "model.safetensors does not match" in verify_files(model, manifest, full=True)[0]
    (model / "tokenizer.json").write_text("{ }")
    assert "tokenizer.json has size" in verify_files(model, manifest, full=False)[0]
    (model / "config.json").unlink()
    assert "config.json is missing" in verify_files(model, manifest, full=False)
    assert [p.name for p, _ in installed_models(tmp_path / "models")] == ["m"]


def test_unreadable_manifest_is_no_manifest(tmp_path):
    model = fake_model_dir(tmp_path / "m")
    (model / "obsspec-model.json").write_text("{not json")
    assert read_manifest(model) is None


def test_swap_replaces_whole_directory_and_leftovers_are_cleaned(tmp_path):
    target = fake_model_dir(tmp_path / "m")
    built = tmp_path / ".m.tmp-1" / "model"
    built.mkdir(parents=True)
    (built / "new").write_text("new")
    swap_into_place(built, target)
    assert sorted(p.name for p in target.iterdir()) == ["new"]
    (tmp_path / ".m.old").mkdir()
    remove_leftovers(tmp_path, "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_pull_of_a_local_directory_only_checks_it(tmp_path):
    from obsspec.models.pull import pull_model

    model = fake_model_dir(tmp_path / "mine")
    result = pull_model(str(model), tmp_path / "cache")
    assert (result.action, result.path) == ("local", model)
    assert not (tmp_path / "cache").exists()
    with pytest.raises(ModelError, match=r"no config\.json"):
        pull_model(str(tmp_path), tmp_path / "cache")
