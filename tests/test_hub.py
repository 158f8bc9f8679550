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
