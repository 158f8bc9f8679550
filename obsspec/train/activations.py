"""Activation checkpointing: each decoder layer keeps only its input for the backward pass and
recomputes the rest there, so a forward pass holds one layer's activations at a time instead
of every layer's (less memory, about a third more compute: each layer's forward runs twice).

    checkpoint_activations(model)      before sharding; the same in one process and FSDP2

It is transformers' own gradient checkpointing, non-reentrant, rather than torch's
`checkpoint_wrapper` around each layer: it keeps the parameter names (checkpoints, the
engines' weight sync and FSDP2's state dicts see no `_checkpoint_wrapped_module.`), and it
composes with FSDP2, whose pre-forward hook, run again by the recomputation inside the
backward pass, leaves the gathering to its pre-backward hook (tested: the gradients of two
sharded ranks with it equal those without it). Only in training mode: a model in eval mode,
or a forward under no_grad, keeps nothing and recomputes nothing.
"""

from __future__ import annotations

from obsspec.train.model import is_peft


def checkpoint_activations(model) -> None:
    """Turn on recomputation in `model`'s decoder layers (an HF causal LM, or a peft model
    around one), in place."""
    base = model.get_base_model() if is_peft(model) else model
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
