"""What every command shares around a run: start-up components (``runtime.py``), the env loader
(the one door to ``envs``), tracking, progress, preflight checks, saved trajectories."""
