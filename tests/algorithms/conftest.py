"""Every objective entry is registered for these tests: the pure objectives and the methods that act on the run."""

import agent_rl.methods  # noqa: F401  (registration)
