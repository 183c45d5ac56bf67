"""MultiDoc2Dial for SourceBench; README.md says what it is (sources, tasks, scoring, data, deviations).

``benchmark.py`` is the adapter, ``fetch.py`` downloads and unpacks the official
``multidoc2dial.zip``.
"""

from .benchmark import MultiDoc2Dial

__all__ = ["MultiDoc2Dial"]
