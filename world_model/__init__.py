"""Predictors of command output (state cache, cache, rules, the LM world model), and WM training."""
