"""An engine's processes run nicer than their parent when asked (obsspec.inference.engine_nice):
every thread, those started before and after; never the parent; the world model's engine by
default on the CPU build. The real engine: a vLLM engine core and worker, started here."""

import asyncio
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from obsspec.inference import engine_nice
from obsspec.inference.engine_nice import world_model_nice
from obsspec.inference.vllm_settings import EngineSettings
from obsspec.rollout.config import RolloutSettings
from obsspec.rollout.engines import engine_settings


def thread_niceness(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(tasks)]


def child(report) -> None:
    """A process as vLLM spawns one: a thread before the plugin runs, one after."""
    before = threading.Thread(target=threading.Event().wait, daemon=True)
    before.start()
    applied = engine_nice.apply_from_environment()
    again = engine_nice.apply_from_environment()  # the plugin and the worker hook both call it
    after = []
    worker = threading.Thread(target=lambda: after.append(os.getpriority(os.PRIO_PROCESS, 0)))
    worker.start()
    worker.join()
    report.send((applied, again, thread_niceness(os.getpid()), after[0]))


def run_child(monkeypatch, value: str | None):
    if value is None:
        monkeypatch.delenv(engine_nice.NICE_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(engine_nice.NICE_VARIABLE, value)
    receive, send = multiprocessing.get_context("spawn").Pipe(duplex=False)
    process = multiprocessing.get_context("spawn").Process(target=child, args=(send,))
    process.start()
    result = receive.recv()
    process.join(30)
    return result


def test_every_thread_of_an_engine_process_runs_nicer(monkeypatch):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    target = min(19, base + 7)
    applied, again, threads, after = run_child(monkeypatch, str(target))
    assert applied == again == target  # the plugin and the worker hook: not raised twice
    assert set(threads) == {target} and len(threads) >= 2
    assert after == target  # a thread started later inherits it


def test_nothing_changes_without_the_variable(monkeypatch):
    base = os.getpriority(os.PRIO_PROCESS, 0)
    applied, _, threads, _ = run_child(monkeypatch, None)
    assert applied is None and set(threads) == {base}


def test_the_process_that_starts_the_engine_keeps_its_priority(monkeypatch):
    """vLLM loads its plugins in the parent too, while the variable is set for the children."""
    monkeypatch.setenv(engine_nice.NICE_VARIABLE, "5")
    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert engine_nice.apply_from_environment() is None
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_the_variable_is_set_only_while_the_engine_spawns(monkeypatch):
    monkeypatch.setenv(engine_nice.NICE_VARIABLE, "3")  # left by someone: 0 must not inherit it
    with engine_nice.nice_variable(0):
        assert engine_nice.NICE_VARIABLE not in os.environ
    with engine_nice.nice_variable(10):  # what the engine's processes run at
        base = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.environ[engine_nice.NICE_VARIABLE] == str(min(19, base + 10))
    assert os.environ[engine_nice.NICE_VARIABLE] == "3"


def test_the_world_model_yields_by_default_on_cpu_only(tmp_path):
    assert world_model_nice(None, "cpu") == engine_nice.CPU_WORLD_MODEL_NICE == 10
    assert world_model_nice(None, "cuda") == 0
    assert world_model_nice(3, "cpu") == world_model_nice(3, "cuda") == 3
    rollout = RolloutSettings.model_validate({"speculation": {"enabled": True}})
    policy = engine_settings(tmp_path, rollout, role="policy", platform="cpu")
    world_model = engine_settings(tmp_path, rollout, role="world_model", platform="cpu")
    assert (policy.nice, world_model.nice) == (0, 10)
    told = RolloutSettings.model_validate({"speculation": {"enabled": True, "wm_nice": 0}})
    assert engine_settings(tmp_path, told, role="world_model", platform="cpu").nice == 0


def test_a_niceness_out_of_range_is_refused():
    with pytest.raises(ValueError, match="wm_nice"):
        RolloutSettings.model_validate({"speculation": {"wm_nice": 20}})
    with pytest.raises(ValueError, match="nice"):
        EngineSettings(model=Path("m"), nice=-1)


@pytest.mark.vllm
def test_a_nice_engine_runs_its_core_and_workers_nicer_and_this_process_not(tiny_model_dir):
    """vLLM's engine core and worker load the plugin (the worker also through obsspec's
    worker extension): all their threads, the compute threads vLLM starts after, run 6
    nicer; the driver, which started them, does not."""
    import psutil

    from obsspec.inference.vllm_local import LocalVLLMEngine

    base = os.getpriority(os.PRIO_PROCESS, 0)
    settings = EngineSettings(model=tiny_model_dir, max_model_len=512, kv_cache_gb=0.1, nice=6)

    def children() -> set[int]:  # a session fixture's engine may run in this process too
        return {p.pid for p in psutil.Process().children(recursive=True)}

    async def niceness() -> tuple[list[int], list[int]]:
        others = children()
        async with LocalVLLMEngine(settings) as engine:
            await engine.generate([1, 2, 3], engine_sampling())
            new = children() - others
            engine_pids = [pid for pid in new if psutil.Process(pid).name().startswith("VLLM")]
            found = [n for pid in engine_pids for n in thread_niceness(pid)]
            return found, engine_pids

    found, engine_pids = asyncio.run(niceness())
    assert len(engine_pids) >= 2, engine_pids  # the engine core and its worker
    assert set(found) == {min(19, base + 6)}, found
    assert os.getpriority(os.PRIO_PROCESS, 0) == base


def engine_sampling():
    from obsspec.inference.base import Sampling

    return Sampling(max_tokens=2)
