"""Activation checkpointing on a tiny model in one process (the policy trainer's test runs it
sharded too): the same gradients, with each decoder layer's forward run again in backward."""

import torch

from obsspec.train.activations import checkpoint_activations
from obsspec.train.model import labelled_loss_sum, load_model
from obsspec.train.precision import Placement


def test_recomputed_activations_give_the_same_gradients(tiny_model_dir):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 1000, (2, 48), generator=generator)
    attention = torch.ones_like(ids)
    labels = torch.zeros_like(ids, dtype=torch.bool)
    labels[:, 24:] = True
    gradients, calls = {}, {}
    for recompute in (False, True):
        model = load_model(tiny_model_dir, Placement("cpu", "float32"), None).train()
        if recompute:
            checkpoint_activations(model)
        count = [0]
        for layer in model.model.layers:  # counted as they start: a recomputation stops
            layer.register_forward_pre_hook(lambda *_, c=count: c.__setitem__(0, c[0] + 1))
        labelled_loss_sum(model, ids, attention, labels)[0].backward()
        gradients[recompute] = {n: p.grad for n, p in model.named_parameters()}
        calls[recompute] = count[0]
    layers = len(model.model.layers)
    assert calls == {False: layers, True: 2 * layers}
    for name, gradient in gradients[False].items():
        assert torch.allclose(gradient, gradients[True][name], atol=1e-7), name
