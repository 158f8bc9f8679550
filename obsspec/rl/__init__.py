"""obsspec rl: GRPO on speculative rollouts with world-model co-training."""
