"""Output-layer log-probabilities a chunk at a time: the same values and gradients as one
projection, for the policy's response tokens and the world model's labelled tokens."""

import torch

from obsspec.rl import grpo
from obsspec.train import model as train_model
from obsspec.train.model import target_logprobs


def head_and_rows(n=11, width=8, vocab=50):
    torch.manual_seed(0)
    head = torch.nn.Linear(width, vocab, bias=False)
    hidden = torch.randn(n, width, requires_grad=True)
    return head, hidden, torch.randint(0, vocab, (n,))


def grads(values, head, hidden):
    values.sum().backward()
    found = (hidden.grad.clone(), head.weight.grad.clone())
    hidden.grad, head.weight.grad = None, None
    return found


def test_chunks_give_the_values_and_gradients_of_one_projection():
    head, hidden, targets = head_and_rows()
    whole = target_logprobs(head, hidden, targets, chunk=100)
    whole_grads = grads(whole, head, hidden)
    chunked = target_logprobs(head, hidden, targets, chunk=3)  # 3 + 3 + 3 + 2
    assert torch.allclose(chunked, whole, atol=1e-6)
    for mine, theirs in zip(grads(chunked, head, hidden), whole_grads, strict=True):
        assert torch.allclose(mine, theirs, atol=1e-6)
    expected = head(hidden).log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    assert torch.allclose(whole, expected, atol=1e-6)


def test_without_gradients_chunks_run_plainly():
    head, hidden, targets = head_and_rows()
    with torch.no_grad():
        values = target_logprobs(head, hidden, targets, chunk=4)
    assert not values.requires_grad and values.shape == (11,)


def test_the_policy_and_world_model_losses_take_the_chunked_path(tiny_model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = torch.randint(3, 1000, (2, 40))
    attention = torch.ones_like(ids)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, 10:35] = True
    whole = grpo.response_logprobs(model, ids, attention, mask)
    loss, n = train_model.labelled_loss_sum(model, ids, attention, mask)
    monkeypatch.setattr(grpo, "LOGITS_CHUNK", 7)
    monkeypatch.setattr(train_model, "LOGITS_CHUNK", 7)
    assert torch.allclose(grpo.response_logprobs(model, ids, attention, mask), whole, atol=1e-5)
    chunked_loss, chunked_n = train_model.labelled_loss_sum(model, ids, attention, mask)
    assert chunked_n == n == 50 and torch.allclose(chunked_loss, loss, rtol=1e-5)
