"""Self-Directed Source Learning (MS): observe, plan, study, consolidate. Entry point: ``self_learn``."""

from .cycle import self_learn

__all__ = ["self_learn"]
