"""The trainer on a tiny model: the loss goes only on labelled tokens and falls; checkpoints
resume exactly; LoRA saves merged; bad settings fail clearly."""

from __future__ import annotations

import json

import pytest
import torch

from obsspec.errors import ConfigError
from obsspec.rundirs import MARKER
from obsspec.train.checkpoint import prepare_out
from obsspec.train.config import LoraSettings, TrainSettings
from obsspec.train.loop import train
from obsspec.train.memory import check_memory, is_out_of_memory
from obsspec.train.model import batch_tensors, labelled_loss_sum, load_model
from obsspec.train.precision import Placement
from obsspec.train.sequences import Sample, pack

CPU = Placement("cpu", "float32")


@pytest.fixture(scope="module")
def sequences(builder):
    """Three short chats whose second half (the 'observation') is learnable."""
    samples = []
    for word in ("alpha", "beta", "gamma"):
        prompt = builder.prompt_ids("You echo.", f"say {word}")
        samples.append(Sample(prompt, [*builder.encode(f"{word} {word} {word}"), 2]))
    return pack(samples, max_len=512).sequences


def settings(**kw) -> TrainSettings:
    base = {"lr": 3e-3, "warmup_steps": 0, "batch_tokens": 1024, "max_len": 512, "seed": 0}
    return TrainSettings(**(base | kw))


def test_the_loss_counts_labelled_tokens_only(tiny_model_dir, sequences):
    model = load_model(tiny_model_dir, CPU, None)
    ids, attention, labels = batch_tensors(sequences, 0, "cpu")
    loss, count = labelled_loss_sum(model, ids, attention, labels)
    assert count == sum(s.target_tokens for s in sequences)
    # the same sum from the full logits, taken only where the next token is labelled
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    every = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    assert torch.allclose(loss, every[labels[:, 1:] > 0].sum(), rtol=1e-4)


def test_label_weights_scale_each_token_loss_and_sum_to_the_count(tiny_model_dir, sequences):
    model = load_model(tiny_model_dir, CPU, None)
    ids, attention, labels = batch_tensors(sequences, 0, "cpu")
    plain, _ = labelled_loss_sum(model, ids, attention, labels > 0)  # a boolean mask: weights 1
    weights = labels.clone()
    weights[0] *= 3.0  # the first sequence's tokens count three times
    loss, count = labelled_loss_sum(model, ids, attention, weights)
    first, _ = labelled_loss_sum(model, ids[:1], attention[:1], labels[:1])
    assert torch.allclose(loss, plain + 2 * first, rtol=1e-4)
    assert count == sum(s.target_tokens for s in sequences) + 2 * sequences[0].target_tokens


def test_no_gradient_reaches_unlabelled_positions(tiny_model_dir, sequences):
    model = load_model(tiny_model_dir, CPU, None)
    ids, attention, labels = batch_tensors(sequences[:1], 0, "cpu")
    embeddings = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    hidden = model.get_decoder()(inputs_embeds=embeddings, attention_mask=attention)
    targets = labels[:, 1:] > 0
    logits = model.get_output_embeddings()(hidden.last_hidden_state[:, :-1][targets])
    torch.nn.functional.cross_entropy(logits, ids[:, 1:][targets]).backward()
    last_input = int(targets[0].nonzero().max())  # the last position that predicts a label
    assert embeddings.grad[0, last_input + 1 :].abs().sum() == 0  # after it: no influence
    assert embeddings.grad[0, : last_input + 1].abs().sum() > 0


@pytest.mark.slow
def test_training_lowers_the_loss_on_labelled_tokens(tiny_model_dir, sequences, tmp_path):
    every_epoch = settings(epochs=12, eval_loss_every_epoch=True)
    outcome = train(tiny_model_dir, sequences, every_epoch, tmp_path / "out", held_out=sequences)
    assert outcome.steps == 12
    assert outcome.eval_loss_after < 0.75 * outcome.eval_loss_before
    assert [epoch for epoch, _ in outcome.eval_loss_by_epoch] == list(range(1, 13))
    assert outcome.eval_loss_by_epoch[-1][1] == pytest.approx(outcome.eval_loss_after)
    assert outcome.eval_loss_by_epoch[0][1] > outcome.eval_loss_after
    assert outcome.last_loss < outcome.first_loss
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["num_hidden_layers"] == 2  # a plain HF model directory at OUT
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert (tmp_path / "out" / "tokenizer.json").is_file()


def test_observation_weighting_makes_the_step_loss_a_mean_over_observations(
    tiny_model_dir, builder, tmp_path
):
    samples = [
        Sample(builder.prompt_ids("You echo.", f"say {w}"), builder.encode(f"{w} " * n))
        for w, n in (("alpha", 1), ("beta", 9))
    ]
    model = load_model(tiny_model_dir, CPU, None)
    per_observation = []
    for sequence in pack(samples, 512).sequences:
        loss, count = labelled_loss_sum(model, *batch_tensors([sequence], 0, "cpu"))
        per_observation.append(loss.item() / count)
    weighted = pack(samples, 512, weighting="observation").sequences
    one_step = settings(max_steps=1, loss_weighting="observation")
    outcome = train(tiny_model_dir, weighted, one_step, tmp_path / "out")
    assert outcome.first_loss == pytest.approx(sum(per_observation) / 2, rel=1e-4)


@pytest.mark.slow
def test_a_resumed_run_continues_exactly(tiny_model_dir, sequences, tmp_path):
    many = sequences * 2  # two batches per epoch at this budget
    small = settings(epochs=2, batch_tokens=256, max_len=256, checkpoint_every=1)
    losses: dict[str, list[float]] = {"whole": [], "split": []}
    train(
        tiny_model_dir,
        many,
        small,
        tmp_path / "whole",
        progress=lambda p: losses["whole"].append(p.loss),
    )
    stopped = small.model_copy(update={"max_steps": 2})
    train(
        tiny_model_dir,
        many,
        stopped,
        tmp_path / "split",
        progress=lambda p: losses["split"].append(p.loss),
    )
    resumed = train(
        tiny_model_dir,
        many,
        small,
        tmp_path / "split",
        resume=True,
        progress=lambda p: losses["split"].append(p.loss),
    )
    assert resumed.resumed_from == 2
    assert losses["split"] == pytest.approx(losses["whole"], rel=1e-5)


def test_resume_without_a_checkpoint_is_refused(tiny_model_dir, sequences, tmp_path):
    with pytest.raises(ConfigError, match="--resume: no checkpoint"):
        train(tiny_model_dir, sequences, settings(), tmp_path / "new", resume=True)


def test_resume_with_other_settings_names_the_difference(tiny_model_dir, sequences, tmp_path):
    train(tiny_model_dir, sequences, settings(max_steps=1), tmp_path / "out")
    with pytest.raises(ConfigError, match="lr"):
        train(tiny_model_dir, sequences, settings(lr=1e-2), tmp_path / "out", resume=True)


def test_lora_trains_adapters_and_saves_a_merged_model(tiny_model_dir, sequences, tmp_path):
    from safetensors.torch import load_file

    lora = settings(epochs=2, lora=LoraSettings(rank=4))
    train(tiny_model_dir, sequences, lora, tmp_path / "out")
    merged = load_file(tmp_path / "out" / "model.safetensors")
    base = load_file(tiny_model_dir / "model.safetensors")
    assert set(merged) == set(base)  # no adapter tensors: vLLM loads it as is
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[name], base[name])


def test_a_batch_that_cannot_fit_is_refused_with_a_smaller_budget(tiny_model_dir):
    model = load_model(tiny_model_dir, CPU, None)
    huge = settings(batch_tokens=10**10, max_len=512)
    with pytest.raises(ConfigError, match=r"--batch-tokens 10000000000: .* use --batch-tokens \d+"):
        check_memory(model, huge, CPU, longest=512)
    check_memory(model, settings(), CPU, longest=512)  # the default fits


def test_allocation_failures_are_recognised():
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: 9 GB"))
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_out_must_be_empty_unless_resuming_or_overwriting(tmp_path):
    out = tmp_path / "out"
    prepare_out(out, resume=False, overwrite=False, command="train-wm")  # marks the run
    (out / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"--out .* is not empty"):
        prepare_out(out, resume=False, overwrite=False, command="train-wm")
    prepare_out(out, resume=False, overwrite=True, command="train-wm")
    assert [p.name for p in out.iterdir()] == [MARKER]  # a new run of train-wm, empty
