"""SWE-QA for SourceBench; README.md says what it is (sources, tasks, scoring, data, deviations).

``benchmark.py`` is the adapter, ``tree.py`` identifies which source tree was loaded (and measured
what the release sdists lack: ``sdists.json``), ``fetch.py`` downloads the question files and the
pinned trees.
"""

from .benchmark import SWEQA

__all__ = ["SWEQA"]
