"""The agent side of an episode: the action protocol, exact-token contexts, the episode loop."""
