"""The policy trainer alone: a step sharded over two processes (FSDP2 on gloo) learns what
one process learns, and their checkpoints are interchangeable; recomputing activations gives
the same gradients; sharded bfloat16 gathers bfloat16 and reduces in reduce_dtype; episodes
are cut after their last response token, and one longer than a pass is refused."""

import json

import pytest
import torch
from safetensors.torch import load_file

from obsspec.errors import ConfigError, TrainingError
from obsspec.rl.policy_trainer import PolicyEpisode, PolicyTrainer
from obsspec.train.sharding import decoder_layers
from tests.rl.sharded_ranks import (
    EXACT,
    SETTINGS,
    fixed_episodes,
    precision_rank_main,
    rank_main,
    two_long_episodes,
)

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


@pytest.fixture(scope="module")
def precision_ranks(tiny_model_dir, tokenizer, tmp_path_factory) -> dict:
    """What one step of each of sharded_ranks.PRECISION_RUNS saw on two ranks."""
    out = tmp_path_factory.mktemp("precision")
    torch.multiprocessing.spawn(
        precision_rank_main, args=(2, str(tiny_model_dir), str(out), len(tokenizer)), nprocs=2
    )
    return json.loads((out / "precision.json").read_text())


def test_two_ranks_recomputing_activations_get_the_same_gradients(precision_ranks):
    plain, recompute = precision_ranks["float32"], precision_ranks["float32-recompute"]
    assert recompute["gradient_gap"] < 1e-6 and recompute["gradient_cosine"] > 1 - 1e-6
    assert_same_figures(recompute["figures"], plain["figures"])
    # every training pass ran the layer's forward once more, in its backward
    assert plain["training_passes"] == recompute["training_passes"] == 1
    assert recompute["layer_calls"] == plain["layer_calls"] + recompute["training_passes"]


def test_sharded_bfloat16_gathers_bfloat16_and_reduces_in_reduce_dtype(precision_ranks):
    """The layers compute in bfloat16 (no autocast: FSDP2 gathers bfloat16 copies) while the
    shards and the optimizer state stay float32; reduced in bfloat16, every gradient is a
    bfloat16 value, reduced in float32 (the default), the ranks' sum keeps its low bits."""
    for name in ("float32", "float32-recompute"):
        assert precision_ranks[name]["computed_in"] == ["torch.float32"]
    for reduce in ("float32", "bfloat16"):
        seen = precision_ranks[f"bfloat16-reduce-{reduce}"]
        assert seen["computed_in"] == ["torch.bfloat16"]
        assert seen["shards"] == seen["optimizer"] == ["torch.float32"]
        assert seen["gradients_bf16_exact"] == (reduce == "bfloat16")
        # the same gradient as float32's, within bfloat16's rounding
        assert seen["gradient_cosine"] > 0.99, seen
        grad_norm = precision_ranks["float32"]["figures"]["grad_norm"]
        assert seen["figures"]["grad_norm"] == pytest.approx(grad_norm, rel=0.02)
    assert not precision_ranks["float32"]["gradients_bf16_exact"]


def test_recomputing_activations_in_one_process_gives_the_same_gradients(tiny_model_dir, tokenizer):
    episodes = two_long_episodes(len(tokenizer))
    gradients, calls = {}, {}
    for recompute in (False, True):
        settings = EXACT.model_copy(update={"activation_checkpointing": recompute})
        trainer = PolicyTrainer(tiny_model_dir, settings, seed=0, device="cpu")
        count = [0]
        decoder_layers(trainer.model)[0].register_forward_pre_hook(
            lambda *_, count=count: count.__setitem__(0, count[0] + 1)
        )
        trainer.update(episodes, 0)
        gradients[recompute] = [p.grad for p in trainer.model.parameters()]
        calls[recompute] = count[0]
    passes = len(trainer.passes(episodes, [0, 1]))
    assert passes == 2  # one process runs both: the old log-probs' passes, then the step's
    assert calls == {False: 2 * passes, True: 3 * passes}
    for without, with_ in zip(gradients[False], gradients[True], strict=True):
        assert torch.allclose(without, with_, atol=1e-7)


def test_an_episode_is_cut_after_its_last_response_and_one_longer_than_a_pass_refused(
    tiny_model_dir, tokenizer
):
    vocab = len(tokenizer)
    trainer = PolicyTrainer(tiny_model_dir, SETTINGS, seed=0, device="cpu")  # 128-token passes
    short = two_long_episodes(vocab)[0]  # 100 tokens, its response up to the end
    tail = PolicyEpisode(  # 300 tokens: an observation after its last response token
        short.ids + [5] * 200, short.mask + [0] * 200, short.engine_logprobs + [None] * 200, 1.0
    )
    # causal: the tail changes no log-probability before it (an uncut pass of 300 tokens)
    whole, cut = trainer.logprobs(trainer.net, [tail])[0], trainer.logprobs(trainer.net, [short])[0]
    assert torch.allclose(whole, cut, atol=1e-5)
    assert trainer.update([tail], 0)["trained_tokens"] == sum(short.mask)

    long = PolicyEpisode([7] * 200, [0] * 10 + [1] * 190, [None] * 200, 1.0)
    with pytest.raises(TrainingError, match=r"200 tokens .* grpo\.batch_tokens 128") as caught:
        trainer.update([short, long], 1)
    assert "at least 200" in caught.value.hint


def test_an_unresolved_batch_tokens_is_refused_before_loading(tmp_path):
    with pytest.raises(ConfigError, match=r"grpo\.batch_tokens is unset") as caught:
        PolicyTrainer(tmp_path, SETTINGS.model_copy(update={"batch_tokens": None}), seed=0)
    assert "RLConfig.grpo_settings" in caught.value.hint
