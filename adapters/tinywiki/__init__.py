"""TinyWiki for SourceBench; README.md says what it is (sources, tasks, scoring, data, deviations).

``benchmark.py`` is the adapter: six articles and twelve questions in memory, the benchmark
of the conformance checks (no data to fetch).
"""

from .benchmark import CANARY, NAME, TinyWiki

__all__ = ["CANARY", "NAME", "TinyWiki"]
