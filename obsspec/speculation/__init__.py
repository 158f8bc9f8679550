"""Observation speculation: the Predictor contract, and (later) the speculative runner."""
