"""The dtype a CPU engine computes in when its settings leave it to obsspec (`dtype = "auto"`).

    engine_dtype("auto")      # 'float32' on an x86 CPU without bfloat16 instructions, else 'auto'

vLLM's CPU build runs a bfloat16 model's linear layers through oneDNN, which needs the CPU's
bfloat16 instructions (x86: AVX512_BF16 or AMX_BF16). Without them it says "Failed to create
oneDNN linear, fallback to torch linear" once and runs torch's, which batches poorly: on a
2-core AMD EPYC with AVX2 only, the 135M default model decoding 8 streams of 64 tokens made
18.6 tokens/s in bfloat16 and 65.6 in float32 (one stream: 14.9 and 14.0). Eight episodes
sharing the engine are the regime speculation is measured in, so there 'auto' means float32.
The weights the trainer sends stay bfloat16 (obsspec.rl.weight_sync); the engine holds them
in float32, exactly. A dtype set explicitly is always vLLM's to honour.
"""

from __future__ import annotations

import platform
from pathlib import Path

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # either lets oneDNN run bfloat16
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str] | None:
    """The first processor's flags (None where /proc/cpuinfo cannot say)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return set(value.split())
    return None


def native_bf16(machine: str | None = None, flags: set[str] | None = None) -> bool | None:
    """Whether this CPU computes bfloat16 natively (x86: one of BF16_FLAGS); None where that
    cannot be told (another architecture, no /proc/cpuinfo). The trainers ask it too
    (obsspec.train.precision): autocast to bfloat16 only where it is native."""
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return None
    flags = cpu_flags() if flags is None else flags
    return None if flags is None else bool(flags & BF16_FLAGS)


def engine_dtype(asked: str, *, machine: str | None = None, flags: set[str] | None = None) -> str:
    """What a CPU engine is started with: the dtype asked for, but float32 for 'auto' where
    bfloat16 would fall back to torch's poorly batching linear."""
    if asked == "auto" and native_bf16(machine, flags) is False:
        return "float32"
    return asked
