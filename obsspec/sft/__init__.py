"""`obsspec sft`: warm-start a policy on expert (or successful) trajectories.

config -> data (action-turn samples, loss on the policy's own tokens) -> the shared trainer
(obsspec.train) -> evaluation through the real collect path on held-out tasks.
"""
