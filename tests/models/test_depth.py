"""`train-wm --layers K`: a model made of K of another's decoder layers computes exactly what
the original computes through those layers, keeps its tokenizer, and is refused clearly where
its layers cannot be taken."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from obsspec.errors import ConfigError, ModelError
from obsspec.models.depth import chosen_layers, shallow_model


def test_even_layers_keep_the_first_and_the_last_and_spread_the_rest():
    assert chosen_layers(30, 6) == [0, 6, 12, 17, 23, 29]
    assert chosen_layers(30, 15)[:3] == [0, 2, 4] and chosen_layers(30, 15)[-1] == 29
    assert chosen_layers(30, 2) == [0, 29]
    assert chosen_layers(4, 4) == [0, 1, 2, 3]
    assert chosen_layers(30, 6, "bottom") == [0, 1, 2, 3, 4, 29]
    for k in (2, 6, 10, 15, 30):
        kept = chosen_layers(30, k)
        assert len(set(kept)) == k and kept == sorted(kept)


@pytest.mark.parametrize("k", [1, 0, 31])
def test_a_layer_count_out_of_range_names_the_flag_and_the_range(k):
    with pytest.raises(
        ConfigError, match=rf"--layers {k}: the model has 30 layers; choose 2 to 30"
    ):
        chosen_layers(30, k)


def logits(model_dir, ids):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_the_shallow_model_computes_what_the_base_computes_through_those_layers(
    deep_tiny_model_dir, tmp_path
):
    from transformers import AutoModelForCausalLM

    shallow = shallow_model(deep_tiny_model_dir, 3, tmp_path)
    assert shallow.kept == [0, 2, 3] and shallow.of == 4
    config = json.loads((shallow.path / "config.json").read_text())
    assert config["num_hidden_layers"] == 3
    for name in ("tokenizer.json", "chat_template.jinja"):
        assert (shallow.path / name).read_bytes() == (deep_tiny_model_dir / name).read_bytes()
    assert not (shallow.path / "obsspec-model.json").exists()  # the base's hashes: not ours

    ids = torch.tensor([[1, 20, 300, 4000, 5]])
    base = AutoModelForCausalLM.from_pretrained(deep_tiny_model_dir, dtype=torch.float32)
    base.model.layers = torch.nn.ModuleList(base.model.layers[i] for i in shallow.kept)
    base.config.num_hidden_layers = 3
    for new, layer in enumerate(base.model.layers):
        layer.self_attn.layer_idx = new
    with torch.no_grad():
        expected = base(input_ids=ids).logits
    assert torch.allclose(logits(shallow.path, ids), expected, atol=1e-5)


def test_the_copy_is_made_once_and_a_changed_base_gets_a_new_one(deep_tiny_model_dir, tmp_path):
    first = shallow_model(deep_tiny_model_dir, 2, tmp_path)
    mtime = (first.path / "model.safetensors").stat().st_mtime_ns
    again = shallow_model(deep_tiny_model_dir, 2, tmp_path)
    assert again.path == first.path
    assert (again.path / "model.safetensors").stat().st_mtime_ns == mtime
    assert shallow_model(deep_tiny_model_dir, 4, tmp_path).path == deep_tiny_model_dir  # all
    changed = tmp_path / "changed"
    shutil.copytree(deep_tiny_model_dir, changed)
    tensors = load_file(changed / "model.safetensors")
    save_file({k: v + 1 for k, v in tensors.items()}, changed / "model.safetensors")
    assert shallow_model(changed, 2, tmp_path).path != first.path
    assert not list((tmp_path / "shallow").glob(".*tmp*"))  # nothing half-made left


def test_sharded_weights_keep_their_shards_and_index(deep_tiny_model_dir, tmp_path):
    sharded = tmp_path / "sharded"
    shutil.copytree(deep_tiny_model_dir, sharded)
    tensors = load_file(sharded / "model.safetensors")
    (sharded / "model.safetensors").unlink()
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}  # fmt: skip
    weight_map = {}
    for shard, keys in halves.items():
        save_file({k: tensors[k] for k in keys}, sharded / shard, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(keys, shard))
    index = {"metadata": {}, "weight_map": weight_map}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))

    shallow = shallow_model(sharded, 2, tmp_path / "models")
    written = json.loads((shallow.path / "model.safetensors.index.json").read_text())
    assert set(written["weight_map"].values()) <= set(halves)
    layers = {
        int(k.split(".layers.")[1].split(".")[0]) for k in written["weight_map"] if ".layers." in k
    }
    assert layers == {0, 1}
    ids = torch.tensor([[1, 2, 3]])
    single = shallow_model(deep_tiny_model_dir, 2, tmp_path / "models")
    assert torch.allclose(logits(shallow.path, ids), logits(single.path, ids), atol=1e-6)


def test_per_layer_config_lists_are_sliced(deep_tiny_model_dir, tmp_path):
    base = tmp_path / "typed"
    shutil.copytree(deep_tiny_model_dir, base)
    config = json.loads((base / "config.json").read_text())
    config["layer_types"] = ["a", "b", "c", "d"]
    (base / "config.json").write_text(json.dumps(config))
    shallow = shallow_model(base, 2, tmp_path / "models")
    written = json.loads((shallow.path / "config.json").read_text())
    assert (
        written["layer_types"] == ["a", "d"] and written["architectures"] == config["architectures"]
    )


def broken_copy(base, tmp_path, change):
    copy = tmp_path / "broken"
    shutil.copytree(base, copy)
    change(copy)
    return copy


def rename_layers(directory):
    tensors = load_file(directory / "model.safetensors")
    renamed = {k.replace("model.layers.", "model.blocks."): v for k, v in tensors.items()}
    save_file(renamed, directory / "model.safetensors")


def edit_config(**fields):
    def change(directory):
        config = json.loads((directory / "config.json").read_text())
        for key, value in fields.items():
            if value is None:
                config.pop(key)
            else:
                config[key] = value
        (directory / "config.json").write_text(json.dumps(config))

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (rename_layers, r"weights named `<prefix>\.layers\.<i>\.\*` under one prefix; found none"),
        (edit_config(num_hidden_layers=None), "has no top-level num_hidden_layers"),
        (edit_config(mlp_only_layers=[1]), "mlp_only_layers names layers by index"),
        (
            edit_config(use_sliding_window=True, max_window_layers=2),
            "sliding-window attention on some layers only",
        ),
        (lambda d: (d / "model.safetensors").unlink(), "needs safetensors weights"),
    ],
)
def test_a_model_whose_layers_cannot_be_taken_is_refused(
    deep_tiny_model_dir, tmp_path, change, message
):
    base = broken_copy(deep_tiny_model_dir, tmp_path, change)
    with pytest.raises(ModelError, match=message):
        shallow_model(base, 2, tmp_path / "models")
    left = [p for p in (tmp_path / "models").glob("shallow/*") if p.suffix != ".lock"]
    assert not left  # nothing half-made
