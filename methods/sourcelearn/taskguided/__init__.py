"""Task-Guided Source Learning (MT): diagnose, attempt, refine, lessons, policy, recalibrate.

Entry point: ``task_learn``.
"""

from .run import task_learn

__all__ = ["task_learn"]
