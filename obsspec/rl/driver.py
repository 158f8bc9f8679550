"""`obsspec rl`: the driver that owns the step loop. It reads top to bottom:

    check the models (policy and world model share a tokenizer) and load the tasks
    check OUT, touching nothing: a new run, the same run resumed from its last checkpoint,
    or a run that finished no step replaced
    start Ray (or join --ray-address), check the GPUs asked for exist; only then lock and
    prepare OUT, so that a start refused or failed so far leaves OUT as it was
    start the roles
    each step:
        rollout   the step's groups across the rollout workers, speculative unless told not
                  to (or in the co-training warm-up); infrastructure failures are retried,
                  then their groups masked
        train     the policy's GRPO update; the world model's co-training on the step's
                  rows beside it (synchronous), or, one step behind (the default where it
                  fits: [rl.cotrain] overlap), the previous step's update, which ran during
                  this rollout, awaited first (obsspec.rl.cotrain_overlap)
        sync      the policy's weights, and the world model's when an update finished, into
                  every engine in place (through Ray's object store, or a directory:
                  [rl.sync]), then the policy engines checked against the trainer
                  (obsspec.rl.weight_sync); behind, the step's world-model update starts
        record    one metrics row (metrics.jsonl, TensorBoard, W&B when asked for); a
                  checkpoint every N steps, after the world-model update in flight finished
                  and was synced
    stop the roles (engines, containers) and Ray, whatever ended the run

A step is all or nothing: its metrics row is written after it finished, and checkpoints are
renamed into place when whole, so a run stopped anywhere resumes at the step after its last
checkpoint and repeats exactly what it would have done.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from obsspec.errors import ConfigError, ObsspecError
from obsspec.models.registry import resolve_model
from obsspec.rl.actors import Roles, ray_session
from obsspec.rl.config import RLConfig
from obsspec.rl.cotrain_overlap import WorldModelUpdates, cotrain_overlap
from obsspec.rl.curves import write_curves
from obsspec.rl.events import Event, Note, Phase, RolloutProgress, RunStarted, StepDone
from obsspec.rl.images import build_images_here
from obsspec.rl.metrics import CotrainTiming, StepTimes, TensorBoard, step_row, too_long_warning
from obsspec.rl.rollout import EpisodeSpec
from obsspec.rl.run_files import RLRunDir
from obsspec.rl.steps import build_batch, plan_step
from obsspec.rl.weight_sync import EngineSync
from obsspec.rollout.cores import CorePlan
from obsspec.rollout.dataset import trajectory_row
from obsspec.rollout.plan import load_task_set
from obsspec.rollout.ray_workers import actor_result
from obsspec.rollout.rundir import now
from obsspec.rollout.speculation import check_world_model
from obsspec.tracking import WandbLogger, require_wandb, wandb_logger

OnEvent = Callable[[Event], None]
POLL_S = 0.5


class RLRunError(ObsspecError):
    """The run cannot go on (a role died, every episode failed); the message says why and
    the hint how to continue."""


async def run_rl(config: RLConfig, models_dir: Path, on_event: OnEvent = lambda _: None) -> dict:
    require_wandb(config.wandb)  # before any work
    bases = (
        resolve_model(config.policy, models_dir),
        resolve_model(config.world_model, models_dir),
    )
    check_world_model(config.session_settings(), models_dir)
    tasks, broken = load_task_set(config.tasks, strict=False)
    for path, reason in broken.items():
        on_event(Note(f"skipped task {path}: {reason}"))
    if not tasks:
        raise ConfigError(f"--tasks {config.tasks}: no task loads")
    task_set = {task.id: task.content_hash for task in tasks}
    inputs = {"--tasks": config.tasks, "--policy": bases[0], "--world-model": bases[1]}
    run = RLRunDir(config.out)
    replacing = run.check(resume=config.resume, overwrite=config.overwrite, inputs=inputs)
    identity = config.identity(task_set)  # other tasks under --tasks: another run
    done, checkpoint = run.resume_point(identity, task_set) if config.resume else (0, None)
    state = Loop(config, run, on_event, done, checkpoint, task_set)
    if done >= config.steps:
        on_event(Note(f"all {config.steps} steps of {config.out} are done; nothing to run"))
        return state.summary()
    async with ray_session(config) as ray:
        with run.locked():  # Ray is up with the GPUs asked for: the run is accepted
            if replacing:
                on_event(Note(replacing))
            run.prepare(resume=config.resume, overwrite=config.overwrite, inputs=inputs)
            run.keep_steps_through(done)
            state.begin(len(tasks))
            try:
                with state.open_wandb() as wandb:
                    await state.run(ray, models_dir, tasks, bases, wandb)
            except BaseException as e:
                stopped = isinstance(e, asyncio.CancelledError | KeyboardInterrupt)
                state.finish("interrupted" if stopped else "failed", error=str(e))
                raise
            state.finish("complete")
    return state.summary()


class Loop:
    """The step loop's state: where it is, what it has written."""

    def __init__(
        self, config: RLConfig, run: RLRunDir, on_event: OnEvent, done, checkpoint, task_set
    ):
        self.config = config
        self.task_set = task_set  # task id -> content hash, of the tasks that loaded
        self.identity = config.identity(task_set)
        self.run_dir = run
        self.on_event = on_event
        self.done = done  # steps finished (and recorded)
        self.first = done
        self.checkpoint = checkpoint
        self.version = done  # the policy's weight version: one per update applied
        self.manifest: dict = {}
        self.last_row: dict | None = None
        self.step = done + 1
        self.warned_too_long = False  # co-training's dropped examples: warned once per run
        self.wm = WorldModelUpdates(cotrain_overlap(config))
        self.syncer: EngineSync  # made by `run`: its calls need Ray

    def begin(self, tasks: int) -> None:
        """The manifest of the run (a resumed one keeps its run id and creation time)."""
        config = self.config
        self.manifest = {
            "created_at": now(),
            "run_id": f"rl-{uuid.uuid4().hex[:8]}",  # names the run in its episodes' rows
            **(self.run_dir.read_manifest() if config.resume else {}),
            "identity": self.identity,
            "tasks": self.task_set,
            "config": config.model_dump(mode="json"),
            "status": "running",
            "steps_done": self.done,
            "cotrain_overlap": self.wm.behind,  # one step behind the rollout (None: no co-training)
        }
        self.run_dir.write_manifest(self.manifest)
        workers = config.placement.rollout_workers
        checkpoint = self.checkpoint and self.checkpoint.name
        self.on_event(RunStarted(self.done + 1, config.steps, tasks, workers, checkpoint))

    def open_wandb(self) -> contextlib.AbstractContextManager[WandbLogger | None]:
        """The run's W&B run (the same one when resumed), or None without a project."""
        return wandb_logger(
            self.config.wandb,
            self.run_dir.root,
            self.manifest["config"],
            resume=self.config.resume,
            prefix="rl",
        )

    async def run(self, ray, models_dir: Path, tasks, bases, wandb: WandbLogger | None) -> None:
        if self.checkpoint is not None:
            self.read_checkpoint_state()
        self.syncer = EngineSync(
            self.config.sync, self.run_dir.sync, lambda aw, role: self.call(ray, aw, role)
        )
        skipped = await build_images_here(ray, self.config, tasks)
        tasks = [t for t in tasks if t.id not in skipped]
        roles, skipped_there = await self.call(
            ray,
            Roles.start(ray, self.config, models_dir, tasks, bases, self.checkpoint, self.version),
            "starting the roles",
        )
        skipped |= skipped_there
        self.on_event(Note(roles.where()))
        for index, cores in enumerate(roles.cores):
            self.on_event(Note(f"rollout worker {index}: {CorePlan.of(cores).describe()}"))
        self.manifest["placement"] = roles.cores
        self.run_dir.write_manifest(self.manifest)
        board = None
        try:
            for task_id, reason in skipped.items():
                self.on_event(Note(f"skipped task {task_id}: {reason}"))
            runnable = [t.id for t in tasks if t.id not in skipped]
            if self.config.tensorboard:
                board = TensorBoard(self.run_dir.root / "tensorboard", self.done)
            writers = [w for w in (board, wandb) if w is not None]
            for index in range(self.done, self.config.steps):
                self.step = index + 1
                row = await self.one_step(ray, roles, runnable, index)
                self.record(row, writers)
                if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                    await self.save_checkpoint(ray, roles)
        finally:
            if board is not None:
                board.close()
            await roles.stop(ray)
            await self.wm.abandon()  # stopped with an update in flight: its actor is gone

    def read_checkpoint_state(self) -> None:
        from obsspec.runs import read_json_object

        state = read_json_object(self.checkpoint / "driver.json", flag="--resume")
        self.version = int(state.get("weight_version", self.done))
        self.wm.restore(state.get("pending_wm_stats"))

    async def one_step(self, ray, roles: Roles, runnable: list[str], index: int) -> dict:
        config = self.config
        specs = plan_step(runnable, index, config)
        speculate = config.speculate and index >= config.cotrain.warmup_steps
        started = time.monotonic()
        self.on_event(Phase(self.step, "rollout"))
        played = await self.rollout(ray, roles, specs, speculate)
        rolled = time.monotonic()
        batch = build_batch(specs, [p and p[0] for p in played], config.grpo)
        if not batch.trajectories:
            raise RLRunError(
                f"step {self.step}: every one of its {len(specs)} episodes failed on the "
                f"infrastructure, {config.max_attempts} attempts each",
                hint="check Docker and the tasks (`obsspec doctor`, `obsspec env validate`); "
                "then rerun with --resume",
            )
        self.on_event(Phase(self.step, "train"))
        wm, call = self.wm, self.syncer.call
        wm_wait_s = await wm.wait(call) if wm.behind else None  # the previous step's update
        probe = await self.syncer.probe_before(roles, batch.episodes)
        rows = [t.to_dict() for t in batch.trajectories]
        wm.launch_if_ready(roles.wm_trainer, rows, self.step)  # beside the policy update
        update = roles.on_trainer("update", batch.episodes, index)
        policy_stats = await self.call(ray, update, "a trainer")
        if not wm.behind:
            wm_wait_s = await wm.wait(call)  # this step's, trained beside the policy
        trained = time.monotonic()
        self.on_event(Phase(self.step, "sync"))
        changed = policy_stats["trained_episodes"] > 0
        self.version += changed  # one weight version per update applied
        checked = await self.syncer.sync(
            roles,
            self.version,
            policy_changed=changed,
            world_model=wm.unsynced,
            before=probe,
            step=self.step,
        )
        wm.synced()
        wm.launch_if_ready(roles.wm_trainer, rows, self.step)  # behind: once its weights left
        synced = time.monotonic()
        wm_stats, trained_on = wm.report()
        self.warn_too_long(wm_stats)
        times = StepTimes(rolled - started, trained - rolled, synced - trained, synced - started)
        self.run_dir.write_episodes(self.step, self.episode_rows(played, index))
        row = step_row(
            self.step,
            batch,
            policy_stats,
            wm_stats,
            times,
            speculate=speculate,
            weight_version=self.version,
            cotrain=CotrainTiming(wm.behind, trained_on, wm_wait_s),
        )
        unchecked = dict.fromkeys(
            ("sync_check_error", "sync_check_shift", "sync_check_weights", "sync_check_floor")
        )
        return row | unchecked | checked

    def warn_too_long(self, wm_stats: dict | None) -> None:
        """The first step that drops co-training examples says so (every row counts them)."""
        warning = too_long_warning(self.step, wm_stats, self.config.cotrain_settings.max_len)
        if warning and not self.warned_too_long:
            self.warned_too_long = True
            self.on_event(Note(warning))

    def episode_rows(self, played: list, index: int) -> list[dict]:
        """The step's episodes as dataset rows (collect's schema), numbered across the run."""
        first = index * self.config.episodes_per_step
        return [
            trajectory_row(
                episode[0],
                run_id=self.manifest["run_id"],
                episode_index=first + i,
                policy=self.config.policy,
                attempts=episode[1],
            )
            for i, episode in enumerate(played)
            if episode is not None
        ]

    async def rollout(self, ray, roles: Roles, specs: list[EpisodeSpec], speculate: bool):
        """Whole groups to each worker (siblings share a worker's cache); results in order."""
        workers = roles.workers
        shares: list[list[EpisodeSpec]] = [[] for _ in workers]
        for spec in specs:
            shares[spec.group % len(workers)].append(spec)
        runs = [
            asyncio.ensure_future(self.call(ray, w.rollout.remote(share, speculate), "a worker"))
            for w, share in zip(workers, shares, strict=True)
        ]
        while not all(run.done() for run in runs):
            await asyncio.wait(runs, timeout=POLL_S)
            await self.report_progress(workers, len(specs))
        results = [run.result() for run in runs]
        by_spec = {}
        for share, trajectories in zip(shares, results, strict=True):
            by_spec.update(zip(share, trajectories, strict=True))
        return [by_spec[spec] for spec in specs]

    async def report_progress(self, workers, total: int) -> None:
        try:
            progress = await asyncio.gather(*(w.progress.remote() for w in workers))
        except Exception:  # a dying worker: its rollout call reports why
            return
        done = sum(p.done for p in progress)
        failed = sum(p.failed_attempts for p in progress)
        self.on_event(RolloutProgress(self.step, done, total, failed))

    async def save_checkpoint(self, ray, roles: Roles) -> None:
        self.on_event(Phase(self.step, "checkpoint"))
        await self.settle_world_model(roles)
        tmp = self.run_dir.checkpoint_tmp(self.step)
        saves = [roles.on_trainer("save", tmp / "policy")]
        if roles.wm_trainer is not None:
            saves.append(roles.wm_trainer.save.remote(tmp / "world_model"))
        await self.call(ray, asyncio.gather(*saves), "a trainer")
        state = {
            "step": self.step,
            "identity": self.identity,
            "data_cursor": self.step * self.config.grpo.tasks_per_step,
            "weight_version": self.version,
            "pending_wm_stats": self.wm.state(),  # the update a row after this one reports
            "saved_at": now(),
        }
        keep = self.config.keep_checkpoints
        self.checkpoint = self.run_dir.commit_checkpoint(tmp, self.step, state, keep)
        write_curves(self.run_dir.read_metrics(), self.run_dir.root / "curves.png")
        self.manifest["last_checkpoint"] = self.checkpoint.name
        self.run_dir.write_manifest(self.manifest)

    async def settle_world_model(self, roles: Roles) -> None:
        """The world-model update in flight (behind) finished and its weights in the engines,
        so that the checkpoint holds what they serve and a resume goes on from the same."""
        await self.wm.wait(self.syncer.call)
        if self.wm.unsynced:
            await self.syncer.sync(
                roles, self.version, policy_changed=False, world_model=True, before=None,
                step=self.step,
            )  # fmt: skip
            self.wm.synced()

    def record(self, row: dict, writers: list[TensorBoard | WandbLogger]) -> None:
        self.run_dir.append_metrics(row)
        for writer in writers:
            writer.add(row)
        self.done = self.step
        self.last_row = row
        self.manifest["steps_done"] = self.done
        self.run_dir.write_manifest(self.manifest)
        self.on_event(StepDone(row))

    async def call(self, ray, awaitable, role: str):
        """Await a role; a dead actor or a failure inside one becomes a clear RLRunError."""
        hint = self.resume_hint()
        return await actor_result(
            ray,
            awaitable,
            failed=lambda cause: RLRunError(f"step {self.step}: {role} failed: {cause}", hint=hint),
            died=lambda error: RLRunError(
                f"step {self.step}: {role} died ({type(error).__name__}); steps after the last "
                "checkpoint are not kept",
                hint=hint,
            ),
        )

    def resume_hint(self) -> str:
        where = self.checkpoint.name if self.checkpoint else "the start"
        return f"rerun the same command with --resume to continue from {where}"

    def finish(self, status: str, error: str | None = None) -> None:
        self.manifest.update(status=status, steps_done=self.done)
        if error:
            self.manifest["error"] = error
        self.run_dir.write_manifest(self.manifest)

    def summary(self) -> dict:
        return {
            "out": str(self.config.out),
            "status": "complete",
            "steps_done": self.done,
            "steps_this_run": self.done - self.first,
            "last_checkpoint": self.checkpoint and self.checkpoint.name,
            "last": self.last_row,
            "placement": self.manifest.get("placement"),
        }
