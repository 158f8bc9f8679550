"""GRPO math on a tiny randomly initialised Llama: no downloads, no engine, no Docker."""

from __future__ import annotations

import math

import pytest
import torch

from obsspec.rl.grpo import (
    LossParts,
    clipped_policy_loss,
    group_advantages,
    response_logprobs,
    token_mean,
)

PAD = 0


def tiny_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        tie_word_embeddings=False,  # lm_head has its own gradient, separate from the input
    )
    return LlamaForCausalLM(config).float()


def batch(rows: list[list[tuple[list[int], bool]]]):
    """ids, attention and mask, right-padded, from rows of (tokens, trained-on) spans."""
    flat = [[(t, m) for tokens, m in spans for t in tokens] for spans in rows]
    width = max(len(row) for row in flat)
    ids = torch.full((len(flat), width), PAD, dtype=torch.long)
    attention = torch.zeros((len(flat), width), dtype=torch.long)
    mask = torch.zeros((len(flat), width), dtype=torch.bool)
    for r, row in enumerate(flat):
        ids[r, : len(row)] = torch.tensor([t for t, _ in row])
        attention[r, : len(row)] = 1
        mask[r, : len(row)] = torch.tensor([m for _, m in row])
    return ids, attention, mask


def row_sums(logprobs: torch.Tensor, mask: torch.Tensor) -> list[float]:
    """Per-row sum of the flat masked log-probs (they come in ids[mask] order)."""
    return [float(chunk.sum()) for chunk in logprobs.split(mask.sum(1).tolist())]


# group_advantages


def test_group_advantages_hand_computed_with_interleaved_groups():
    # population std: group a: [1, 0] -> mean 0.5, std 0.5; b: [3, 1, 2] -> mean 2, sqrt(2/3)
    rewards = [1.0, 3.0, 0.0, 1.0, 2.0]
    groups = ["a", "b", "a", "b", "b"]
    std_b = math.sqrt(2 / 3)
    expected = [0.5 / 0.5, 1 / std_b, -0.5 / 0.5, -1 / std_b, 0.0]
    population = group_advantages(rewards, groups, std="population", eps=0.0)
    assert population == pytest.approx(expected, abs=1e-12)
    with_eps = group_advantages(rewards, groups, std="population", eps=1e-6)
    assert with_eps[0] == pytest.approx(0.5 / (0.5 + 1e-6), abs=1e-12)


def test_the_unbiased_group_std_divides_by_n_minus_one_as_torch_std_does():
    # group [1, 0, 0, 0]: mean 0.25; squared deviations sum to 0.75
    rewards = [1.0, 0.0, 0.0, 0.0]
    unbiased = group_advantages(rewards, [0] * 4, eps=0.0)  # the default
    std = math.sqrt(0.75 / 3)
    assert unbiased == pytest.approx([0.75 / std] + [-0.25 / std] * 3, abs=1e-12)
    reference = (torch.tensor(rewards) - 0.25) / torch.tensor(rewards).std()  # TRL, verl
    assert unbiased == pytest.approx(reference.tolist(), abs=1e-6)
    population = group_advantages(rewards, [0] * 4, std="population", eps=0.0)
    assert population == pytest.approx(
        [0.75 / math.sqrt(0.75 / 4)] + [-0.25 / math.sqrt(0.75 / 4)] * 3
    )
    # the two differ by sqrt((n - 1) / n) for every member
    assert [u / p for u, p in zip(unbiased, population, strict=True)] == pytest.approx(
        [math.sqrt(3 / 4)] * 4
    )
    # a group of one has no spread (nothing divided by n - 1 = 0); a bad name is refused
    assert group_advantages([1.0], ["solo"]) == [0.0]
    with pytest.raises(ValueError, match="'unbiased' or 'population'"):
        group_advantages(rewards, [0] * 4, std="sample")  # type: ignore[arg-type]


def test_group_advantages_without_std_scaling_are_mean_centred():
    rewards = [1.0, 3.0, 0.0, 1.0, 2.0]
    groups = ["a", "b", "a", "b", "b"]
    advantages = group_advantages(rewards, groups, scale_by_std=False)
    assert advantages == pytest.approx([0.5, 1.0, -0.5, -1.0, 0.0], abs=1e-12)


def test_group_advantages_of_an_all_equal_group_are_zero():
    advantages = group_advantages([0.1, 1.0, 0.1, 0.0, 0.1], [7, 8, 7, 8, 7])
    assert [advantages[i] for i in (0, 2, 4)] == [0.0, 0.0, 0.0]
    assert advantages[1] > 0 > advantages[3]


def test_group_advantages_length_mismatch_raises():
    with pytest.raises(ValueError, match="length"):
        group_advantages([1.0, 0.0], ["a"])


# response_logprobs


def test_response_logprobs_match_full_logits_with_right_padding():
    model = tiny_model()
    ids, attention, mask = batch(
        [
            [([1, 5, 6], False), ([9, 10, 11, 12], True), ([20, 21], False), ([13], True)],
            [([1, 5], False), ([30, 31], True)],  # shorter: right-padded
        ]
    )
    got = response_logprobs(model, ids, attention, mask)

    with torch.no_grad():
        full = model(ids, attention_mask=attention).logits.float().log_softmax(-1)
    reference = full[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)[mask[:, 1:]]

    assert got.dtype == torch.float32 and got.shape == (int(mask.sum()),)
    assert got.requires_grad  # differentiable under grad
    torch.testing.assert_close(got.detach(), reference, atol=1e-5, rtol=0)


def test_response_logprobs_reject_a_mask_at_position_zero():
    model = tiny_model()
    ids, attention, mask = batch([[([1, 2, 3], True)]])
    with pytest.raises(ValueError, match="position 0"):
        response_logprobs(model, ids, attention, mask)


# the loss moves the policy the right way (acceptance criterion)


def test_one_step_raises_positive_and_lowers_negative_responses():
    model = tiny_model()
    prompt = ([1, 2, 3, 4], False)
    ids, attention, mask = batch(
        [
            [prompt, ([10, 11, 12, 13], True)],
            [prompt, ([20, 21, 22], True)],
            [prompt, ([30, 31, 32, 33, 34], True)],
            [prompt, ([40, 41, 42, 43], True)],
        ]
    )
    episode_advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    advantages = episode_advantages[:, None].expand_as(mask)[mask]  # [tokens]
    with torch.no_grad():
        old = response_logprobs(model, ids, attention, mask)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    new = response_logprobs(model, ids, attention, mask)
    token_mean([clipped_policy_loss(new, old, advantages)]).backward()
    optimizer.step()

    with torch.no_grad():
        after = response_logprobs(model, ids, attention, mask)
    before_rows, after_rows = row_sums(old, mask), row_sums(after, mask)
    changes = [a - b for a, b in zip(after_rows, before_rows, strict=True)]
    assert changes[0] > 1e-3 and changes[1] > 1e-3, changes
    assert changes[2] < -1e-3 and changes[3] < -1e-3, changes


# masked-out tokens get no gradient (acceptance criterion)


def test_unmasked_positions_get_exactly_zero_gradient():
    torch.manual_seed(1)
    _, _, mask = batch(
        [
            [([1, 2, 3], False), ([4, 5, 6], True), ([7, 8], False), ([9, 10], True)],
            [([1, 2], False), ([11, 12, 13, 14], True), ([15], False)],
        ]
    )
    new = (-torch.rand(mask.shape) * 3).requires_grad_()  # per-position log-probs, a leaf
    old = new.detach() + 0.05 * torch.randn(mask.shape)  # ratios well inside the clip range
    advantages = torch.tensor([0.7, -1.3])[:, None].expand_as(mask)

    parts = clipped_policy_loss(new[mask], old[mask], advantages[mask])
    token_mean([parts]).backward()

    assert torch.equal(new.grad[~mask], torch.zeros_like(new.grad[~mask]))
    assert bool((new.grad[mask] != 0).all())

    # what sits at unmasked positions (old log-probs, advantages) cannot reach the loss
    noisy_old = torch.where(mask, old, old + 5.0)
    noisy_advantages = torch.where(mask, advantages, -advantages * 9)
    other = clipped_policy_loss(new[mask], noisy_old[mask], noisy_advantages[mask])
    assert torch.equal(other.loss_sum, parts.loss_sum)


def loss_and_grads(model, ids, attention, mask, old, advantages):
    model.zero_grad()
    new = response_logprobs(model, ids, attention, mask)
    loss = token_mean([clipped_policy_loss(new, old, advantages)])
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return loss.detach(), grads


def test_tokens_after_the_last_response_do_not_touch_loss_or_gradients():
    model = tiny_model()
    # row 0: prompt, response, observation, response, then a trailing observation that is
    # neither a target nor context of any response token
    ids, attention, mask = batch(
        [
            [
                ([1, 2, 3], False),
                ([4, 5, 6], True),
                ([7, 8], False),
                ([9, 10], True),
                ([50, 51, 52], False),
            ],
            [([1, 2], False), ([11, 12, 13], True)],
        ]
    )
    with torch.no_grad():
        old = response_logprobs(model, ids, attention, mask) - 0.1
    advantages = torch.tensor([1.0, -1.0])[:, None].expand_as(mask)[mask]
    loss, grads = loss_and_grads(model, ids, attention, mask, old, advantages)
    assert loss != 0 and grads["lm_head.weight"].abs().sum() > 0

    trailing = ids.clone()
    trailing[0, 11] = 60  # was 51: after row 0's last masked token (index 9)
    assert not mask[0, 10:].any()
    loss_t, grads_t = loss_and_grads(model, trailing, attention, mask, old, advantages)
    assert torch.equal(loss_t, loss)
    for name, grad in grads.items():
        assert torch.equal(grads_t[name], grad), name

    # the check can fail: the observation between the responses is context, so it counts
    middle = ids.clone()
    middle[0, 6] = 60  # was 7
    loss_m, _ = loss_and_grads(model, middle, attention, mask, old, advantages)
    assert not torch.equal(loss_m, loss)


# clipping


def ratio_loss(ratios: list[float], advantages: list[float], **clip) -> tuple[LossParts, list]:
    """Loss at given ratios (old log-probs 0), and d loss / d new log-prob per token."""
    new = torch.log(torch.tensor(ratios)).requires_grad_()
    parts = clipped_policy_loss(new, torch.zeros(len(ratios)), torch.tensor(advantages), **clip)
    parts.loss_sum.backward()
    return parts, new.grad.tolist()


def test_clip_binds_above_for_positive_and_below_for_negative_advantages():
    parts, grads = ratio_loss([1.5, 0.5], [1.0, -1.0])
    assert parts.clipped == 2
    assert grads == [0.0, 0.0]
    # the loss is the clipped objective: -(1.28 * 1) - (0.8 * -1)
    assert parts.loss_sum.item() == pytest.approx(-1.28 + 0.8)


def test_clip_does_not_bind_where_it_would_help_the_objective():
    # a high ratio with A<0 and a low ratio with A>0 keep the (pessimistic) unclipped term
    parts, grads = ratio_loss([1.5, 0.5], [-1.0, 1.0])
    assert parts.clipped == 0
    assert grads == pytest.approx([1.5, -0.5])  # d(-ratio*A)/d log-ratio = -ratio*A


def test_clip_bounds_are_asymmetric():
    parts, grads = ratio_loss([1.25], [1.0], clip_high=0.28)
    assert parts.clipped == 0 and grads[0] != 0.0
    parts, grads = ratio_loss([1.25], [1.0], clip_high=0.2)
    assert parts.clipped == 1 and grads[0] == 0.0
    # the low bound is 1 - clip_low: 0.75 is inside 0.8 at clip_low 0.3, outside at 0.2
    assert ratio_loss([0.75], [-1.0], clip_low=0.3)[0].clipped == 0
    assert ratio_loss([0.75], [-1.0], clip_low=0.2)[0].clipped == 1


# KL to a reference


def test_kl_is_off_without_a_reference_or_a_coefficient():
    new, old = torch.tensor([-1.0, -2.0]), torch.tensor([-1.1, -1.9])
    advantages = torch.tensor([1.0, -1.0])
    plain = clipped_policy_loss(new, old, advantages)
    ref = torch.tensor([-3.0, -0.5])
    no_coef = clipped_policy_loss(new, old, advantages, ref_logprobs=ref, kl_coef=0.0)
    no_ref = clipped_policy_loss(new, old, advantages, kl_coef=0.5)
    for parts in (no_coef, no_ref):
        assert parts.kl_sum == 0.0
        assert torch.equal(parts.loss_sum, plain.loss_sum)


def test_kl_k3_is_zero_at_the_reference_and_positive_away_from_it():
    new, old = torch.tensor([-1.0, -2.0]), torch.tensor([-1.1, -1.9])
    advantages = torch.tensor([1.0, -1.0])
    plain = clipped_policy_loss(new, old, advantages)

    same = clipped_policy_loss(new, old, advantages, ref_logprobs=new.clone(), kl_coef=0.5)
    assert same.kl_sum == 0.0
    assert torch.equal(same.loss_sum, plain.loss_sum)

    ref = torch.tensor([-0.5, -2.0])  # x = ref - new = 0.5 on the first token, 0 on the second
    away = clipped_policy_loss(new, old, advantages, ref_logprobs=ref, kl_coef=0.5)
    k3 = math.exp(0.5) - 0.5 - 1
    assert away.kl_sum == pytest.approx(k3)
    assert float(away.loss_sum) == pytest.approx(float(plain.loss_sum) + 0.5 * k3)


# token_mean and argument checks


def test_token_mean_weighs_every_token_of_the_step_equally():
    a = LossParts(loss_sum=torch.tensor(3.0), tokens=1, clipped=0, kl_sum=0.0)
    b = LossParts(loss_sum=torch.tensor(5.0), tokens=3, clipped=0, kl_sum=0.0)
    assert float(token_mean([a, b])) == pytest.approx(2.0)  # (3 + 5) / 4, not (3 + 5/3) / 2
    assert float(token_mean([])) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"clip_low": -0.1}, "clip_low"),
        ({"clip_low": 1.0}, "clip_low"),
        ({"clip_high": -0.01}, "clip_high"),
        ({"kl_coef": -1.0}, "kl_coef"),
        ({"old_logprobs": torch.zeros(2)}, "old_logprobs"),
        ({"advantages": torch.zeros(4)}, "advantages"),
        ({"ref_logprobs": torch.zeros(1), "kl_coef": 0.1}, "ref_logprobs"),
        ({"new_logprobs": torch.zeros(3, 1)}, "new_logprobs"),
    ],
)
def test_bad_arguments_raise(kwargs, named):
    args = {
        "new_logprobs": torch.zeros(3),
        "old_logprobs": torch.zeros(3),
        "advantages": torch.ones(3),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=named):
        clipped_policy_loss(**args)


def test_response_logprobs_reject_a_mask_of_another_shape():
    model = tiny_model()
    ids, attention, mask = batch([[([1, 2, 3], False), ([4], True)]])
    with pytest.raises(ValueError, match="mask shape"):
        response_logprobs(model, ids, attention, mask[:, :-1])
