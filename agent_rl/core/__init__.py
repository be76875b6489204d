"""Small modules every layer may import (sandbox, tools, envs and the rest of ``agent_rl``).

Kept free of imports so that ``import agent_rl.core.errors`` stays cheap and torch-free."""
