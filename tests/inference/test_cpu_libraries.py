"""What a CPU engine's processes start with: binding and preloads, set only while it spawns."""

from __future__ import annotations

import os

import pytest

from obsspec.errors import EngineError
from obsspec.inference import cpu_libraries
from obsspec.inference.cpu_libraries import (
    BIND_VARIABLE,
    PRELOAD_VARIABLE,
    engine_process_env,
    preload_value,
)


def test_binding_and_preloads_are_set_for_the_spawn_only(monkeypatch, tmp_path):
    library = tmp_path / "libfake.so"
    library.write_bytes(b"")
    monkeypatch.setenv(PRELOAD_VARIABLE, "/opt/mine.so")
    monkeypatch.delenv(BIND_VARIABLE, raising=False)
    core = min(os.sched_getaffinity(0))
    with engine_process_env(str(core), [str(library)]) as preloaded:
        assert preloaded == [str(library)]
        assert os.environ[BIND_VARIABLE] == str(core)
        assert os.environ[PRELOAD_VARIABLE] == f"{library}:/opt/mine.so"  # ours first
        os.environ[PRELOAD_VARIABLE] += ":/torch/libgomp.so"  # as vLLM does while starting
    assert os.environ[PRELOAD_VARIABLE] == "/opt/mine.so"
    assert BIND_VARIABLE not in os.environ


def test_none_means_the_recommended_libraries_found_here(monkeypatch, tmp_path):
    (tmp_path / "libiomp5.so").write_bytes(b"")
    monkeypatch.setattr(cpu_libraries, "SYSTEM_LIB_DIRS", (str(tmp_path),))
    monkeypatch.delenv(PRELOAD_VARIABLE, raising=False)
    with engine_process_env(None, None) as preloaded:
        assert [os.path.basename(p) for p in preloaded] == ["libiomp5.so"]  # no tcmalloc here
        assert BIND_VARIABLE not in os.environ
    with engine_process_env(None, []) as preloaded:  # [] : vLLM alone
        assert preloaded == [] and PRELOAD_VARIABLE not in os.environ


def test_a_core_this_process_may_not_use_is_refused():
    outside = max(os.sched_getaffinity(0)) + 1
    refused = pytest.raises(EngineError, match=f"core\\(s\\) \\[{outside}\\]")
    with refused, engine_process_env(str(outside), []):
        pass


def test_preload_value_keeps_order_and_drops_repeats():
    assert preload_value(["/a.so", "/b.so"], "/b.so:/c.so") == "/a.so:/b.so:/c.so"
    assert preload_value([], None) is None
