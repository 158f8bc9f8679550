"""Inference engines (token in, token out)."""
