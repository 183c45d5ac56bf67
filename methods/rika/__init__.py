"""RIKA: hierarchical knowledge extraction with evidence-based knowledge admission (seed paper 001).

Modules, one job each: ``experience`` (guidance trajectories and feedback spans), ``extract``
(hierarchical extraction and its grounding gate), ``atomise``, ``route``, ``relations``,
``admission`` (evidence accumulation, admission, forgetting; plain code), ``render`` and
``method`` (the registered ``RIKA``).
"""

from .method import RIKA, RIKAConfig, RIKAState

__all__ = ["RIKA", "RIKAConfig", "RIKAState"]
