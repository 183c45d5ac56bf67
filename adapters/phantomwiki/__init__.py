"""PhantomWiki for SourceBench; README.md says what it is (sources, tasks, scoring, data, deviations).

``benchmark.py`` is the adapter, ``fetch.py`` generates a fresh universe with the official
generator, ``data/`` holds the small universe shipped for the quickstart and ``trim.py`` made it from
the generator's output.
"""

from .benchmark import PhantomWiki

__all__ = ["PhantomWiki"]
