"""An engine's processes run nicer than their parent when asked (obsspec.inference.engine_nice):
every thread, those running and those started after; never the parent; the world model's
engine by default on the CPU build. The real engine: a vLLM engine core and worker."""

import asyncio
import multiprocessing
import os
import threading
import time
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


def child(ready, go, report) -> None:
    """A process as an engine's: threads already running when it is reniced, one after."""
    for _ in range(2):
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    ready.send(True)
    go.recv()  # reniced meanwhile
    after = []
    worker = threading.Thread(target=lambda: after.append(os.getpriority(os.PRIO_PROCESS, 0)))
    worker.start()
    worker.join()
    report.send((thread_niceness(os.getpid()), after[0]))


def test_every_thread_of_an_engine_process_runs_nicer_and_new_ones_inherit_it():
    spawn = multiprocessing.get_context("spawn")
    (ready_r, ready_w), (go_r, go_w), (report_r, report_w) = (spawn.Pipe(False) for _ in "abc")
    process = spawn.Process(target=child, args=(ready_w, go_r, report_w))
    process.start()
    ready_r.recv()
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert engine_nice.renice_processes({process.pid, 2**22 + 7}, 7) == min(19, base + 7)
    assert engine_nice.renice_processes({process.pid}, 7) == min(19, base + 7)  # not twice
    go_w.send(True)
    threads, after = report_r.recv()
    process.join(30)
    assert set(threads) == {min(19, base + 7)} and len(threads) >= 3, threads
    assert after == min(19, base + 7)  # a thread started later inherits it
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the caller keeps its own


def test_nothing_is_reniced_at_zero():
    spawn = multiprocessing.get_context("spawn")
    process = spawn.Process(target=time.sleep, args=(30,), daemon=True)
    process.start()
    try:
        before = thread_niceness(process.pid)
        engine_nice.renice_processes({process.pid}, 0)
        assert thread_niceness(process.pid) == before
    finally:
        process.kill()


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
    """Once ready, the engine's core and worker run 6 nicer, every thread, the compute threads
    among them; the driver, which started them, does not."""
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
