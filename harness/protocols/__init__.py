"""The model-calling part of the evaluation protocols: what needs new answers from a finished run.

* ``session``: re-entering a run folder on exactly its backend, cache, splits and artifacts, with
  every call counted under phase ``protocol``;
* ``entries``: the removable entries of a method's artifact;
* ``prequential``: the online streams (answer each task before learning from it) and their costs;
* ``harmful``: the harmful-entry leave-one-out (answers with and without each exposed entry);
* ``run``: ``run_protocol(name, run_dir, ...)``, the run's lock, session and live-call count.

They return raw results (per-task scores, paired score lists, costs) and compute no statistic:
the verdicts, rates, accuracies and paired tests are ``sourcebench.reports.protocols``'s, which read
run folders and never call a model (an import-linter contract keeps reports off this package, the
model layer and the runner). ``harness/cli/protocol.py`` (``sourcebench protocol``) runs one here,
summarizes it there and writes ``<run>/protocols/<name>.json``.
"""
