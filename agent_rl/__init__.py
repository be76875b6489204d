from agent_rl.core.install_check import warn_foreign_companions

warn_foreign_companions()  # one line when the environment cannot load models (agent_rl/core/install_check.py)
