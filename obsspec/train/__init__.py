"""Supervised fine-tuning of a causal LM on token sequences with a label mask, and the
trainer core every trainer steps through.

One trainer, two masks: the world model learns observation tokens (world_model.training),
the policy learns its own action tokens (SFT). Both hand this package `Sample`s (a prompt
and the tokens to learn after it); it packs, batches, trains, checkpoints and saves an HF
directory that vLLM serves directly. The optimizer, its schedule, one clipped step over
micro-batches and checkpoints of all of it live in core.py, which the GRPO policy trainer
(obsspec.rl) and world-model co-training (world_model.cotrain) use too.
"""
