"""A CPU engine left to choose its dtype computes in float32 where bfloat16 would fall back to
torch's poorly batching linear (obsspec.inference.cpu_dtype)."""

from pathlib import Path

from obsspec.inference import cpu_dtype
from obsspec.inference.cpu_dtype import cpu_flags, engine_dtype
from obsspec.inference.vllm_settings import EngineSettings, engine_kwargs

AVX2 = {"fpu", "avx", "avx2", "fma"}


def test_auto_is_float32_on_an_x86_cpu_without_bfloat16_instructions():
    assert engine_dtype("auto", machine="x86_64", flags=AVX2) == "float32"
    for bf16 in ("avx512_bf16", "amx_bf16"):
        assert engine_dtype("auto", machine="x86_64", flags=AVX2 | {bf16}) == "auto"


def test_a_dtype_asked_for_and_other_cpus_are_left_alone():
    assert engine_dtype("bfloat16", machine="x86_64", flags=AVX2) == "bfloat16"
    assert engine_dtype("auto", machine="aarch64", flags=set()) == "auto"


def test_flags_are_read_from_cpuinfo_and_an_unreadable_one_decides_nothing(
    tmp_path: Path, monkeypatch
):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx avx2\n\nprocessor\t: 1\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx", "avx2"}
    assert cpu_flags(tmp_path / "missing") is None
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: None)
    assert engine_dtype("auto", machine="x86_64") == "auto"


def test_the_cpu_engine_gets_the_chosen_dtype_and_the_gpu_engine_the_setting(tmp_path):
    settings = EngineSettings(model=tmp_path)
    assert engine_kwargs(settings, "cpu")["dtype"] == engine_dtype("auto")
    assert engine_kwargs(settings, "cuda")["dtype"] == "auto"
    told = EngineSettings(model=tmp_path, dtype="bfloat16")
    assert engine_kwargs(told, "cpu")["dtype"] == "bfloat16"
