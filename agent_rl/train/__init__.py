"""The training run: the RL loop (``trainer.py``) and what it builds and hands out: the plan's
components, the RunAPI, the teacher, the task sampler and queue, the breaker, the hints, evaluation."""
