"""What each GPU of an `obsspec rl` placement holds, estimated before anything starts.

    policy, wm = ModelShape.named("qwen3-8b"), ModelShape.named("qwen3-0.6b")
    plan = plan_memory(config, policy, wm, gpu_gib=80)
    plan.fits                 every GPU's estimate is within its memory
    plan.gpus[0].roles        [RoleMemory("rollout-0 policy engine", {"weights": ..., ...})]
    plan.as_dict()            what `bench/gpu_check.py --dry-run` prints

Estimates, not measurements: each part is named so a user can see where the memory goes.
- An engine holds its weights in bfloat16 (split over its tensor-parallel GPUs), its KV cache
  (the configured budget) and a runtime reserve (CUDA context, CUDA graphs, activations of
  the largest batch): `ENGINE_RESERVE_GIB`, the figure vLLM's own profiling usually lands
  near for models of this size. Under `gpu_memory_utilization` the engine takes that share of
  the GPU whole.
- A policy-trainer rank holds its 1/N of the float32 master weights, float32 gradients and
  AdamW's two moments (16 bytes per parameter over N ranks, FSDP2), the bfloat16 weights of
  the units FSDP2 has gathered (the root unit: embeddings and output layer; two decoder
  layers, one prefetched), the activations of one forward pass of `grpo.batch_tokens` tokens,
  the logits of its response tokens (bfloat16 out of the output layer, a float32 copy, the
  log-softmax and its gradient: 14 bytes each, a chunk of positions at a time:
  obsspec.train.model.target_logprobs), FSDP2's reduce-scatter buffers (one decoder layer's
  whole gradient in `reduce_dtype`, double-buffered) and, at the optimizer step, foreach
  AdamW's temporaries (about a float32 copy of the rank's parameters) beyond what the
  passes' transients held.
- Activations per token and layer: the tensors a decoder layer keeps for its backward in
  bfloat16 (layer input, normed inputs, q/k/v, attention output, MLP gate/up/activation);
  with activation checkpointing only each layer's input stays, and one layer's set is live
  while it is recomputed. Flash attention keeps no seq x seq matrix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obsspec.errors import ConfigError
from obsspec.rl.config import RLConfig
from obsspec.train.model import LOGITS_CHUNK

GIB = 1 << 30
ENGINE_RESERVE_GIB = 2.0
BF16, FP32 = 2, 4
ADAM_BYTES = FP32 * 4  # master weight, gradient, two moments
# a logit, at once: the output layer's bfloat16 value, its float32 copy, the log-softmax and
# its gradient (obsspec.train.model.target_logprobs, a chunk of positions at a time)
LOGITS_BYTES = BF16 + 3 * FP32


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer (Llama / Qwen3 layout: GQA attention, SwiGLU MLP)."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> ModelShape:
        try:
            hidden = config["hidden_size"]
            heads = config["num_attention_heads"]
            return cls(
                hidden=hidden,
                layers=config["num_hidden_layers"],
                intermediate=config["intermediate_size"],
                heads=heads,
                kv_heads=config.get("num_key_value_heads") or heads,
                head_dim=config.get("head_dim") or hidden // heads,
                vocab=config["vocab_size"],
                tied=bool(config.get("tie_word_embeddings", False)),
            )
        except KeyError as e:
            raise ConfigError(f"model config has no {e.args[0]}: not a decoder shape") from e

    @classmethod
    def of(cls, name_or_dir: str) -> ModelShape:
        """A named reference shape, or the config.json of an HF directory."""
        if name_or_dir in SHAPES:
            return SHAPES[name_or_dir]
        path = Path(name_or_dir) / "config.json"
        if not path.is_file():
            raise ConfigError(
                f"{name_or_dir}: neither a known shape ({', '.join(SHAPES)}) nor a model "
                "directory with a config.json"
            )
        return cls.from_hf_config(json.loads(path.read_text()))

    def with_vocab(self, vocab: int) -> ModelShape:
        return ModelShape(**{**self.__dict__, "vocab": vocab})

    def hf_config(self) -> dict[str, Any]:
        """A Qwen3 config.json of this shape (random-weight models in the GPU check)."""
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "intermediate_size": self.intermediate,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000,
            "max_position_embeddings": 40960,
            "torch_dtype": "bfloat16",
        }

    @property
    def layer_params(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden + 2 * self.head_dim

    @property
    def root_params(self) -> int:
        """Embeddings, the output layer (unless tied) and the final norm."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * BF16

    def layer_activation_bytes_per_token(self) -> int:
        kv = self.kv_heads * self.head_dim
        saved = 6 * self.hidden + 2 * kv + self.heads * self.head_dim + 4 * self.intermediate
        return saved * BF16

    def activation_bytes_per_token(self, checkpointing: bool) -> int:
        if checkpointing:  # each layer's input, plus the layer being recomputed
            return self.layers * self.hidden * BF16 + self.layer_activation_bytes_per_token()
        return self.layers * self.layer_activation_bytes_per_token()


SHAPES = {  # from the models' published config.json files
    "qwen3-0.6b": ModelShape(1024, 28, 3072, 16, 8, 128, 151936, tied=True),
    "qwen3-1.7b": ModelShape(2048, 28, 6144, 16, 8, 128, 151936, tied=True),
    "qwen3-8b": ModelShape(4096, 36, 12288, 32, 8, 128, 151936, tied=False),
    "qwen3-32b": ModelShape(5120, 64, 25600, 64, 8, 128, 151936, tied=False),
}


@dataclass
class RoleMemory:
    role: str
    parts: dict[str, float]  # bytes by what holds them

    @property
    def total(self) -> float:
        return sum(self.parts.values())


@dataclass
class GpuPlan:
    index: int
    capacity: float  # bytes
    roles: list[RoleMemory] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(r.total for r in self.roles)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


@dataclass
class MemoryPlan:
    gpus: list[GpuPlan]
    notes: list[str]

    @property
    def fits(self) -> bool:
        return all(g.fits for g in self.gpus)

    def as_dict(self) -> dict[str, Any]:
        def gib(value: float) -> float:
            return round(value / GIB, 2)

        return {
            "fits": self.fits,
            "gpus": [
                {
                    "gpu": g.index,
                    "capacity_gib": gib(g.capacity),
                    "total_gib": gib(g.total),
                    "fits": g.fits,
                    "roles": [
                        {"role": r.role, **{k: gib(v) for k, v in r.parts.items()}} for r in g.roles
                    ],
                }
                for g in self.gpus
            ],
            "notes": self.notes,
        }


def engine_memory(
    role: str,
    shape: ModelShape,
    *,
    tp: int,
    kv_cache_gb: float | None,
    utilization: float | None,
    gpu_bytes: float,
) -> RoleMemory:
    """One engine's share of each of its tensor-parallel GPUs: under a GPU share without a
    fixed cache, the cache is what the share leaves (vLLM sizes it so)."""
    weights, reserve = shape.params * BF16 / tp, ENGINE_RESERVE_GIB * GIB
    if kv_cache_gb is not None:
        kv = kv_cache_gb * GIB / tp
    elif utilization is not None:
        kv = utilization * gpu_bytes - weights - reserve
    else:
        kv = 0.0
    return RoleMemory(role, {"weights_bf16": weights, "kv_cache": kv, "runtime_reserve": reserve})


def trainer_memory(
    role: str,
    shape: ModelShape,
    *,
    ranks: int,
    batch_tokens: int,
    checkpointing: bool,
    reduce_bytes: int = FP32,
) -> RoleMemory:
    """One trainer rank's peak, by part. The forward and backward passes' transients
    (gathered weights, activations, logits, reduce buffers) are gone by the optimizer step,
    whose own temporaries (foreach AdamW: about one float32 copy of the rank's parameters)
    count only as far as they exceed them."""
    gathered = shape.root_params + (0 if ranks == 1 else 2 * shape.layer_params)
    logits = min(batch_tokens, LOGITS_CHUNK) * shape.vocab * LOGITS_BYTES
    passes = {
        "gathered_bf16": gathered * BF16 if ranks > 1 else shape.params * BF16,
        "activations": batch_tokens * shape.activation_bytes_per_token(checkpointing),
        "logits": logits,
        # FSDP2 reduce-scatters one unit's whole gradient at a time, double-buffered
        "reduce_buffers": 0 if ranks == 1 else 2 * shape.layer_params * reduce_bytes,
    }
    optimizer_temporaries = shape.params * FP32 / ranks
    return RoleMemory(
        role,
        {
            "master_grads_adam_fp32": shape.params * ADAM_BYTES / ranks,
            **passes,
            "optimizer_step_extra": max(0.0, optimizer_temporaries - sum(passes.values())),
        },
    )


def plan_memory(
    config: RLConfig, policy: ModelShape, wm: ModelShape, *, gpu_gib: float
) -> MemoryPlan:
    """Every GPU the placement asks for, in order: rollout workers' GPUs, the policy
    trainer's ranks, the co-trainer's GPU."""
    p, engine, spec, grpo = config.placement, config.engine, config.speculation, config.grpo
    capacity = gpu_gib * GIB
    gpus: list[GpuPlan] = []
    notes: list[str] = []
    if p.gpus_requested == 0:
        return MemoryPlan([], ["no GPUs asked for: every role runs on the CPUs"])
    engines = [  # (name, shape, tensor-parallel GPUs, fixed cache, GPU share)
        ("policy", policy, engine.tensor_parallel_size, engine.kv_cache_gb,
         engine.gpu_memory_utilization),
        ("world-model", wm, spec.wm_tensor_parallel_size, spec.wm_kv_cache_gb,
         spec.wm_gpu_memory_utilization),
    ]  # fmt: skip
    per_worker = max(1, int(p.rollout_gpus))
    if p.rollout_gpus and p.rollout_gpus < 1:
        notes.append(f"rollout_gpus {p.rollout_gpus:g}: workers share GPUs (not planned here)")
    for worker in range(p.rollout_workers if p.rollout_gpus >= 1 else 0):
        worker_gpus = [GpuPlan(len(gpus) + i, capacity) for i in range(per_worker)]
        for i, gpu in enumerate(worker_gpus):
            gpu.roles += [
                engine_memory(
                    f"rollout-{worker} {name} engine", shape, tp=tp, kv_cache_gb=kv,
                    utilization=share, gpu_bytes=capacity,
                )
                for name, shape, tp, kv, share in engines
                if i < tp
            ]  # fmt: skip
        gpus += worker_gpus
    ranks = p.policy_ranks
    batch = grpo.batch_tokens or config.engine.max_model_len
    checkpointing = grpo.activation_checkpointing
    for rank in range(ranks if p.trainer_gpus else 0):
        gpu = GpuPlan(len(gpus), capacity)
        gpu.roles.append(
            trainer_memory(
                f"policy trainer rank {rank}/{ranks}",
                policy,
                ranks=ranks,
                batch_tokens=batch,
                checkpointing=checkpointing,
                reduce_bytes=BF16 if grpo.reduce_dtype == "bfloat16" else FP32,
            )
        )
        gpus.append(gpu)
    if p.wm_trainer_gpus and config.cotrain.enabled:
        gpu = GpuPlan(len(gpus), capacity)
        wm_batch = config.cotrain.batch_tokens or config.engine.max_model_len
        wm_checkpointing = config.cotrain.activation_checkpointing
        gpu.roles.append(
            trainer_memory(
                "world-model co-trainer",
                wm,
                ranks=1,
                batch_tokens=wm_batch,
                checkpointing=wm_checkpointing,
            )
        )
        gpus.append(gpu)
    shapes = {name: shape for name, shape, *_ in engines}
    notes += kv_notes(config, gpus, shapes, {name: tp for name, _, tp, *_ in engines})
    return MemoryPlan(gpus, notes)


def kv_notes(
    config: RLConfig, gpus: list[GpuPlan], shapes: dict[str, ModelShape], tps: dict[str, int]
) -> list[str]:
    """How many full-length contexts the first worker's engines' caches hold, against the
    episodes a worker plays at once (fewer: episodes wait for cache, which slows, never
    fails); a share too small for the weights is said too."""
    notes = []
    length = config.engine.max_model_len
    engines = {r.role: r for g in gpus for r in g.roles if r.role.startswith("rollout-0 ")}
    for name, shape in shapes.items():
        role = engines.get(f"rollout-0 {name} engine")
        if role is None:
            continue
        kv = role.parts["kv_cache"] * tps[name]
        if kv <= 0:
            notes.append(f"{name} engine: its GPU share leaves no room for a KV cache")
            continue
        holds = kv / (shape.kv_bytes_per_token() * length)
        notes.append(
            f"{name} engine KV cache ({kv / GIB:.1f} GiB) holds {holds:.1f} contexts of "
            f"{length} tokens; a worker plays {config.concurrency} episodes at once"
        )
    return notes
