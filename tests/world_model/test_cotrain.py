"""Co-training on a tiny model: examples too long for `max_len` are counted, not trained on
and not replayed, turns cut off at the observation cap are counted as skipped; the rest are
trained on (real token ids, real optimizer steps, a few seconds)."""

from __future__ import annotations

import math

import pytest
import torch

from obsspec.types import TRUNCATION_MARKER
from obsspec.world_model.config import CotrainSettings
from obsspec.world_model.cotrain import CoTrainer
from obsspec.world_model.data import world_model_prompt
from obsspec.world_model.examples import build_examples
from tests.world_model.runs import FMT, episode_row, steps_for


def example_lengths(rows, tokenizer) -> list[int]:
    examples, _, _ = build_examples(rows, world_model_prompt(tokenizer, FMT), held_out_fraction=0)
    return [len(e.prompt_ids) + len(e.target_ids) for e in examples]


def test_examples_longer_than_max_len_are_counted_and_never_replayed(
    builder, tokenizer, tiny_model_dir
):
    short = episode_row(builder, "short-000", steps_for("short-000"))
    long_output = "\n".join(f"line {i}: some build output" for i in range(60))
    long = episode_row(builder, "long-000", [("make", f"{long_output}\n[exit code: 0]")])
    fitting = example_lengths([short], tokenizer)
    (too_long,) = example_lengths([long], tokenizer)
    max_len = max(fitting)
    assert too_long > max_len  # the long command's example alone does not fit

    settings = CotrainSettings(max_len=max_len, replay_sample=64)
    trainer = CoTrainer(tiny_model_dir, settings, FMT, seed=0, device="cpu")
    cut = episode_row(builder, "cut-000", [("cat log", f"x\n{TRUNCATION_MARKER}\n[exit code: 0]")])
    first = trainer.update([short, long, cut])
    assert first["wm_dropped_too_long"] == 1
    assert first["wm_skipped_turns"] == 1  # the cut-off observation: no example, but counted
    assert first["wm_examples_used"] == len(fitting) == 3
    assert first["wm_examples"] == len(fitting) + 1
    assert math.isfinite(first["wm_loss"])
    assert len(trainer.replay.samples) == len(fitting)  # the long one is not kept

    second = trainer.update([long])  # nothing fresh fits: only the replay is trained on
    assert second["wm_dropped_too_long"] == 1 and second["wm_examples_used"] == len(fitting)

    alone = CoTrainer(tiny_model_dir, settings.model_copy(update={"replay_sample": 0}), FMT, 0,
                      device="cpu")  # fmt: skip
    nothing = alone.update([long])
    assert nothing["wm_dropped_too_long"] == 1 and nothing["wm_examples_used"] == 0
    assert math.isnan(nothing["wm_loss"])  # nothing learned: no loss to report


def test_the_co_trainer_wants_its_max_len_resolved(tiny_model_dir):
    with pytest.raises(ValueError, match=r"cotrain\.max_len must be resolved"):
        CoTrainer(tiny_model_dir, CotrainSettings(), FMT, seed=0, device="cpu")


def test_the_co_trainer_recomputes_activations_when_asked_and_learns_the_same(
    builder, tokenizer, tiny_model_dir
):
    rows = [episode_row(builder, "short-000", steps_for("short-000"))]
    max_len = max(example_lengths(rows, tokenizer))
    calls, losses, weights = {}, {}, {}
    for recompute in (False, True):
        settings = CotrainSettings(
            max_len=max_len, replay_sample=0, activation_checkpointing=recompute
        )
        trainer = CoTrainer(tiny_model_dir, settings, FMT, seed=0, device="cpu")
        count = [0]
        trainer.model.model.layers[0].register_forward_pre_hook(
            lambda *_, c=count: c.__setitem__(0, c[0] + 1)
        )
        losses[recompute] = trainer.update(rows)["wm_loss"]
        calls[recompute] = count[0]
        weights[recompute] = [p.detach().clone() for p in trainer.model.parameters()]
    assert calls[True] == 2 * calls[False] > 0  # each pass's layer forward, again in backward
    assert losses[True] == pytest.approx(losses[False], rel=1e-6)
    for without, with_ in zip(weights[False], weights[True], strict=True):
        assert torch.allclose(without, with_, atol=1e-7)
