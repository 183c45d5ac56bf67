"""NarrativeQA for SourceBench; README.md says what it is (sources, tasks, scoring, data, deviations).

``benchmark.py`` is the adapter (story preparation included), ``fetch.py`` saves the paper's 12
test stories from the Hugging Face Hub.
"""

from .benchmark import NarrativeQA

__all__ = ["NarrativeQA"]
