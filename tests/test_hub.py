"""`--push-to-hub` where no hub can be used: one clear HubError, never a silent no-op."""

from __future__ import annotations

import socket

import pytest
from huggingface_hub import constants

from obsspec.errors import HubError
from obsspec.hub import check_hub, push_file


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Offline mode off, no stored token: what a user with HF_HUB_OFFLINE=0 has."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return f"http://127.0.0.1:{closed_port()}"


def test_offline_mode_is_named_with_the_fix(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubError, match=r"--push-to-hub me/data: .*offline mode") as e:
        check_hub("me/data")
    assert "HF_HUB_OFFLINE=0" in e.value.hint and e.value.retryable


def test_an_unreachable_hub_is_a_clear_error(online, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    with pytest.raises(HubError, match=r"the hub cannot be reached \(\w+: .*refused"):
        check_hub("me/data", endpoint=online)
    path = tmp_path / "train.jsonl"
    path.write_text("{}\n")
    with pytest.raises(HubError, match="cannot be reached"):
        push_file(path, "me/data", endpoint=online)


def test_no_token_and_a_bad_repo_id(online):
    with pytest.raises(HubError, match="no Hugging Face token") as e:
        check_hub("me/data", endpoint=online)
    assert "HF_TOKEN" in e.value.hint
    with pytest.raises(HubError, match="not a repository id"):
        check_hub("not a repo", endpoint=online)


def test_a_folder_push_to_an_unreachable_hub_is_a_clear_error(online, monkeypatch, tmp_path):
    from obsspec.hub import push_folder

    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(HubError, match="cannot be reached"):
        push_folder(tmp_path / "model", "me/wm", repo_type="model", endpoint=online)


def test_every_command_that_pushes_refuses_an_offline_hub_before_any_work(tmp_path):
    from tests.cli.test_cli import obsspec

    commands = {
        "collect": ["collect", "--tasks", str(tmp_path), "--policy", "oracle"],
        "train-wm": ["train-wm", "--data", str(tmp_path)],
        "sft": ["sft", "--data", str(tmp_path)],
    }
    for name, args in commands.items():
        out = tmp_path / name
        result = obsspec(*args, "--out", str(out), "--push-to-hub", "me/repo")
        assert result.returncode == 1, (name, result.stderr)
        assert "--push-to-hub me/repo" in result.stderr and "offline mode" in result.stderr
        assert not out.exists(), name  # nothing was started
    result = obsspec(
        "train-wm", "--eval-only", "--model", "m", "--data", "d", "--push-to-hub", "me/r"
    )
    assert result.returncode != 0 and "--eval-only" in result.stderr
