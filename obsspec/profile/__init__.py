"""`obsspec profile`: sequential vs speculative vs oracle on the same episodes."""
