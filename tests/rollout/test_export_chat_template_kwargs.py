"""A run collected with chat-template kwargs (Qwen3's enable_thinking=false, on a thinking
template) is read back with them: export re-encodes its conversations and training data
loading checks its ids with the kwargs its manifest records, and fails without them."""

import json

import pytest

from obsspec.agent.episode import EpisodeLimits, context_builder
from obsspec.errors import ConfigError, ObsspecError
from obsspec.rollout.export import ExportFormat, ExportRequest, export_run
from obsspec.runs import load_runs
from tests.agent.test_context import NO_THINKING, THINKING_TEMPLATE, with_template
from tests.rollout.test_export import MD, standard_rows, write_run


@pytest.fixture(scope="module")
def thinking(tokenizer):
    return with_template(tokenizer, THINKING_TEMPLATE)


@pytest.fixture(scope="module")
def run_dir(thinking, tmp_path_factory):
    builder = context_builder(thinking, EpisodeLimits(chat_template_kwargs=NO_THINKING))
    path = write_run(tmp_path_factory.mktemp("runs") / "run", standard_rows(builder, MD), MD)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["identity"]["limits"]["chat_template_kwargs"] = NO_THINKING
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def without_kwargs(run, tmp_path):
    """The same run, its manifest not saying which kwargs made it."""
    copy = tmp_path / "forgot"
    copy.mkdir()
    (copy / "data").symlink_to(run / "data")
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["identity"]["limits"]["chat_template_kwargs"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_export_re_encodes_with_the_runs_kwargs(thinking, run_dir, tmp_path):
    out = tmp_path / "out.jsonl"
    report = export_run(ExportRequest(run_dir, ExportFormat.openai_jsonl, out), thinking)
    assert (report.exported, report.unverified) == (3, 0)
    assert report.as_dict()["chat_template_kwargs"] == NO_THINKING
    forgot = without_kwargs(run_dir, tmp_path)
    with pytest.raises(ObsspecError, match="do not re-encode"):
        export_run(ExportRequest(forgot, ExportFormat.openai_jsonl, tmp_path / "o.jsonl"), thinking)


def test_training_data_is_checked_with_the_runs_kwargs(thinking, run_dir, tmp_path):
    rows, fmt = load_runs([run_dir], thinking, "--data", "the world model's")
    assert (len(rows), fmt) == (4, "markdown")
    with pytest.raises(ConfigError, match="tokenizer"):
        load_runs([without_kwargs(run_dir, tmp_path)], thinking, "--data", "the world model's")


def test_runs_rendered_with_different_kwargs_are_not_mixed(thinking, run_dir, tmp_path):
    forgot = without_kwargs(run_dir, tmp_path)
    with pytest.raises(ConfigError, match="one prompt style") as caught:
        load_runs([run_dir, forgot], thinking, "--data", "the world model's")
    assert "enable_thinking" in str(caught.value)
