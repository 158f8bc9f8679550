"""Supervised fine-tuning of a causal LM on token sequences with a label mask.

One trainer, two masks: the world model learns observation tokens (world_model.training),
the policy learns its own action tokens (SFT). Both hand this package `Sample`s (a prompt
and the tokens to learn after it); it packs, batches, trains, checkpoints and saves an HF
directory that vLLM serves directly.
"""
