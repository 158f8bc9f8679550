from pathlib import Path

import pytest

from obsspec.config import GlobalConfig, load_global_config
from obsspec.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "obsspec.toml"
    path.write_text(text)
    return path


def test_defaults_file_then_flags(tmp_path):
    path = write(tmp_path, 'base_image = "img:1"\n[paths]\ncache_dir = "/from/file"\n')
    assert load_global_config(path).paths.cache_dir == Path("/from/file")
    merged = load_global_config(path, {"paths": {"cache_dir": Path("/from/flag")}})
    assert merged.paths.cache_dir == Path("/from/flag")
    assert merged.base_image == "img:1"  # untouched by the flag overlay
    assert load_global_config().base_image == GlobalConfig().base_image


def test_pipeline_sections_are_left_to_their_pipelines(tmp_path):
    path = write(tmp_path, "[collect]\nconcurrency = 4\n")
    assert load_global_config(path) == GlobalConfig()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[paths\n", "is not valid TOML"),
        ("[pathz]\ncache_dir = '/x'\n", "unknown key 'pathz'"),
        ("[paths]\ncache_dr = '/x'\n", "field 'paths.cache_dr'"),
        ("base_image = 3\n", "field 'base_image'"),
    ],
)
def test_bad_config_names_file_and_field(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_global_config(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_global_config(tmp_path / "nope.toml")
