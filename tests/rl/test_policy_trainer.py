"""The policy trainer alone: a step sharded over two processes (FSDP2 on gloo) learns what
one process learns, and their checkpoints are interchangeable."""

import json

import pytest
import torch
from safetensors.torch import load_file

from obsspec.rl.policy_trainer import PolicyTrainer
from tests.rl.sharded_ranks import SETTINGS, fixed_episodes, rank_main

# Real training: two spawned ranks and their one-process twin (seconds of CPU each).
pytestmark = pytest.mark.slow

FIGURES = ("policy_loss", "clip_fraction", "logprob_mismatch", "grad_norm", "trained_tokens")


def weights(folder):
    state = {}
    for path in sorted(folder.glob("*.safetensors")):
        state.update(load_file(path))
    return state


def assert_same_weights(folder, model, atol=2e-6):
    saved = weights(folder)
    mine = model.state_dict()
    assert set(saved) <= set(mine) and len(saved) >= len(mine) - 1  # lm_head tied
    for name, tensor in saved.items():
        assert torch.allclose(tensor, mine[name], atol=atol), name


def assert_same_figures(a: dict, b: dict):
    for key in FIGURES:
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded")
    torch.multiprocessing.spawn(
        rank_main, args=(2, str(tiny_model_dir), str(out), len(tokenizer)), nprocs=2
    )
    return out, json.loads((out / "stats.json").read_text())


def test_two_sharded_ranks_learn_what_one_process_learns(two_ranks, tiny_model_dir, tokenizer):
    out, (first, second) = two_ranks
    episodes = fixed_episodes(len(tokenizer))
    alone = PolicyTrainer(tiny_model_dir, SETTINGS, seed=0, device="cpu")
    # an odd number of passes: one rank also runs a pass that does not count
    assert len(alone.passes(episodes, list(range(len(episodes))))) % 2 == 1
    assert any(len(alone.passes(episodes, chunk)) % 2 for chunk in alone.minibatches(7, 0))

    assert_same_figures(alone.update(episodes, 0), first)
    assert_same_weights(out / "after-1", alone.model)
    assert_same_figures(alone.update(episodes, 1), second)
    assert_same_weights(out / "after-2", alone.model)
    assert first["trained_episodes"] == len(episodes) and first["grad_norm"] > 0


def test_a_checkpoint_of_two_ranks_resumes_in_one_process(two_ranks, tiny_model_dir, tokenizer):
    out, (_, second) = two_ranks
    resumed = PolicyTrainer(tiny_model_dir, SETTINGS, seed=0, device="cpu")
    resumed.restore(out / "checkpoint")
    assert_same_weights(out / "after-1", resumed.model, atol=0)
    assert_same_figures(resumed.update(fixed_episodes(len(tokenizer)), 1), second)
    assert_same_weights(out / "after-2", resumed.model)


def test_a_checkpoint_from_before_fsdp2_still_resumes(tiny_model_dir, tokenizer, tmp_path):
    """Checkpoints used to hold torch's own optimizer state (parameters by position)."""
    from obsspec.train.checkpoint import save_hf_weights

    episodes = fixed_episodes(len(tokenizer))
    old = PolicyTrainer(tiny_model_dir, SETTINGS, seed=0, device="cpu")
    old.update(episodes, 0)
    save_hf_weights(old.model, tmp_path / "policy" / "model", dtype="float32")
    torch.save(
        {"optimizer": old.core.optimizer.state_dict(), "torch_rng": torch.get_rng_state()},
        tmp_path / "policy" / "trainer.pt",
    )
    resumed = PolicyTrainer(tiny_model_dir, SETTINGS, seed=0, device="cpu")
    resumed.restore(tmp_path / "policy")
    assert_same_figures(resumed.update(episodes, 1), old.update(episodes, 1))
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, old.model.state_dict()[name]), name


def test_the_clip_binds_only_once_a_minibatch_follows_an_update(tiny_model_dir, tokenizer):
    """With one minibatch the ratio is 1 by construction (old = new log-probs) and nothing is
    ever clipped; with two, the second minibatch's ratios moved with the first update."""
    from obsspec.rl.config import GRPOSettings

    assert GRPOSettings().minibatches > 1  # the default lets the clip bind
    episodes = fixed_episodes(len(tokenizer))
    clip_fraction = {}
    for minibatches in (1, 2):
        settings = SETTINGS.model_copy(update={"lr": 3e-2, "minibatches": minibatches})
        trainer = PolicyTrainer(tiny_model_dir, settings, seed=0, device="cpu")
        clip_fraction[minibatches] = trainer.update(episodes, 0)["clip_fraction"]
    assert clip_fraction[1] == 0.0
    assert clip_fraction[2] > 0.0, clip_fraction
