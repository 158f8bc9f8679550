"""The typed configs of rollouts: one shared section, and `obsspec collect`'s own.

RolloutSettings    what collect, rl and profile share, and all a RolloutSession needs:
                   policy, limits, engine, speculation (with the world model), concurrency,
                   retries, sandbox cores, images and network. CollectConfig, RLConfig and
                   ProfileConfig inherit it, so [collect], [rl] and [profile] use the same
                   keys for the same things.
CollectConfig      defaults < the `[collect]` table of --config < flags.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import Field, model_validator

from obsspec.agent.episode import EpisodeLimits
from obsspec.config import (
    DEFAULT_MODEL,
    CoreList,
    ImagesConfig,
    StrictModel,
    deep_merge,
    load_pipeline_config,
    move_deprecated_keys,
)
from obsspec.environments.ceiling import SandboxCeiling
from obsspec.environments.sandbox import NetworkPolicy
from obsspec.environments.verifier_kit.plan import KIT_MODE_HELP, KitMode
from obsspec.overrides import Overrides
from obsspec.rollout.cores import PlacementMode
from obsspec.rundirs import task_set_digest
from obsspec.speculation.settings import SpeculationSettings
from obsspec.types import longest_observation_chars


def collect_limits() -> EpisodeLimits:
    """Collection defaults: short replies, a turn budget a small model can use, sampling on."""
    return EpisodeLimits(max_turns=15, max_tokens=384, temperature=1.0)


class EngineOptions(StrictModel):
    max_model_len: int = Field(default=4096, ge=64, description="Longest context in tokens.")
    kv_cache_gb: float | None = Field(
        default=None,
        gt=0,
        description="The policy engine's KV-cache memory, GiB; on GPU it fixes the cache's "
        "size exactly (see obsspec.inference.vllm_settings) [default: 1 on CPU; on GPU what "
        "gpu_memory_utilization's share leaves].",
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="GPU: the share of the GPU the policy engine may take; with the world "
        "model's engine on the same GPU the two shares must sum to less than 1 "
        "[default: vLLM's 0.92]. Not used on CPU.",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, description="GPUs the policy engine shards the model across."
    )
    enforce_eager: bool | None = Field(
        default=None,
        description="Run the engines eagerly, without compiled graphs [default: eager on "
        "CPU, CUDA graphs on GPU].",
    )
    allow_untested_vllm: bool = Field(
        default=False,
        description="Start the engines even with a vLLM outside the versions whose in-place "
        "weight reload was verified (obsspec.inference.weight_loading.SUPPORTED_VLLM).",
    )
    server: str | None = Field(
        default=None, description="An OpenAI-compatible server URL instead of vLLM in process."
    )
    served_name: str | None = Field(default=None, description="Model name on the server.")
    server_priority_check: bool = Field(
        default=True,
        description="With speculation through a server, refuse one that does not show it "
        "orders requests by priority (vLLM: --scheduling-policy priority, seen through its "
        "/server_info with VLLM_SERVER_DEV_MODE=1); false trusts the server unseen.",
    )
    cpu_cores: CoreList | None = Field(
        default=None,
        description="CPU build: the policy engine's cores, e.g. '0' [default: obsspec's "
        "placement (`cpu_placement`)].",
    )
    cpu_libraries: list[str] | None = Field(
        default=None,
        description="CPU build: libraries preloaded into both engines' processes [default: "
        "tcmalloc and Intel OpenMP where installed; [] for none, as vLLM alone].",
    )
    dtype: str = Field(
        default="auto",
        description="The dtype both engines compute in: auto, float32, bfloat16... [default: "
        "auto, the model's; on a CPU without bfloat16 instructions (x86: AVX512_BF16 or "
        "AMX_BF16) float32, 3.5x the batched tokens/s there].",
    )
    worker_spin_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds both engines' vLLM workers busy-wait for their next step before "
        "they sleep [default: 0.05 on the CPU build, where vLLM's own 1 s burns a core-second "
        "after every answer; vLLM's own on GPU].",
    )
    engine_core_spin_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds both engines' vLLM engine cores busy-wait for their worker's "
        "result of a step before they sleep [default: 0 on the CPU build, where vLLM's own "
        "1 s spins through every forward pass on a second core; vLLM's own on GPU].",
    )


class SpeculationConfig(SpeculationSettings):
    """The runner's settings (depth, breadth, gate, predict_timeout_s) and its predictors."""

    enabled: bool = Field(
        default=False, description="Run episodes speculatively (the data stay the same)."
    )
    world_model: str | None = Field(
        default=None,
        description="World model (name or HF directory) behind the state cache and rules "
        "[default: state cache and rules only; rl: the policy's model].",
    )
    threshold: float = Field(
        default=0.5, ge=0, le=1, description="Confidence at which a cheaper predictor wins."
    )
    wm_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Longest world-model answer in tokens (one cut off is no answer) "
        "[default: the longest observation the policy can be shown, from "
        "engine.max_model_len and limits.observation_max_chars; a smaller value is refused].",
    )
    wm_kv_cache_gb: float | None = Field(
        default=None,
        gt=0,
        description="World-model KV cache, GiB [default: 0.5 on CPU; on GPU what "
        "wm_gpu_memory_utilization's share leaves].",
    )
    wm_gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="GPU: the share of the GPU the world model's engine may take; with the "
        "policy engine on the same GPU the two must sum to less than 1 [default: vLLM's "
        "0.92, which leaves no room for a second engine]. Not used on CPU.",
    )
    wm_draft_tokens: int = Field(
        default=5,
        ge=0,
        le=16,
        description="The world model's engine drafts up to this many tokens a step by prompt "
        "lookup (observations often repeat what the context shows; greedy answers stay the "
        "model's; 0: off; measured in docs/benchmarks.md).",
    )
    wm_tensor_parallel_size: int = Field(
        default=1, ge=1, description="GPUs the world model's engine shards its model across."
    )
    wm_cpu_cores: CoreList | None = Field(
        default=None,
        description="CPU build: the world-model engine's cores, e.g. '1', away from the "
        "policy engine's [default: obsspec's placement (`cpu_placement`)].",
    )
    wm_nice: int | None = Field(
        default=None,
        ge=0,
        le=19,
        description="How much nicer (lower CPU priority) the world model's engine runs than "
        "obsspec and the policy's engine, so that commands and real turns get the cores it "
        "shares with them first [default: 10 on the CPU build, where it shares a core with "
        "the sandboxes; 0 on GPU].",
    )

    @model_validator(mode="after")
    def _world_model_needs_speculation(self) -> SpeculationConfig:
        if self.world_model and not self.enabled:
            raise ValueError("world_model (--world-model) is only used with speculation on")
        return self


class TaskAccess(StrictModel):
    """What a run's tasks may reach: local images for their registry images, and the network
    (collect, profile and rl share these settings)."""

    images: ImagesConfig = Field(
        default_factory=ImagesConfig,
        description="Local images for tasks' registry images [default: the config's "
        "top-level [images] table, then OBSSPEC_IMAGE_MAP and --image-map entries].",
    )
    network: NetworkPolicy = Field(
        default=NetworkPolicy.none,
        description="Who gets a network: none, verify (only the verifier), all (the agent "
        "too); under verify, a task with allow_internet gives its agent one as well. "
        "Task image builds get one unless none.",
    )
    sandbox: SandboxCeiling = Field(
        default_factory=SandboxCeiling,
        description="The most a task's sandbox gets, whatever its task.toml asks (cpus, "
        "memory, pids, storage): a task asking more gets this, with a note naming it.",
    )
    verifier_kit: KitMode = Field(
        default=KitMode.auto, description=f"{KIT_MODE_HELP} (docs/tasks.md)."
    )

    def network_identity(self) -> dict[str, str]:
        """The network's part of a run's identity (a command that downloads succeeds or
        fails with it): named only when not the default, so that runs recorded before it
        counted keep their identity."""
        return {} if self.network == NetworkPolicy.none else {"network": str(self.network)}


def access_defaults(images: ImagesConfig | None) -> dict[str, Any]:
    """Pipeline defaults from the global image map, so that run directories record it."""
    return {"images": images.model_dump()} if images is not None else {}


class RolloutSettings(TaskAccess):
    """What every pipeline that plays episodes shares; a RolloutSession is built from it."""

    # The config table's name; settings with no default, and the flag that gives each;
    # keys that moved under [<section>.speculation].
    section: ClassVar[str] = "rollout"
    required_flags: ClassVar[dict[str, str]] = {}
    moved_to_speculation: ClassVar[tuple[str, ...]] = ()

    policy: str = Field(
        default=DEFAULT_MODEL,
        description="Model name or HF directory, or 'oracle' to replay reference solutions.",
    )
    tokenizer: str | None = Field(
        default=None,
        description="Tokenizer (model name or directory) for the oracle policy "
        "[default: the default model].",
    )
    limits: EpisodeLimits = Field(default_factory=collect_limits)
    engine: EngineOptions = Field(default_factory=EngineOptions)
    speculation: SpeculationConfig = Field(default_factory=SpeculationConfig)
    concurrency: int = Field(default=1, ge=1, description="Episodes at once in each worker.")
    max_attempts: int = Field(
        default=3, ge=1, description="Tries per episode when the infrastructure fails."
    )
    sandbox_cpuset: CoreList | None = Field(
        default=None,
        description="Pin every sandbox to these cores, e.g. '1' [default: obsspec's "
        "placement, beside the world model's engine, away from the policy's].",
    )
    cpu_placement: PlacementMode = Field(
        default=PlacementMode.auto,
        description="CPU build: 'auto' places the engines and sandboxes that no cores "
        "setting places (obsspec.rollout.cores); 'off' leaves them to vLLM (every engine on "
        "the same core) and Docker.",
    )

    @model_validator(mode="before")
    @classmethod
    def _speculation_table(cls, data: Any) -> Any:
        """Keys that once sat flat in the table still load, with a warning naming the new
        key; a speculation table given in part keeps the pipeline's own defaults for the rest
        (rl's gate settings, profile's and rl's speculation on)."""
        data = move_deprecated_keys(
            data, cls.moved_to_speculation, section=cls.section, into="speculation"
        )
        if isinstance(data, dict) and isinstance(data.get("speculation"), dict):
            factory = cls.model_fields["speculation"].default_factory
            own = factory().model_dump(exclude_unset=True)  # type: ignore[call-arg, misc]
            data = {**data, "speculation": deep_merge(own, data["speculation"])}
        return data

    @model_validator(mode="after")
    def _engines_share_one_gpu(self) -> RolloutSettings:
        """The policy's and the world model's engines start on the same GPU; each takes its
        share of the GPU's memory, and vLLM checks at start that its share is free."""
        policy = self.engine.gpu_memory_utilization
        wm = self.speculation.wm_gpu_memory_utilization
        in_use = self.speculation.enabled and not self.engine.server
        if in_use and policy is not None and wm is not None and policy + wm >= 1:
            raise ValueError(
                f"engine.gpu_memory_utilization {policy:g} and "
                f"speculation.wm_gpu_memory_utilization {wm:g} sum to {policy + wm:g}: the "
                "two engines share one GPU and must together take less than all of it "
                "(e.g. 0.45 and 0.35)"
            )
        return self

    @model_validator(mode="after")
    def _world_model_answers_hold_an_observation(self) -> RolloutSettings:
        asked, need = self.speculation.wm_max_tokens, self.longest_observation_tokens
        if asked is not None and asked < need:
            raise ValueError(
                f"speculation.wm_max_tokens {asked} cannot hold a full observation: the policy "
                f"can be shown {need} tokens of one (the fewer of engine.max_model_len "
                f"{self.engine.max_model_len} and limits.observation_max_chars "
                f"{self.limits.observation_max_chars} rendered, at most a token per character), "
                f"and an answer cut off is no answer; set it to at least {need}, or leave it "
                "unset (it then follows those two)"
            )
        return self

    @property
    def longest_observation_tokens(self) -> int:
        """Tokens of the longest observation (and its end-of-turn token) the policy can be
        shown: its rendering under the character cap, counted a token per character (ASCII
        text never takes more), or the policy's whole context if that is shorter."""
        chars = longest_observation_chars(self.limits.observation_max_chars)
        return min(self.engine.max_model_len, chars + 1)

    @property
    def wm_answer_tokens(self) -> int:
        """The world model's answer length: as set, else one full observation."""
        return self.speculation.wm_max_tokens or self.longest_observation_tokens

    @property
    def is_oracle(self) -> bool:
        from obsspec.agent.oracle import ORACLE

        return self.policy == ORACLE

    def with_speculation(self, **update: Any):
        """A copy whose speculation settings carry `update` (e.g. enabled=True)."""
        return self.model_copy(update={"speculation": self.speculation.model_copy(update=update)})


class CollectConfig(RolloutSettings):
    section: ClassVar[str] = "collect"
    required_flags: ClassVar[dict[str, str]] = {"tasks": "--tasks", "out": "--out"}

    tasks: str = Field(description="A task directory, a directory of tasks, or a glob.")
    out: Path = Field(description="The run directory (dataset shards, manifest, logs).")
    episodes_per_task: int = Field(default=1, ge=1, description="Episodes of each task.")
    seed: int = Field(default=0, description="Base seed; each episode's seed derives from it.")
    shard_episodes: int = Field(
        default=16, ge=1, description="Episodes per Parquet shard (a shard is written when full)."
    )
    shard_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A partial shard is written after this long, bounding what a kill loses.",
    )
    give_up_after: int = Field(
        default=8,
        ge=1,
        description="Stop the run when this many episodes in a row failed every attempt "
        "(a dead engine or Docker daemon should not burn through the whole task list).",
    )
    strict: bool = Field(default=False, description="A broken task stops the run.")
    overwrite: bool = Field(
        default=False, description="Replace a run directory that holds a different run."
    )
    workers: int = Field(default=0, ge=0, description="Ray workers (0: no Ray, one process).")
    ray_address: str | None = Field(
        default=None, description="Join this Ray cluster (e.g. 'auto') instead of a local one."
    )
    min_free_mb: int = Field(
        default=64, ge=0, description="Refuse to start with less free disk in the run directory."
    )

    @model_validator(mode="after")
    def _ray_needs_workers(self) -> CollectConfig:
        if self.ray_address and self.workers == 0:
            raise ValueError("ray_address needs workers >= 1")
        return self

    def identity(self, task_set: Mapping[str, str] | None = None) -> dict[str, Any]:
        """What decides the data: two invocations with the same identity extend one run.
        Speculation is not part of it: it changes how fast episodes come, not what they are.
        The network does (see `network_identity`), and so do the tasks under --tasks:
        task_set (id -> content hash of those that load) adds its digest, so that tasks
        added, removed or edited under the same path make another run."""
        return {
            "tasks": os.path.abspath(self.tasks),
            "policy": self.policy,
            "episodes_per_task": self.episodes_per_task,
            "seed": self.seed,
            "limits": self.limits.model_dump(mode="json"),
            **self.network_identity(),
            **({} if task_set is None else {"task_set": task_set_digest(task_set)}),
        }


R = TypeVar("R", bound=RolloutSettings)


def load_rollout_config(
    model: type[R],
    config_file: Path | None,
    flags: dict[str, Any],
    *,
    default_policy: str = DEFAULT_MODEL,
    images: ImagesConfig | None = None,
    sets: Overrides | None = None,
) -> R:
    """The `[<model.section>]` table of config_file (if any), overlaid with the --set entries
    of that table (sets), then the flags the user set; the policy defaults to default_policy
    (the global config's default model), the image map to images (the global config's, so
    that the run directory records the map used)."""
    defaults = {"policy": default_policy, **access_defaults(images)}
    required = model.required_flags
    return load_pipeline_config(
        model, model.section, config_file, flags, required=required, defaults=defaults, sets=sets
    )


def load_collect_config(
    config_file: Path | None, flags: dict[str, Any], **defaults: Any
) -> CollectConfig:
    """defaults: default_policy, images and sets (see load_rollout_config)."""
    return load_rollout_config(CollectConfig, config_file, flags, **defaults)
