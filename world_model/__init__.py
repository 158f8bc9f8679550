"""Predictors of command output (cache, rules, the LM world model), and WM training."""
