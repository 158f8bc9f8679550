"""Joining Ray: no cluster is one clear error, and Ray never keeps SIGTERM for itself."""

from __future__ import annotations

import signal

import pytest

from obsspec.errors import ClusterUnavailable
from obsspec.rollout.ray_workers import join_ray


class FakeRay:
    """ray.init as it behaves with no cluster at the address, or as it takes SIGTERM."""

    def __init__(self, *, cluster: bool) -> None:
        self.cluster = cluster

    def init(self, **_kwargs) -> None:
        signal.signal(signal.SIGTERM, lambda *_: None)  # what Ray's driver does
        if not self.cluster:
            raise ConnectionError("Could not find any running Ray instance.\nPlease specify")


@pytest.mark.parametrize("cluster", [True, False])
def test_join_ray_says_which_address_and_gives_sigterm_back(cluster):
    def ours(*_):
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        if cluster:
            join_ray(FakeRay(cluster=True), None)
        else:
            with pytest.raises(ClusterUnavailable) as info:
                join_ray(FakeRay(cluster=False), "auto")
            assert str(info.value) == (
                "--ray-address auto: no Ray cluster answers there "
                "(Could not find any running Ray instance.)"
            )
            assert "ray start --head" in info.value.hint
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
