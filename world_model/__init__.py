"""Predictors of command output (state cache, cache, rules, repeats, the LM world model), and
WM training."""
