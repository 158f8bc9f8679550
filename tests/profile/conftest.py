"""Capabilities of the profile tests: a headless Chromium for the `browser` tests."""

from __future__ import annotations

import pytest

from obsspec.profile.browser import find_chromium
from tests.conftest import missing


@pytest.fixture(scope="session")
def chromium(request) -> str:
    """The path of a Chromium binary; skips (fails under --require-capabilities) without one."""
    path = find_chromium()
    if path is None:
        missing(request, "chromium is not installed (run scripts/ensure-chromium.sh)")
    return path
