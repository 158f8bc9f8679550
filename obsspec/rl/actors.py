"""The roles of an RL run as Ray actors, and where they are placed.

    async with ray_session(config) as ray:   # Ray started (or joined), its GPUs checked
    roles = await Roles.start(ray, config, models_dir, tasks, restore)
    roles.workers        rollout workers: a policy engine, a world-model engine, sandboxes
    roles.trainer_ranks  the policy trainer (torch): one process, or FSDP2 ranks acting as one
                         (`await roles.on_trainer("update", ...)` calls every rank)
    roles.wm_trainer     the world-model co-trainer (None when co-training is off)

    roles.where()        which node each actor runs on (one line, for the run's output)
    await roles.stop(ray)  engines and containers closed, every actor killed

Every role runs in a Ray placement group reserved first (obsspec.rl.placement): a trainer
whose ranks cannot all be placed, or a role no node can hold, is a ClusterError after
`placement_timeout_s`, never a wait for ever. On a CPU machine every role shares the CPUs
(each bundle holds a token share, so any number fit); on a cluster each takes the GPUs
`placement` gives it. The trainers run torch on all the node's cores: the policy trainer
while the engines are idle; the co-trainer too when co-training is synchronous, and during
the next rollout when it runs one step behind (obsspec.rl.cotrain_overlap).

A sharded policy trainer's ranks meet at a TCPStore that rank 0 opens on a port the OS picks
and holds until the process group ends, so no other process can take the port between the
moment it is named and the moment the ranks connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from obsspec.environments.tasks.model import Task
from obsspec.errors import ClusterError
from obsspec.rl.config import RLConfig
from obsspec.rl.placement import ROLLOUT, TRAINER, WM_TRAINER, Placed, plan_groups, reserve
from obsspec.rl.rollout import Restore, RolloutWorker
from obsspec.rollout.ray_workers import init_ray

STORE_TIMEOUT_S = 300  # ranks wait this long for each other at the rendezvous


class OnANode:
    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id)."""
        import ray

        return ray.get_runtime_context().get_node_id()


class RolloutActor(OnANode):
    def __init__(self, config: RLConfig, models_dir: Path, tasks: list[Task], index: int):
        self.worker = RolloutWorker(config, models_dir, tasks, index)

    async def start(self, restore: Restore) -> dict[str, str]:
        return await self.worker.start(restore)

    async def rollout(self, specs, speculate: bool) -> list:
        return await self.worker.rollout(specs, speculate=speculate)

    async def progress(self):
        return self.worker.progress

    async def placement(self) -> dict:
        return self.worker.placement()

    async def load_policy(self, weights: Path, version: int) -> None:
        await self.worker.load_policy(weights, version)

    async def load_world_model(self, weights: Path) -> None:
        await self.worker.load_world_model(weights)

    async def load_policy_buckets(self, refs: list, version: int) -> None:
        await self.worker.load_policy_buckets(refs, version)

    async def load_world_model_buckets(self, refs: list) -> None:
        await self.worker.load_world_model_buckets(refs)

    async def score_policy(self, token_ids: list[int]) -> list[float | None]:
        return await self.worker.score_policy(token_ids)

    async def policy_checksums(self) -> dict | None:
        return await self.worker.policy_checksums()

    async def close(self) -> None:
        await self.worker.close()

    async def engine_processes(self) -> list[tuple[str, int]]:
        """(host, pid) of the engine processes this actor spawned: if the actor is killed,
        vLLM's engine processes outlive it, and the driver ends them."""
        import socket

        import psutil

        host = socket.gethostname()
        return [(host, child.pid) for child in psutil.Process().children(recursive=True)]


def use_all_cores(cpus: int | None, share: int = 1) -> None:
    """Ray limits a worker's torch threads to its CPU reservation; trainers want the node
    (`share` ranks of one trainer split it)."""
    import torch

    torch.set_num_threads(max(1, (cpus or os.cpu_count() or 1) // share))


class PolicyTrainerActor(OnANode):
    """One rank of the policy trainer. With several ranks, rank 0 opens the rendezvous store
    and every rank joins the process group in `start` (they must start together)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.store = None  # rank 0's TCPStore, held for the process group's life

    def rendezvous(self) -> str:
        """host:port of the process group's store, opened here (rank 0) on a port the OS
        picks; the store keeps listening on it, so no other process can take it."""
        import ray
        from torch.distributed import TCPStore

        host = ray.util.get_node_ip_address()
        self.store = TCPStore(
            host, 0, self.world, is_master=True, timeout=timedelta(seconds=STORE_TIMEOUT_S),
            wait_for_workers=False,
        )  # fmt: skip
        return f"{host}:{self.store.port}"

    def join(self, master: str) -> None:
        """Join the process group at rank 0's store (rank 0 uses the one it opened)."""
        import torch
        import torch.distributed as dist
        from torch.distributed import TCPStore

        store = self.store
        if store is None:
            host, port = master.rsplit(":", 1)
            store = TCPStore(
                host, int(port), self.world, is_master=False,
                timeout=timedelta(seconds=STORE_TIMEOUT_S),
            )  # fmt: skip
        if torch.cuda.is_available():
            torch.cuda.set_device(0)  # Ray shows each rank only its own GPU
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=self.world)

    def start(self, base: Path, config: RLConfig, restore: Path | None, master: str | None):
        from obsspec.rl.policy_trainer import PolicyTrainer

        use_all_cores(config.placement.num_cpus, share=self.world)
        if self.world > 1:
            if master is None:
                raise ClusterError(
                    f"policy-trainer rank {self.rank} of {self.world} was started without "
                    "rank 0's rendezvous address",
                    hint="start the ranks through Roles.start, which asks rank 0 first",
                )
            self.join(master)
        self.trainer = PolicyTrainer(base, config.grpo_settings, config.seed)
        if restore is not None:
            self.trainer.restore(restore)

    def update(self, episodes, step: int) -> dict:
        return self.trainer.update(episodes, step)

    def save_weights(self, out: Path) -> Path:
        return self.trainer.save_weights(out)

    def weight_refs(self, bucket_mb: int) -> list:
        """The weights in bf16 buckets in Ray's object store (rank 0's; every rank calls);
        their checksums are kept for the check (sent_checksums)."""
        from obsspec.rl.weight_sync import trainer_buckets

        refs, self.sent = trainer_buckets(self.trainer, bucket_mb)
        return refs

    def sent_checksums(self) -> dict | None:
        """The checksums of the weights weight_refs last sent (rank 0's; None elsewhere)."""
        return getattr(self, "sent", None)

    def probe_logprobs(self, token_ids: list[int]) -> list[float]:
        from obsspec.rl.weight_sync import probe_logprobs

        return probe_logprobs(self.trainer, token_ids)

    def save(self, folder: Path) -> None:
        self.trainer.save(folder)


class CoTrainerActor(OnANode):
    def __init__(self, base: Path, config: RLConfig, restore: Path | None) -> None:
        from obsspec.world_model.cotrain import CoTrainer

        use_all_cores(config.placement.num_cpus)
        fmt = config.limits.action_format
        self.trainer = CoTrainer(base, config.cotrain_settings, fmt, config.seed)
        if restore is not None:
            self.trainer.restore(restore)

    def update(self, rows: list[dict]) -> dict:
        return self.trainer.update(rows)

    def save_weights(self, out: Path) -> Path:
        return self.trainer.save_weights(out)

    def weight_refs(self, bucket_mb: int) -> list:
        from obsspec.rl.weight_sync import trainer_buckets

        return trainer_buckets(self.trainer, bucket_mb)[0]

    def save(self, folder: Path) -> None:
        self.trainer.save(folder)


def local_gpus() -> int:
    """GPUs a Ray cluster started on this machine would have (Ray counts the visible CUDA
    devices alike)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(config: RLConfig, have: float) -> None:
    """The cheap first refusal: the placement's GPUs fit in HAVE (the cluster's in all, or
    this machine's before a local cluster is started for nothing). Whether each role fits on
    some node is for its placement group to tell (obsspec.rl.placement)."""
    wanted = config.placement.gpus_requested
    if wanted > 0 and have < wanted:
        p = config.placement
        where = p.ray_address or "this machine"
        raise ClusterError(
            f"placement asks for {wanted:g} GPUs (rollout_workers {p.rollout_workers} x "
            f"rollout_gpus {p.rollout_gpus:g} + trainer_gpus {p.trainer_gpus:g} + "
            f"wm_trainer_gpus {p.wm_trainer_gpus:g}), but the Ray cluster ({where}) has {have:g}",
            hint="to run on CPUs set rollout_gpus = 0, trainer_gpus = 0 and wm_trainer_gpus = 0 "
            "in [rl.placement]; or join a cluster with GPUs (--ray-address)",
        )


@contextlib.asynccontextmanager
async def ray_session(config: RLConfig):
    """Ray for the run: a local cluster started here (and shut down after), or the one at
    `ray_address`; either way checked to have the GPUs the placement asks for."""
    import ray

    started_here = not ray.is_initialized()
    if started_here and config.placement.ray_address is None:
        check_gpus(config, local_gpus())  # before starting a cluster that cannot fit the run
    if started_here:
        address = config.placement.ray_address
        previous = signal.getsignal(signal.SIGTERM)
        init_ray(address, num_cpus=None if address else config.placement.num_cpus)
        # Ray's driver handler exits on SIGTERM at once, leaving engines and containers
        # behind; the caller's (the CLI cancels the run: everything is stopped) comes back.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, previous)
    try:
        check_gpus(config, ray.cluster_resources().get("GPU", 0))
        yield ray
    finally:
        if started_here:
            ray.shutdown()


@dataclass
class Roles:
    workers: list
    trainer_ranks: list
    wm_trainer: object | None
    engine_processes: list[tuple[str, int]] = field(default_factory=list)
    placed: Placed = field(default_factory=Placed)
    nodes: dict[str, str] = field(default_factory=dict)  # "rollout worker 0" -> node id
    cores: list[dict] = field(default_factory=list)  # each rollout worker's CorePlan.as_dict()

    @classmethod
    async def start(
        cls,
        ray,
        config: RLConfig,
        models_dir: Path,
        tasks: list[Task],
        bases: tuple[Path, Path],
        checkpoint: Path | None,
        version: int,
    ) -> tuple[Roles, dict[str, str]]:
        """Every actor created and loaded (concurrently); {task: why it cannot run}."""
        p = config.placement
        policy_base, wm_base = bases
        placed = await reserve(ray, plan_groups(config), p.placement_timeout_s)
        worker_class = ray.remote(RolloutActor)
        workers = [
            worker_class.options(**placed.options(ROLLOUT, i)).remote(config, models_dir, tasks, i)
            for i in range(p.rollout_workers)
        ]
        world = p.policy_ranks
        rank_class = ray.remote(PolicyTrainerActor)
        trainer_ranks = [
            rank_class.options(**placed.options(TRAINER, rank)).remote(rank, world)
            for rank in range(world)
        ]
        wm_trainer = None
        if config.cotrain.enabled:
            wm_trainer = (
                ray.remote(CoTrainerActor)
                .options(**placed.options(WM_TRAINER, 0))
                .remote(wm_base, config, checkpoint and checkpoint / "world_model")
            )
        roles = cls(workers, trainer_ranks, wm_trainer, placed=placed)
        restore = Restore()
        if checkpoint is not None:
            wm_weights = checkpoint / "world_model" / "model"
            restore = Restore(
                checkpoint / "policy" / "model",
                wm_weights if wm_weights.is_dir() else None,
                version,
            )
        master = await trainer_ranks[0].rendezvous.remote() if world > 1 else None
        policy_restore = checkpoint and checkpoint / "policy"
        trainers_started = asyncio.gather(
            *(r.start.remote(policy_base, config, policy_restore, master) for r in trainer_ranks)
        )
        if p.shares_gpus:
            # A GPU shared by trainers and engines: the trainers' allocations come first, or
            # they would land while vLLM measures the GPU to size its cache (a smaller
            # cache, or its check that the memory it counted is still free fails).
            await roles.trainers_loaded(trainers_started)
        skipped = await asyncio.gather(*(w.start.remote(restore) for w in workers))
        for listed in await asyncio.gather(*(w.engine_processes.remote() for w in workers)):
            roles.engine_processes += listed
        roles.cores = list(await asyncio.gather(*(w.placement.remote() for w in workers)))
        await roles.trainers_loaded(trainers_started)
        await roles.find_nodes()
        return roles, skipped[0]

    async def trainers_loaded(self, trainers_started) -> None:
        """Both trainers loaded (the world model's loads in its constructor: a call waits)."""
        await trainers_started
        if self.wm_trainer is not None:
            await self.wm_trainer.__ray_ready__.remote()

    async def find_nodes(self) -> None:
        named = [(f"rollout worker {i}", w) for i, w in enumerate(self.workers)]
        named += [(f"policy trainer rank {r}", t) for r, t in enumerate(self.trainer_ranks)]
        named += [("world-model trainer", self.wm_trainer)] if self.wm_trainer else []
        ids = await asyncio.gather(*(actor.node_id.remote() for _, actor in named))
        self.nodes = {name: node for (name, _), node in zip(named, ids, strict=True)}

    def where(self) -> str:
        """One line: which node (first 8 hex digits of its Ray id) each actor runs on."""
        shown = ", ".join(f"{name} on node {node[:8]}" for name, node in self.nodes.items())
        return f"placement: {shown}"

    def release(self, ray) -> None:
        """The placement groups given back (call once the actors are killed)."""
        self.placed.release(ray)

    async def on_trainer(self, method: str, *args):
        """`method` on every policy-trainer rank (their collectives need them all); rank 0's
        answer (the ranks agree on figures and rank 0 writes the files)."""
        calls = [getattr(rank, method).remote(*args) for rank in self.trainer_ranks]
        return (await asyncio.gather(*calls))[0]

    def trainers(self) -> list:
        return [*self.trainer_ranks, *([self.wm_trainer] if self.wm_trainer else [])]

    def all(self) -> list:
        return [*self.workers, *self.trainers()]

    async def stop(self, ray) -> None:
        """Engines and containers stopped cleanly where possible, then every actor killed."""
        closing = [w.close.remote() for w in self.workers]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 120)
        for actor in self.all():
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self.release(ray)
        self.end_orphaned_engines()

    def end_orphaned_engines(self) -> None:
        """Engine processes of workers on this host that are still alive once the workers are
        gone (a killed worker's vLLM processes are not its children any more)."""
        import socket

        import psutil

        host = socket.gethostname()
        for where, pid in self.engine_processes:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                if where == host and " ".join(process.cmdline()).startswith("VLLM"):
                    process.kill()
