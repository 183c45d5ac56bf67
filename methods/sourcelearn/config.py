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
    empty_rounds_stop: int = 2  # stop planning after this many consecutive rounds with no new action
    read_budget: int = 6  # READ_BUDGET: mechanisms + distinctions + details of one entity reading, in total
    block_total_tokens: int = 40_000  # TOTAL_BUDGET: soft size of all block models of a partitioned source
    block_cap_tokens: int = 6_000  # BLOCK_CAP: most soft budget of one block (its share of the total)
    block_min_tokens: int = 1_200  # MIN_BLOCK_BUDGET: least soft budget of one block
    prototype_min_entities: int = 3  # folding: a shared value needs this many entities ...
    prototype_min_share: float = 0.6  # ... and this share of the region's entities that have the attribute
    max_refine_units: int = 4  # units written per failed task during local refinement
    max_policy_items: int = 8  # at most this many representation preferences
    min_policy_support: int = 2  # a preference needs this many supporting tasks
    large_source_chars: int = 100_000  # PARTITION_MIN_CHARS: from here, LLM blocks and soft block budgets
    # -- learning-time retrieval and reading (official defaults; no task-time setting reaches learning, so
    # every variant of one source shares one MS, whatever its top_k: see learn_retrieval.py)
    deepen_k: int = 12  # DEEPEN_K: evidence elements a DEEPEN question retrieves, scoped to the entity's files
    connect_k: int = 10  # CONNECT: evidence elements a CONNECT question retrieves, scoped to both entities' files
    task_evidence_k: int = 8  # TASK_EVIDENCE_K: elements diagnosis retrieves around question + reference
    reference_query_chars: int = 600  # REFERENCE_QUERY_CHARS: reference prefix joined to the diagnosis query
    needed_max: int = 4  # NEEDED_MAX: needed claims kept per guidance task
    learn_answer_k: int = 8  # RAW_TOP_K: Hybrid RAG evidence a guidance task is answered with while learning
    inspect_min_hits: int = 2  # INSPECT_MIN_HITS: a scoped retrieval tier is used when it holds this many hits
    inspect_cand_mult: int = 4  # INSPECT_CAND_MULT: candidates per tier = this x k
    code_expand_hits: int = 3  # CODE_EXPAND_HITS: top-level symbol hits shown as their code window
    code_window_chars: int = 24_000  # CODE_WINDOW_CHARS: window text per retrieval, all expanded hits together
    observations_per_question: int = 3  # OBSERVATIONS_PER_QUESTION: notes one observation call may return
    # -- task time only
    top_k: int = 8  # Hybrid RAG evidence at task time (Figure 5a varies it down to 0); never read by learning
    exclude_gold: bool = False  # Hybrid RAG evidence without the task's gold elements (Figure 5b)
    concurrency: int = 256  # LLM calls of one stage at once; the run's --max-connections bounds what is in flight
    seed: int = 0
