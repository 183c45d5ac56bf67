"""Typed configuration shared by every SourceLearn stage and registered variant.

It lives in its own module so stage modules (construct, selfstudy, taskguided, activation, audit)
can import it without importing the method classes that import them.
"""

from __future__ import annotations

from ..evidence import TaskTimeConfig


class SourceLearnConfig(TaskTimeConfig):
    """Defaults follow the paper's Appendix A settings unless noted."""

    TASK_TIME_OPTIONS = ("exclude_gold",)  # left out of dumps at its default (see TaskTimeConfig)

    budget_tokens: int = 24000  # B: most source-model tokens shown at task time
    cycles: int = 1  # Inspect-Study-Consolidate cycles of self-directed learning
    study_actions: int = 20  # K: study actions per cycle
    actions_per_round: int = 5  # actions proposed per planning round
    empty_rounds_stop: int = 2  # stop planning after this many rounds with no new action
    max_per_slot: int = 6  # at most this many items per reading slot of an entity (prompt and reply schema)
    prototype_min_entities: int = 3  # folding: a shared value needs this many entities ...
    prototype_min_share: float = 0.6  # ... and this share of the region's entities
    max_refine_units: int = 4  # units written per failed task during local refinement
    max_policy_items: int = 8  # at most this many representation preferences
    min_policy_support: int = 2  # a preference needs this many supporting tasks
    large_source_chars: int = 100_000  # above this, regions are LLM-proposed blocks
    top_k: int = 8  # Hybrid RAG evidence at task time (Figure 5a varies it down to 0)
    exclude_gold: bool = False  # Hybrid RAG evidence without the task's gold elements (Figure 5b)
    concurrency: int = 4  # concurrent LLM calls within a stage
    seed: int = 0
