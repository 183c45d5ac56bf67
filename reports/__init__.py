"""Reports over finished run folders: statistics, tables and pages, read from the files alone.

``rundata`` reads a run folder; ``stats`` and ``grid`` compute the numbers (seeded intervals, paired
tests, Δ, marks); every table is a ``table.Table``, laid out by ``layout`` (Markdown, HTML pages) and
``export`` (CSV, LaTeX). ``leaderboard`` writes a run's leaderboard, ``compare`` a task-by-task page,
``protocols`` the evaluation protocols' statistics and sections, ``tables``/``figures``/``reproduce``
the paper's tables from a reproduce output root.

Kept apart from the harness, and kept off every part of it that calls a model (an import-linter
contract), so a report can be rebuilt at any time from the files of a run folder alone (see
docs/results-format.md), without models, caches or network.
"""
