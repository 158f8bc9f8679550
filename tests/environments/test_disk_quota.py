"""create_limited: a disk quota where the daemon's storage driver takes one, learnt once per
daemon (a fake daemon: this machine's overlay2 on ext4 refuses the option)."""

import docker.errors
import pytest

from obsspec.environments import disk_limit
from obsspec.environments.disk_limit import create_limited


class FakeApi:
    def __init__(self, url: str) -> None:
        self.base_url = url


class FakeClient:
    def __init__(self, url: str) -> None:
        self.api = FakeApi(url)


def creator(refusal: str | None):
    calls = []

    def create(**options):
        calls.append(options)
        if refusal and "storage_opt" in options:
            raise docker.errors.APIError("400", explanation=refusal)
        return "container"

    return create, calls


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch):
    monkeypatch.setattr(disk_limit, "_quota_works", {})


def test_a_driver_that_takes_the_quota_gets_it():
    create, calls = creator(None)
    assert create_limited(FakeClient("xfs"), create, 50) == ("container", True)
    assert calls == [{"storage_opt": {"size": "50M"}}]


def test_a_driver_that_refuses_it_is_asked_once_then_watched():
    refusal = "--storage-opt is supported only for overlay over xfs with 'pquota' mount option"
    create, calls = creator(refusal)
    client = FakeClient("ext4")
    assert create_limited(client, create, 50) == ("container", False)
    assert create_limited(client, create, 50) == ("container", False)
    assert calls == [{"storage_opt": {"size": "50M"}}, {}, {}]  # asked once, never again


def test_another_refusal_is_an_error():
    def broken(**options):
        raise docker.errors.APIError("500", explanation="no space left on device")

    with pytest.raises(docker.errors.APIError):
        create_limited(FakeClient("x"), broken, 50)
