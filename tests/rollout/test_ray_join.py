"""Joining Ray: no cluster is one clear error, and Ray never keeps SIGTERM for itself."""

from __future__ import annotations

import signal

import pytest

from obsspec.errors import ClusterError
from obsspec.rollout.ray_workers import init_ray


def fake_init(*, cluster: bool):
    """ray.init as it behaves with no cluster at the address, or as it takes SIGTERM."""

    def init(**_kwargs) -> None:
        signal.signal(signal.SIGTERM, lambda *_: None)  # what Ray's driver does
        if not cluster:
            raise ConnectionError("Could not find any running Ray instance.\nPlease specify")

    return init


@pytest.mark.parametrize("cluster", [True, False])
def test_init_ray_says_which_address_and_gives_sigterm_back(cluster, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", fake_init(cluster=cluster))

    def ours(*_):
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        if cluster:
            init_ray(None)
        else:
            with pytest.raises(ClusterError) as info:
                init_ray("auto")
            assert str(info.value) == (
                "--ray-address auto: no Ray cluster is running on this machine"
            )
            assert "ray start --head" in info.value.hint
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
