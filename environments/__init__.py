"""Everything that touches a sandbox: the Docker engine, images, (later) sandboxes and tasks.

Importing this package starts nothing; connections and builds happen when called.
"""
