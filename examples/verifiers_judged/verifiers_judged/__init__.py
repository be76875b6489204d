from verifiers_judged.taskset import JudgedTaskset

__all__ = ["JudgedTaskset"]
