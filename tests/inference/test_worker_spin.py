"""The idle spin of vLLM's worker: set where vLLM keeps it, refused where it cannot be, and
chosen per platform (the engine's own answer: tests/inference/test_vllm_local.py); the
engine core's wait for its worker likewise."""

import os

import pytest

from obsspec.errors import EngineError
from obsspec.inference import worker_spin
from obsspec.inference.vllm_settings import EngineSettings, engine_core_spin_s, worker_spin_s


@pytest.fixture
def restored():
    """SpinCondition's default as it was before the test."""
    before = worker_spin.worker_spin()
    yield
    worker_spin.set_worker_spin(before)


def test_setting_the_spin_changes_what_a_new_queue_gets(restored, monkeypatch):
    assert worker_spin.worker_spin() == 1  # vLLM's own, in a process nothing changed
    worker_spin.set_worker_spin(0.25)
    assert worker_spin.worker_spin() == 0.25
    monkeypatch.setenv(worker_spin.SPIN_VARIABLE, "0.005")
    assert worker_spin.apply_from_environment() == 0.005
    assert worker_spin.worker_spin() == 0.005


def test_nothing_is_changed_without_the_variable(restored, monkeypatch):
    monkeypatch.delenv(worker_spin.SPIN_VARIABLE, raising=False)
    assert worker_spin.apply_from_environment() is None
    assert worker_spin.worker_spin() == 1


def test_a_vllm_without_the_parameter_is_refused_not_ignored(monkeypatch):
    class Other:
        def __init__(self, is_reader, context, notify_address, poll_s: float = 1):
            pass

    monkeypatch.setattr(worker_spin, "spin_condition", lambda: Other)
    with pytest.raises(EngineError, match=r"busy_loop_s.*worker_spin_s"):
        worker_spin.set_worker_spin(0.005)


def test_the_variable_is_set_only_while_the_engine_spawns(monkeypatch):
    monkeypatch.delenv(worker_spin.SPIN_VARIABLE, raising=False)
    with worker_spin.spin_variable(0.005):
        assert os.environ[worker_spin.SPIN_VARIABLE] == "0.005"
    assert worker_spin.SPIN_VARIABLE not in os.environ
    with worker_spin.spin_variable(None):
        assert worker_spin.SPIN_VARIABLE not in os.environ


def test_cpu_engines_sleep_after_50_ms_unless_told_and_gpu_engines_keep_vllms(tmp_path):
    default = EngineSettings(model=tmp_path)
    assert worker_spin_s(default, "cpu") == worker_spin.CPU_DEFAULT_SPIN_S == 0.05
    assert worker_spin_s(default, "cuda") is None  # vLLM's own 1 s
    told = EngineSettings(model=tmp_path, worker_spin_s=1.0)
    assert worker_spin_s(told, "cpu") == worker_spin_s(told, "cuda") == 1.0
    with pytest.raises(ValueError, match="worker_spin_s"):
        EngineSettings(model=tmp_path, worker_spin_s=-1)


def test_the_engine_cores_variable_is_applied_in_the_engine_core_only(restored, monkeypatch):
    import multiprocessing

    monkeypatch.setenv(worker_spin.CORE_SPIN_VARIABLE, "0.0")
    assert worker_spin.apply_in_engine_core() is None  # this process is not vLLM's engine core
    assert worker_spin.worker_spin() == 1
    monkeypatch.setattr(multiprocessing.current_process(), "name", "EngineCore_DP0")
    assert worker_spin.apply_in_engine_core() == 0.0
    assert worker_spin.worker_spin() == 0.0
    monkeypatch.delenv(worker_spin.CORE_SPIN_VARIABLE)
    worker_spin.set_worker_spin(1)
    assert worker_spin.apply_in_engine_core() is None  # not asked: vLLM's own
    assert worker_spin.worker_spin() == 1


def test_the_plugin_is_registered_where_vllm_looks_for_it():
    from importlib.metadata import entry_points

    found = {e.value for e in entry_points(group="vllm.general_plugins")}
    assert "obsspec.inference.worker_spin:apply_in_engine_core" in found


def test_both_variables_are_set_while_the_engine_spawns(monkeypatch):
    for name in (worker_spin.SPIN_VARIABLE, worker_spin.CORE_SPIN_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    with worker_spin.spin_variable(0.05, core=0.0):
        assert os.environ[worker_spin.CORE_SPIN_VARIABLE] == "0.0"
        assert os.environ[worker_spin.SPIN_VARIABLE] == "0.05"
    assert worker_spin.CORE_SPIN_VARIABLE not in os.environ


def test_cpu_engine_cores_do_not_spin_unless_told_and_gpu_ones_keep_vllms(tmp_path):
    default = EngineSettings(model=tmp_path)
    assert engine_core_spin_s(default, "cpu") == worker_spin.CPU_ENGINE_CORE_SPIN_S == 0.0
    assert engine_core_spin_s(default, "cuda") is None
    told = EngineSettings(model=tmp_path, engine_core_spin_s=1.0)
    assert engine_core_spin_s(told, "cpu") == engine_core_spin_s(told, "cuda") == 1.0
