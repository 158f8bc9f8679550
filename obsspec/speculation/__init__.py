"""Observation speculation: the Predictor contract, the speculative runner and its gate."""
