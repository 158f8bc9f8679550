"""Rollout pipelines: running episodes with real engines and sandboxes."""
