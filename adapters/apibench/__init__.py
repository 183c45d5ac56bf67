"""APIBench (Gorilla) for SourceBench; README.md says what it is (sources, tasks, scoring, data, deviations).

``benchmark.py`` is the adapter (scored by the official AST evaluator in
``sourcebench.judges.apibench_ast``), ``fetch.py`` downloads Gorilla's files at a pinned commit.
"""

from .benchmark import APIBench

__all__ = ["APIBench"]
