from pathlib import Path

import pytest
from pydantic import Field

from obsspec.config import GlobalConfig, StrictModel, load_global_config, load_pipeline_config
from obsspec.errors import ConfigError
from obsspec.overrides import Overrides


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


# --- YAML config files ------------------------------------------------------------------------

TOML = """\
default_model = "m"
[paths]
cache_dir = "/c"
[rl]
tasks = "t"
out = "o"
[rl.grpo]
lr = 1e-6
group_size = 8
[rl.limits]
max_turns = 3
"""
YAML = """\
default_model: m
paths: {cache_dir: /c}
rl:
  tasks: t
  out: o
  grpo:
    lr: 1e-6  # YAML 1.1 reads this as text; the model makes it a number
    group_size: 8
  limits:
    max_turns: 3
"""


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_a_yaml_file_reads_as_the_same_toml_file(tmp_path, suffix):
    from obsspec.rl.config import load_rl_config

    toml, yml = tmp_path / "c.toml", (tmp_path / "c").with_suffix(suffix)
    toml.write_text(TOML)
    yml.write_text(YAML)
    assert load_global_config(yml) == load_global_config(toml)
    assert load_global_config(yml).default_model == "m"
    assert load_rl_config(yml, {}) == load_rl_config(toml, {})
    assert load_rl_config(yml, {}).grpo.lr == 1e-6


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rl: [a\n", "is not valid YAML: expected ',' or ']', but got '<stream end>' at line 2"),
        ("- rl\n- collect\n", "the top level must be a mapping of tables (rl:, collect:, ...), "
         "not a list"),
        ("pathz: {cache_dir: /x}\n", "unknown key 'pathz'"),
        ("paths: {cache_dr: /x}\n", "field 'paths.cache_dr'"),
    ],
)  # fmt: skip
def test_bad_yaml_names_the_file(tmp_path, text, expected):
    path = tmp_path / "obsspec.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_global_config(path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_an_empty_yaml_file_is_the_defaults_and_a_missing_one_an_error(tmp_path):
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing yet\n")
    assert load_global_config(empty) == GlobalConfig()
    with pytest.raises(ConfigError, match=r"nope\.yaml does not exist"):
        load_global_config(tmp_path / "nope.yaml")


# --- --set entries in the loaders -------------------------------------------------------------


class Inner(StrictModel):
    lr: float = Field(default=1e-3, description="A rate.")
    size: int = Field(default=4, description="A size.")


class Demo(StrictModel):
    name: str = Field(default="d", description="A name.")
    inner: Inner = Field(default_factory=Inner, description="A table.")


def test_defaults_then_file_then_set_then_flags(tmp_path):
    path = write(tmp_path, '[demo]\nname = "file"\n[demo.inner]\nlr = 0.1\nsize = 5\n')
    from_file = Demo(name="file", inner=Inner(lr=0.1, size=5))
    assert load_pipeline_config(Demo, "demo", path, {}) == from_file
    sets = Overrides.parse(["inner.lr=1e-6"])
    config = load_pipeline_config(Demo, "demo", path, {"inner": {"size": 7}}, sets=sets)
    assert config == Demo(name="file", inner=Inner(lr=1e-6, size=7))
    assert load_pipeline_config(Demo, "demo", None, {}, sets=sets) == Demo(inner=Inner(lr=1e-6))


def test_shared_keys_go_to_the_shared_settings_the_rest_to_the_table(tmp_path):
    sets = Overrides.parse(["default_model=m", "inner.size=9", "paths.cache_dir=/c"])
    shared = load_global_config(None, None, sets, table="demo")
    assert (shared.default_model, shared.paths.cache_dir) == ("m", Path("/c"))
    assert load_pipeline_config(Demo, "demo", None, {}, sets=sets).inner.size == 9
    with pytest.raises(ConfigError) as info:  # a command without a table: shared keys only
        load_global_config(None, None, sets)
    assert str(info.value) == (
        "--set inner.size=9: unknown key 'inner'; the keys of the shared settings (this "
        "command has no table): paths, base_image, default_model, images"
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("inner.lrr=1", "--set inner.lrr=1: unknown key 'inner.lrr'; the keys of "
         "[demo.inner]: lr, size"),
        ("innr.lr=1", "--set innr.lr=1: unknown key 'innr'; the keys of [demo]: name, inner"),
        ("inner.size=big", "--set inner.size=big: field 'inner.size': Input should be a valid "
         "integer"),
    ],
)  # fmt: skip
def test_a_refused_entry_is_named_as_typed(entry, message):
    with pytest.raises(ConfigError) as info:
        load_pipeline_config(Demo, "demo", None, {}, sets=Overrides.parse([entry]))
    assert str(info.value).startswith(message)


def test_a_bad_key_of_the_file_is_still_the_file(tmp_path):
    path = write(tmp_path, "[demo.inner]\nsiz = 5\n")
    with pytest.raises(ConfigError, match=r"obsspec\.toml \[demo\] and flags: field 'inner\.siz'"):
        load_pipeline_config(Demo, "demo", path, {}, sets=Overrides.parse(["inner={lr = 1}"]))


def test_set_and_a_flag_for_one_key_is_an_error(tmp_path):
    sets = Overrides.parse(["inner.lr=1e-6"], flag_for=lambda key: "--lr")
    with pytest.raises(ConfigError, match=r"--set inner\.lr=1e-6 and --lr both set \[demo\] inner"):
        load_pipeline_config(Demo, "demo", None, {"inner": {"lr": 0.1}}, sets=sets)
    shared = Overrides.parse(["paths.cache_dir=/a"], flag_for=lambda key: "--cache-dir")
    with pytest.raises(ConfigError, match=r"--set paths\.cache_dir=/a and --cache-dir both set"):
        load_global_config(None, {"paths": {"cache_dir": Path("/b")}}, shared)


def test_set_values_reach_the_resolved_config_a_run_directory_records(tmp_path):
    from obsspec.rl.config import load_rl_config

    sets = Overrides.parse(["grpo.lr=1e-6", "grpo.group_size=8", "speculation.depth=2"])
    config = load_rl_config(None, {"tasks": "t", "out": tmp_path, "steps": 2}, sets=sets)
    recorded = config.model_dump(mode="json")  # what OUT/rl-run.json holds
    assert (recorded["grpo"]["lr"], recorded["grpo"]["group_size"]) == (1e-6, 8)
    assert (recorded["speculation"]["depth"], recorded["steps"]) == (2, 2)
