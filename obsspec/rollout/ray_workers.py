"""Collection workers as Ray actors: each runs `run_worker` with its own engine and sandboxes.

    await run_on_ray(jobs, address, handle)

Without an address a local Ray cluster is started for the run (and stopped after it); with
one (e.g. "auto") the run joins that cluster, and an address where no cluster answers is a
ClusterError within seconds (`init_ray`; Ray itself would retry for minutes). Each actor
takes one GPU when the cluster has a GPU for every worker (and the policy is a model), else a
share of the CPUs. Actors keep their events in a list that the driver drains twice a second,
so progress, the manifest and the failure log stay in the driver. Every actor writes its own
shards into the run directory, which must therefore be on a filesystem all nodes share (as
must the task directories).

Ctrl-C in the driver asks every actor to stop: each cancels its episodes, writes the episodes
it finished as a shard, and removes its containers before the driver returns.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping

from obsspec.errors import ClusterError, EngineError, ObsspecError
from obsspec.rollout.events import Event
from obsspec.rollout.worker import WorkerJob, run_worker

# Settings the CLI edge put in the environment, handed on to the worker processes.
# The driver's environment that reaches every Ray worker: these names, and every name with
# these prefixes (vLLM's and NCCL's settings: VLLM_ATTENTION_BACKEND, NCCL_SOCKET_IFNAME,
# ...). Never CUDA_VISIBLE_DEVICES: Ray sets each actor's own.
FORWARDED_ENV = (
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "HF_ENDPOINT",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS",
    "PYTORCH_CUDA_ALLOC_CONF",
)  # not HF_TOKEN: Ray keeps a runtime environment in its cluster metadata
FORWARDED_PREFIXES = ("VLLM_", "NCCL_", "TORCH_NCCL_")
NOT_FORWARDED = ("CUDA_VISIBLE_DEVICES",)
# OBSSPEC_RAY_LOG_TO_DRIVER=1: the workers' output (the engines' logs) on the driver's stderr;
# by default it stays in Ray's log files (the session's logs/ on each node).
LOG_TO_DRIVER_ENV = "OBSSPEC_RAY_LOG_TO_DRIVER"
DRAIN_EVERY_S = 0.5
CONNECT_TIMEOUT_S = 5.0


class CollectActor:
    def __init__(self, job: WorkerJob) -> None:
        self.job = job
        self.events: list[Event] = []
        self.task: asyncio.Task | None = None

    async def run(self) -> str:
        self.task = asyncio.current_task()
        try:
            await run_worker(self.job, self.events.append)
        except asyncio.CancelledError:
            return "stopped"
        return "done"

    async def drain(self) -> list[Event]:
        events = list(self.events)
        self.events.clear()  # the same list: run_worker holds its append
        return events

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def run_on_ray(
    jobs: list[WorkerJob], address: str | None, handle: Callable[[Event], None]
) -> None:
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        init_ray(address)
    actors = []
    try:
        actor_class = ray.remote(CollectActor).options(**placement(ray, jobs))
        actors = [actor_class.remote(job) for job in jobs]
        await supervise(ray, actors, handle)
    finally:
        for actor in actors:
            ray.kill(actor)
        if started_here:
            ray.shutdown()


def init_ray(address: str | None, **options) -> None:
    """Join the Ray cluster at address, or start one for this process (address None); the
    environment of FORWARDED_ENV goes to every worker. A cluster that does not answer is a
    ClusterError naming the address. Ray's SIGTERM handler (exit at once, engines and
    containers left behind) is replaced by the one the caller had, which stops the run
    cleanly."""
    import ray

    if address is not None:
        check_answers(address)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=os.environ.get(LOG_TO_DRIVER_ENV, "") not in ("", "0"),
            runtime_env={"env_vars": forwarded_env(os.environ)},
            **options,
        )
    except ConnectionError as e:  # e.g. "auto" and no cluster runs on this machine
        if address is None:  # Ray's own start failed (or RAY_ADDRESS points nowhere)
            raise ClusterError(
                f"Ray could not start a cluster for this run: {first_line(e)}"
            ) from e
        raise no_cluster(address, first_line(e)) from e
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What of the driver's environment every worker gets (FORWARDED_ENV, _PREFIXES)."""
    return {
        name: value
        for name, value in environ.items()
        if (name in FORWARDED_ENV or name.startswith(FORWARDED_PREFIXES))
        and name not in NOT_FORWARDED
    }


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def check_answers(address: str) -> None:
    """Something listens at address's host:port (a TCP connection, CONNECT_TIMEOUT_S at most);
    "auto" and "local" are left to Ray, which answers for them at once."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(
            f"Ray address {address!r} is not host:port",
            hint="e.g. --ray-address 10.0.0.5:6379, or 'auto' for the cluster on this machine",
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise no_cluster(address, e.strerror or str(e) or type(e).__name__) from e


def no_cluster(address: str, why: str) -> ClusterError:
    if address in ("auto", "local"):
        return ClusterError(
            f"--ray-address {address}: no Ray cluster is running on this machine",
            hint="start one (`ray start --head`), or drop --ray-address to start a cluster "
            "for this run only",
        )
    port = address.rpartition(":")[2]
    return ClusterError(
        f"no Ray cluster answers at {address} ({why})",
        hint=f"start one there (`ray start --head --port {port}` on that machine), or drop "
        "--ray-address to start a cluster for this run only",
    )


def placement(ray, jobs: list[WorkerJob]) -> dict:
    """Resources per actor: a GPU each when there are enough, else an equal share of CPUs."""
    resources = ray.cluster_resources()
    if not jobs[0].config.is_oracle and resources.get("GPU", 0) >= len(jobs):
        return {"num_gpus": 1, "num_cpus": 1}
    cpus = resources.get("CPU", 1)
    return {"num_cpus": min(1.0, cpus / len(jobs))}


async def supervise(ray, actors: list, handle: Callable[[Event], None]) -> None:
    """Relay events until every actor's run ends. When one fails, or the driver is cancelled,
    the others are stopped cleanly (finished episodes written, containers removed) first."""
    runs = [actor.run.remote() for actor in actors]
    try:
        pending = list(runs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
            await relay(actors, handle)
            for run in finished:
                await result_of(ray, run)
            if pending:
                await asyncio.sleep(DRAIN_EVERY_S)
    except BaseException:
        await asyncio.gather(*(actor.stop.remote() for actor in actors), return_exceptions=True)
        await asyncio.gather(*runs, return_exceptions=True)
        raise
    finally:
        await relay(actors, handle)


async def relay(actors: list, handle: Callable[[Event], None]) -> None:
    batches = await asyncio.gather(
        *(actor.drain.remote() for actor in actors), return_exceptions=True
    )
    for batch in batches:
        if isinstance(batch, list):
            for event in batch:
                handle(event)


async def result_of(ray, run) -> str:
    """An actor's result; its failure re-raised as the obsspec error it was, when it was one."""
    return await actor_result(
        ray,
        run,
        failed=lambda cause: EngineError(f"a collection worker failed: {cause}"),
        died=lambda error: EngineError(f"a collection worker died: {error}"),
    )


async def actor_result(
    ray,
    work,
    *,
    failed: Callable[[BaseException], ObsspecError],
    died: Callable[[BaseException], ObsspecError],
):
    """Await Ray work. An obsspec error raised inside an actor comes back as itself (Ray wraps
    it); any other failure inside becomes failed(cause), a dead actor died(error)."""
    try:
        return await work
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, ObsspecError):
            raise cause from None
        raise failed(cause or e) from e
    except ray.exceptions.RayActorError as e:
        raise died(e) from e
