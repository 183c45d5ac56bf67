"""Reports over a finished run folder: seeded statistics (``stats``) and the leaderboard (``leaderboard``).

Kept apart from the harness so a report can be rebuilt at any time from the files of a run folder
alone (see docs/results-format.md), without models, caches or network.
"""
