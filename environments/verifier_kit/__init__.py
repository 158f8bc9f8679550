"""The verifier kit: what public verifiers download at verify time (uv, its installer, pinned
Python packages), prepared on the host and served to a verifier that has no network.

needs (what a script fetches) -> prepare (fetched into the cache) -> stage (the folder a
sandbox gets) -> attach (which tasks get it, before a run) -> serve (uploaded after the
agent phase, with the environment and shims the verifier runs under).
"""
