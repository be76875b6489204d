from agent_rl.core.install_check import warn_foreign_companions
from agent_rl.core.threads import passive_openmp_waits

warn_foreign_companions()  # one line when the environment cannot load models (agent_rl/core/install_check.py)
passive_openmp_waits()  # before torch loads: OpenMP threads sleep when they wait (agent_rl/core/threads.py)
