"""--config (TOML or YAML) and --set on the command line, and shell completion: in process,
each command stopping at its config (obsspec.config and obsspec.overrides test the rest)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from obsspec.cli.app import app
from obsspec.cli.common import json_stdout
from obsspec.errors import ConfigError


@pytest.fixture
def run(monkeypatch):
    """obsspec ARGS in this process; --json's state is put back afterwards."""
    monkeypatch.setattr(json_stdout, "requested", False)
    monkeypatch.setattr(json_stdout, "emitted", False)
    return lambda *args, **kw: CliRunner().invoke(app, list(args), prog_name="obsspec", **kw)


@pytest.mark.parametrize(
    ("flags", "entry", "message"),
    [
        (["--max-turns", "3"], "limits.max_turns=4",
         "--set limits.max_turns=4 and --max-turns both set [collect] limits.max_turns"),
        (["--speculate"], "speculation={enabled = false}",
         "--set speculation={enabled = false} and --speculate both set [collect] "
         "speculation.enabled"),
        (["-c", "2"], "concurrency=3",
         "--set concurrency=3 and --concurrency both set [collect] concurrency"),
    ],
)  # fmt: skip
def test_a_key_given_by_set_and_by_its_flag_is_an_error_naming_both(run, flags, entry, message):
    result = run("collect", "--tasks", "t", "--out", "o", *flags, "--set", entry)
    assert result.exit_code == 1 and isinstance(result.exception, ConfigError)
    assert str(result.exception) == f"{message}: give one of them"


def test_an_unknown_set_key_names_the_entry(run):
    result = run("collect", "--tasks", "t", "--out", "o", "--set", "limits.max_turnz=4")
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception).startswith(
        "--set limits.max_turnz=4: unknown key 'limits.max_turnz'; the keys of "
        "[collect.limits]: max_turns, "
    )


@pytest.mark.parametrize("entry", ["grpo.lr", "=1e-6", "grpo..lr=1"])
def test_a_malformed_set_is_a_usage_error_naming_the_flag(run, entry):
    result = run("models", "list", "--set", entry)
    assert result.exit_code == 2
    assert "Invalid value for '--set'" in result.output and repr(entry) in result.output


def test_a_yaml_config_then_set_then_the_flag(run, tmp_path):
    config = tmp_path / "obsspec.yaml"
    config.write_text(f"paths:\n  cache_dir: {tmp_path / 'file'}\n")

    def cache_dir(*args: str) -> str:
        result = run("models", "list", "--json", "--config", str(config), *args)
        assert result.exit_code == 0, result.output
        json_stdout.emitted = False
        return json.loads(result.stdout)["cache_dir"]

    assert cache_dir() == str(tmp_path / "file")
    assert cache_dir("--set", f"paths.cache_dir={tmp_path / 'set'}") == str(tmp_path / "set")
    assert cache_dir("--cache-dir", str(tmp_path / "flag")) == str(tmp_path / "flag")
    both = run("models", "list", "--cache-dir", "a", "--set", "paths.cache_dir=b")
    assert str(both.exception).startswith("--set paths.cache_dir=b and --cache-dir both set")


def test_completion_scripts_and_completions(run, monkeypatch):
    source = run(env={"_OBSSPEC_COMPLETE": "source_bash"})  # eval "$(...)" in ~/.bashrc
    assert source.exit_code == 0
    assert "complete -o default -F _obsspec_completion obsspec" in source.stdout
    typed = {"COMP_WORDS": "obsspec rl --se", "COMP_CWORD": "2"}
    completed = run(env={"_OBSSPEC_COMPLETE": "complete_bash", **typed})
    assert completed.stdout.split() == ["--seed", "--set"]
    # --show-completion detects the shell; named here, as where no parent shell is found
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    shown = run("--show-completion", "bash")
    assert shown.exit_code == 0 and "_obsspec_completion" in shown.stdout
