"""obsspec: observation speculation for reinforcement learning of terminal agents.

Importing this package has no side effects and does not import torch or vLLM; the heavy
libraries are imported by the modules that need them, when they are used.
"""

__version__ = "0.1.0"
