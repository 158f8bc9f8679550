"""Will one batch fit? A conservative estimate before training, and a clear error after.

The estimate was calibrated on SmolLM2-135M on CPU in float32 (peak resident memory of a
forward and backward pass): about 1.4 x layers x (8 hidden + 4 intermediate) floats per token
of activations, plus 16 bytes per trainable parameter (weights, gradients and two AdamW
moments) and 4 per frozen one. A batch that would not fit is refused before the first step
with the largest `--batch-tokens` that would; a real out-of-memory error mid-run is turned
into the same advice.
"""

from __future__ import annotations

from obsspec.errors import ConfigError
from obsspec.train.config import TrainSettings

ACTIVATION_OVERHEAD = 1.4  # measured peak / counted activation floats (CPU, float32)
HEADROOM = 0.9  # leave a tenth of what is available to everything else


def available_bytes(device: str) -> int | None:
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return free
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def activation_bytes_per_token(config) -> float:
    layers = getattr(config, "num_hidden_layers", 0)
    hidden = getattr(config, "hidden_size", 0)
    intermediate = getattr(config, "intermediate_size", 4 * hidden)
    return ACTIVATION_OVERHEAD * layers * (8 * hidden + 4 * intermediate) * 4


def estimate_bytes(model) -> tuple[float, float]:
    """(fixed bytes, bytes per token in a batch) of training this model."""
    config = model.config
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    already_loaded = 4 * (trainable + frozen)  # counted in what is available now
    fixed = 16 * trainable + 4 * frozen - already_loaded
    return fixed, activation_bytes_per_token(config)


def check_memory(model, settings: TrainSettings, where, longest: int) -> None:
    available = available_bytes(where.device)
    if available is None:
        return
    fixed, per_token = estimate_bytes(model)
    needed = fixed + per_token * settings.batch_tokens  # a full batch, padding included
    if needed <= HEADROOM * available:
        return
    fitting = int((HEADROOM * available - fixed) / per_token)
    advice = (
        f"use --batch-tokens {max(fitting, 0)} or less"
        if fitting >= longest
        else f"the longest sequence ({longest} tokens) does not fit either: lower --max-len"
    )
    raise ConfigError(
        f"--batch-tokens {settings.batch_tokens}: one batch needs about {needed / 2**30:.1f} GiB "
        f"on {where.device}, {available / 2**30:.1f} GiB is available; {advice} "
        "(or train with --lora)"
    )


def is_out_of_memory(error: BaseException) -> bool:
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower()
    return "out of memory" in text or "can't allocate memory" in text


def out_of_memory_error(batch, settings: TrainSettings) -> ConfigError:
    rows, longest = len(batch), max(len(s.ids) for s in batch)
    return ConfigError(
        f"out of memory on a batch of {rows} x {longest} tokens (--batch-tokens "
        f"{settings.batch_tokens}); try --batch-tokens {max(settings.batch_tokens // 2, longest)}"
        " or train with --lora"
    )
