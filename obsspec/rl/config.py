"""The typed config of `obsspec rl`: defaults < the `[rl]` table of --config < flags.

    [rl]
    tasks = "tasks/"            # built-in or Harbor tasks
    out = "rl-run"
    steps = 20
    [rl.grpo]
    group_size = 4              # episodes per task per step
    tasks_per_step = 2
    [rl.cotrain]
    replay_size = 512           # world-model examples kept from earlier steps
    [rl.placement]
    rollout_workers = 1         # each: a policy engine, a world-model engine, sandboxes

    [rl.speculation]
    world_model = "wm"          # [default: the policy's model]

Unknown keys anywhere are errors that name them (StrictModel). The world model's keys once
sat flat in [rl] (world_model, wm_kv_cache_gb, wm_cpu_cores, wm_max_tokens, threshold); they
still load, with a warning naming their place under [rl.speculation].
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from obsspec.agent.episode import EpisodeLimits
from obsspec.config import DEFAULT_MODEL, StrictModel
from obsspec.rollout.config import RolloutSettings, SpeculationConfig, load_rollout_config
from obsspec.rundirs import task_set_digest
from obsspec.speculation.gate import GateSettings
from obsspec.tracking import WandbSettings
from obsspec.world_model.config import CotrainSettings

LEGACY_BATCH_TOKENS = 2048  # grpo.batch_tokens' default before it followed the context length


def rl_limits() -> EpisodeLimits:
    """Short episodes: RL samples many of them, and a small model uses few turns well."""
    return EpisodeLimits(max_turns=8, max_tokens=128, temperature=1.0)


def rl_speculation() -> SpeculationConfig:
    """The world model improves as it is co-trained: the gate judges it on its recent
    outcomes and keeps re-testing families it has written off (see obsspec.speculation.gate).
    Rollout workers always hold the speculative loop (`speculate` says whether a step uses it)."""
    return SpeculationConfig(enabled=True, gate=GateSettings(hit_window=20, explore_every=5))


class GRPOSettings(StrictModel):
    group_size: int = Field(
        default=4, ge=2, description="Episodes of each task per step (one GRPO group)."
    )
    tasks_per_step: int = Field(default=2, ge=1, description="Tasks (groups) per step.")
    clip_low: float = Field(default=0.2, ge=0, lt=1, description="PPO clip below 1 (1 - low).")
    clip_high: float = Field(
        default=0.28, ge=0, description="PPO clip above 1 (1 + high; higher than low: DAPO)."
    )
    kl_coef: float = Field(
        default=0.0, ge=0, description="Weight of the KL to the initial policy (0: off)."
    )
    scale_by_std: bool = Field(
        default=True, description="Divide advantages by the group's reward std."
    )
    std: Literal["unbiased", "population"] = Field(  # obsspec.rl.grpo.GroupStd
        default="unbiased",
        description="The group's reward std: 'unbiased' (over n - 1, torch.std's default, "
        "as TRL and verl compute it) or 'population' (over n, this project's earlier runs).",
    )
    reward_requires_done: bool = Field(
        default=True, description="An episode earns the verifier's reward only if it said done."
    )
    lr: float = Field(default=1e-6, gt=0, lt=1, description="Policy learning rate (AdamW).")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping norm.")
    minibatches: int = Field(
        default=2,
        ge=1,
        description="Optimizer steps per RL step, each on a share of its episodes (with 1, "
        "the ratio is 1 by construction and the clip never binds; from the second on, the "
        "ratio moves and the clip can bind).",
    )
    batch_tokens: int | None = Field(
        default=None,
        ge=16,
        description="Tokens per forward pass, padding included: bounds the trainer's "
        "activation memory (the 135M model needs about 1 MB per token); an episode longer "
        "than this is an error [default: engine.max_model_len, as long as an episode's "
        "context can grow; a smaller value is refused].",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto", description="Trainer compute precision (weights stay float32)."
    )
    reduce_dtype: Literal["float32", "bfloat16"] = Field(
        default="float32",
        description="Gradient reduction precision across ranks (FSDP2's reduce-scatter; "
        "bfloat16 halves the traffic, float32 sums exactly what the ranks computed).",
    )
    activation_checkpointing: bool = Field(
        default=False,
        description="Recompute each decoder layer's activations in the backward pass; less "
        "memory, about a third more compute.",
    )


class PlacementSettings(StrictModel):
    """Where the roles run. On a CPU machine everything shares the CPUs; on a cluster each
    role gets its GPUs (a rollout worker's policy and world-model engines share its GPU)."""

    rollout_workers: int = Field(default=1, ge=1, description="Rollout workers (Ray actors).")
    rollout_gpus: float = Field(default=0, ge=0, description="GPUs per rollout worker.")
    trainer_gpus: float = Field(default=0, ge=0, description="GPUs of the policy trainer.")
    trainer_ranks: int | None = Field(
        default=None,
        ge=1,
        description="Policy-trainer processes, the model sharded over them with FSDP2 "
        "[default: one per trainer GPU, or 1 on CPUs].",
    )
    wm_trainer_gpus: float = Field(default=0, ge=0, description="GPUs of the world-model trainer.")
    num_cpus: int | None = Field(
        default=None, ge=1, description="CPUs of the local Ray cluster [default: all]."
    )
    ray_address: str | None = Field(
        default=None, description="Join this Ray cluster (e.g. 'auto') instead of a local one."
    )
    trainer_strategy: Literal["PACK", "STRICT_PACK"] = Field(
        default="PACK",
        description="Ray placement strategy of the policy trainer's ranks (one bundle each): "
        "PACK keeps them on as few nodes as it can, STRICT_PACK on one node or not at all.",
    )
    rollout_strategy: Literal["SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"] = Field(
        default="SPREAD",
        description="Ray placement strategy of the rollout workers (one bundle each): SPREAD "
        "puts them on different nodes where it can (each node's Docker runs its sandboxes), "
        "PACK on as few as it can; STRICT_ variants refuse otherwise.",
    )
    trainer_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each policy-trainer rank's bundle asks for, e.g. "
        "{ trainer_node = 1 } to pin the trainer to nodes started with that resource.",
    )
    rollout_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each rollout worker's bundle asks for (pins the "
        "workers to the node types that have them).",
    )
    wm_trainer_resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources the world-model co-trainer's bundle asks for.",
    )
    placement_timeout_s: float = Field(
        default=300,
        gt=0,
        description="How long to wait for Ray to place every role's bundles before giving up "
        "with what each node has (an autoscaling cluster may need minutes to add nodes).",
    )

    @model_validator(mode="after")
    def _custom_resources_only(self) -> PlacementSettings:
        for name in ("trainer_resources", "rollout_resources", "wm_trainer_resources"):
            for key, amount in getattr(self, name).items():
                if key in ("CPU", "GPU", "memory", "object_store_memory"):
                    raise ValueError(
                        f"{name} names {key!r}, which Ray sets itself: give GPUs with the "
                        "*_gpus settings; this table is for custom resources (ray start "
                        "--resources)"
                    )
                if amount <= 0:
                    raise ValueError(f"{name}[{key!r}] is {amount:g}: it must be above 0")
        return self

    @model_validator(mode="after")
    def _one_gpu_per_rank(self) -> PlacementSettings:
        ranks = self.policy_ranks
        if ranks > 1 and self.trainer_gpus and self.trainer_gpus != ranks:
            raise ValueError(
                f"trainer_ranks {ranks} with trainer_gpus {self.trainer_gpus:g}: a sharded "
                "trainer takes one whole GPU per rank (set them equal, or trainer_gpus 0)"
            )
        if ranks == 1 and self.trainer_gpus > 1:
            raise ValueError(
                f"trainer_gpus {self.trainer_gpus:g} with trainer_ranks 1: one process uses "
                "one GPU (leave trainer_ranks unset for one rank per GPU)"
            )
        return self

    @property
    def policy_ranks(self) -> int:
        if self.trainer_ranks is not None:
            return self.trainer_ranks
        return max(1, int(self.trainer_gpus))

    @property
    def gpus_requested(self) -> float:
        return self.rollout_workers * self.rollout_gpus + self.trainer_gpus + self.wm_trainer_gpus

    @property
    def shares_gpus(self) -> bool:
        """Whether a trainer may share a GPU with engines: a fraction of a GPU asked for
        (trainer_gpus 0.5 and rollout_gpus 0.5 on one GPU, ...)."""
        shares = [self.rollout_gpus, self.trainer_gpus / self.policy_ranks, self.wm_trainer_gpus]
        return any(0 < share < 1 for share in shares)


class SyncSettings(StrictModel):
    """How the trainers' weights reach the engines after each update, and the check that the
    policy engines serve them (obsspec.rl.weight_sync)."""

    method: Literal["memory", "disk"] = Field(
        default="memory",
        description="memory: bfloat16 buckets through Ray's object store, no filesystem; "
        "disk: a servable HF directory under OUT/sync that every engine reloads (needs a "
        "filesystem every node shares).",
    )
    bucket_mb: int = Field(
        default=512, ge=1, description="Size of a weight bucket (memory method), MiB."
    )
    check_tokens: int = Field(
        default=256,
        ge=0,
        description="Tokens of the post-sync probe (the start of one trained episode) that "
        "each policy engine scores against the trainer after every update (0: no check).",
    )
    check_tolerance: float = Field(
        default=0.1,
        gt=0,
        description="Where no weight checksum compares (the disk sync, vLLM's CPU build): the "
        "largest mean |engine - trainer| log-probability on the probe, beyond the engine's "
        "own floor before the update, before an engine counts as stale and the run stops.",
    )


class RLConfig(RolloutSettings):
    section: ClassVar[str] = "rl"
    required_flags: ClassVar[dict[str, str]] = {"tasks": "--tasks", "out": "--out"}
    moved_to_speculation: ClassVar[tuple[str, ...]] = (
        "world_model",
        "wm_kv_cache_gb",
        "wm_cpu_cores",
        "wm_max_tokens",
        "threshold",
    )

    tasks: str = Field(description="A task directory, a directory of tasks, or a glob.")
    out: Path = Field(description="The run directory (metrics, checkpoints, TensorBoard).")
    policy: str = Field(default=DEFAULT_MODEL, description="The initial policy (name or dir).")
    steps: int = Field(default=20, ge=1, description="RL steps to run (in all, with resumes).")
    seed: int = Field(default=0, description="Seeds task order, episodes and trainers.")
    limits: EpisodeLimits = Field(default_factory=rl_limits)
    speculate: bool = Field(
        default=True, description="Speculative rollouts (off: the sequential baseline)."
    )
    speculation: SpeculationConfig = Field(
        default_factory=rl_speculation,
        description="Depth, breadth, gate, and the initial world model [default: the "
        "policy's model] with its engine (`enabled` is ignored: see `speculate`).",
    )
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    cotrain: CotrainSettings = Field(default_factory=CotrainSettings)
    placement: PlacementSettings = Field(default_factory=PlacementSettings)
    sync: SyncSettings = Field(default_factory=SyncSettings)
    concurrency: int = Field(default=8, ge=1, description="Episodes at once per rollout worker.")
    checkpoint_every: int = Field(default=5, ge=1, description="Checkpoint every N steps.")
    keep_checkpoints: int = Field(default=2, ge=1, description="Checkpoints kept on disk.")
    tensorboard: bool = Field(default=True, description="Also log metrics for TensorBoard.")
    wandb: WandbSettings = Field(
        default_factory=WandbSettings,
        description="Weights & Biases logging (off unless a project is set).",
    )
    resume: bool = Field(default=False, description="Continue OUT from its last checkpoint.")
    overwrite: bool = Field(default=False, description="Replace a run already in OUT.")

    @model_validator(mode="after")
    def _consistent(self) -> RLConfig:
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite contradict each other")
        asked, context = self.cotrain.max_len, self.engine.max_model_len
        if asked is not None and asked < context:
            raise ValueError(
                f"cotrain.max_len {asked} cannot hold a full example: an example is the "
                f"policy's context up to an action, then its observation, up to "
                f"engine.max_model_len {context} tokens for every turn the policy goes on "
                f"from; set it to at least {context}, or leave it unset (it then follows "
                "engine.max_model_len)"
            )
        cap = self.grpo.batch_tokens
        if cap is not None and cap < context:
            raise ValueError(
                f"grpo.batch_tokens {cap} cannot hold a whole episode: an episode's context "
                f"grows up to engine.max_model_len {context} tokens and goes into one forward "
                f"pass; raise grpo.batch_tokens to at least {context}, or lower "
                f"engine.max_model_len to {cap} (or leave batch_tokens unset: it then follows "
                "engine.max_model_len)"
            )
        return self

    @property
    def cotrain_settings(self) -> CotrainSettings:
        """The co-training settings with max_len resolved: as set, else the policy's context
        length (the world-model engine shares it: a longer example could not be served)."""
        max_len = self.cotrain.max_len or self.engine.max_model_len
        return self.cotrain.model_copy(update={"max_len": max_len})

    @property
    def grpo_settings(self) -> GRPOSettings:
        """The GRPO settings with batch_tokens resolved: as set, else the policy's context
        length (the longest episode, which goes into a forward pass whole)."""
        batch_tokens = self.grpo.batch_tokens or self.engine.max_model_len
        return self.grpo.model_copy(update={"batch_tokens": batch_tokens})

    def grpo_identity(self) -> dict[str, Any]:
        """The GRPO part of the run's identity. The trainer's memory knobs do not change what
        is learned, and runs made before they existed must still resume: batch_tokens is
        recorded as set, or as 2048 when unset (its fixed default then, which those runs
        recorded); activation_checkpointing is left out (a resumed run may turn it on to fit
        memory); reduce_dtype is recorded only when not float32 (it rounds the gradients)."""
        grpo = self.grpo.model_dump(mode="json", exclude={"activation_checkpointing"})
        grpo["batch_tokens"] = self.grpo.batch_tokens or LEGACY_BATCH_TOKENS
        if self.grpo.reduce_dtype == "float32":
            del grpo["reduce_dtype"]
        return grpo

    @property
    def episodes_per_step(self) -> int:
        return self.grpo.group_size * self.grpo.tasks_per_step

    @property
    def world_model(self) -> str:
        """The initial world model: the one asked for, else the policy's model."""
        return self.speculation.world_model or self.policy

    def session_settings(self) -> RLConfig:
        """What a rollout worker's session runs: the speculative loop always there (each
        rollout says whether to use it), with the world model resolved."""
        return self.with_speculation(enabled=True, world_model=self.world_model)

    def identity(self, task_set: Mapping[str, str] | None = None) -> dict[str, Any]:
        """What decides what is learned: a resumed run must have the same. Speculation,
        placement and bookkeeping are not part of it (they change speed, not data); the
        world model is, as asked for (None: the policy's), and so are the tasks under
        --tasks (task_set: id -> content hash; its digest)."""
        task_digest = {} if task_set is None else {"task_set": task_set_digest(task_set)}
        return {
            "tasks": os.path.abspath(self.tasks),
            "policy": self.policy,
            "world_model": self.speculation.world_model,
            "seed": self.seed,
            "limits": self.limits.model_dump(mode="json"),
            "grpo": self.grpo_identity(),
            # max_len resolved; recomputation is memory and overlap is timing (the engine one
            # update behind speculates, which is lossless), not what is learned
            "cotrain": self.cotrain_settings.model_dump(
                mode="json", exclude={"activation_checkpointing", "overlap"}
            ),
            **self.network_identity(),
            **task_digest,
        }


def load_rl_config(config_file: Path | None, flags: dict[str, Any], **defaults: Any) -> RLConfig:
    """defaults: default_policy, images and sets (see load_rollout_config)."""
    return load_rollout_config(RLConfig, config_file, flags, **defaults)
