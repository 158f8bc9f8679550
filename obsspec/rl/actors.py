"""The roles of an RL run as Ray actors, and where they are placed.

    roles = await Roles.start(ray, config, models_dir, tasks, restore)
    roles.workers        rollout workers: a policy engine, a world-model engine, sandboxes
    roles.trainer_ranks  the policy trainer (torch): one process, or FSDP2 ranks acting as one
                         (`await roles.on_trainer("update", ...)` calls every rank)
    roles.wm_trainer     the world-model co-trainer (None when co-training is off)

On a CPU machine every role shares the CPUs (each actor holds a token share, so any number
fit); on a cluster each takes the GPUs `placement` gives it. The trainers run torch on all
the node's cores: in the synchronous step they train while the engines are idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from obsspec.environments.tasks.model import Task
from obsspec.errors import ClusterError
from obsspec.rl.config import RLConfig
from obsspec.rl.rollout import Restore, RolloutWorker

CPU_SHARE = 0.01  # an actor's CPU "reservation" when roles share the CPUs


class RolloutActor:
    def __init__(self, config: RLConfig, models_dir: Path, tasks: list[Task], index: int):
        self.worker = RolloutWorker(config, models_dir, tasks, index)

    async def start(self, restore: Restore) -> dict[str, str]:
        return await self.worker.start(restore)

    async def rollout(self, specs, speculate: bool) -> list:
        return await self.worker.rollout(specs, speculate=speculate)

    async def progress(self):
        return self.worker.progress

    async def load_policy(self, weights: Path, version: int) -> None:
        await self.worker.load_policy(weights, version)

    async def load_world_model(self, weights: Path) -> None:
        await self.worker.load_world_model(weights)

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


class PolicyTrainerActor:
    """One rank of the policy trainer. With several ranks, rank 0 names a rendezvous address
    and every rank joins the process group in `start` (they must start together)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def rendezvous(self) -> str:
        """host:port for the process group, on rank 0's node."""
        import socket

        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return f"{ray.util.get_node_ip_address()}:{port}"

    def start(self, base: Path, config: RLConfig, restore: Path | None, master: str | None):
        from obsspec.rl.policy_trainer import PolicyTrainer
        from obsspec.train import distributed

        use_all_cores(config.placement.num_cpus, share=self.world)
        if self.world > 1:
            assert master is not None
            host, port = master.rsplit(":", 1)
            os.environ.update(  # what torch.distributed's env:// rendezvous reads
                WORLD_SIZE=str(self.world),
                RANK=str(self.rank),
                LOCAL_RANK="0",  # Ray shows each rank only its own GPU
                MASTER_ADDR=host,
                MASTER_PORT=port,
            )
            distributed.init_from_env(os.environ)
        self.trainer = PolicyTrainer(base, config.grpo, config.seed)
        if restore is not None:
            self.trainer.restore(restore)

    def update(self, episodes, step: int) -> dict:
        return self.trainer.update(episodes, step)

    def save_weights(self, out: Path) -> Path:
        return self.trainer.save_weights(out)

    def save(self, folder: Path) -> None:
        self.trainer.save(folder)


class CoTrainerActor:
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

    def save(self, folder: Path) -> None:
        self.trainer.save(folder)


def local_gpus() -> int:
    """GPUs a Ray cluster started on this machine would have (Ray counts the visible CUDA
    devices alike)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(config: RLConfig, have: float) -> None:
    """The placement's GPUs fit in HAVE (the cluster's, or this machine's before a local
    cluster is started for nothing)."""
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


def options(gpus: float) -> dict:
    return {"num_gpus": gpus, "num_cpus": 1 if gpus else CPU_SHARE}


@dataclass
class Roles:
    workers: list
    trainer_ranks: list
    wm_trainer: object | None
    engine_processes: list[tuple[str, int]] = field(default_factory=list)

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
        worker_class = ray.remote(RolloutActor).options(**options(p.rollout_gpus))
        workers = [
            worker_class.remote(config, models_dir, tasks, i) for i in range(p.rollout_workers)
        ]
        world = p.policy_ranks
        rank_class = ray.remote(PolicyTrainerActor).options(**options(p.trainer_gpus / world))
        trainer_ranks = [rank_class.remote(rank, world) for rank in range(world)]
        wm_trainer = None
        if config.cotrain.enabled:
            wm_trainer = (
                ray.remote(CoTrainerActor)
                .options(**options(p.wm_trainer_gpus))
                .remote(wm_base, config, checkpoint and checkpoint / "world_model")
            )
        roles = cls(workers, trainer_ranks, wm_trainer)
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
        skipped = await asyncio.gather(*(w.start.remote(restore) for w in workers))
        for listed in await asyncio.gather(*(w.engine_processes.remote() for w in workers)):
            roles.engine_processes += listed
        await trainers_started
        if wm_trainer is not None:  # it loads in its constructor; a call waits for it
            await wm_trainer.__ray_ready__.remote()
        return roles, skipped[0]

    async def on_trainer(self, method: str, *args):
        """`method` on every policy-trainer rank (their collectives need them all); rank 0's
        answer (the ranks agree on figures and rank 0 writes the files)."""
        calls = [getattr(rank, method).remote(*args) for rank in self.trainer_ranks]
        return (await asyncio.gather(*calls))[0]

    def trainers(self) -> list:
        return [*self.trainer_ranks, *([self.wm_trainer] if self.wm_trainer else [])]

    def all(self) -> list:
        return [*self.workers, *self.trainers()]

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
