"""The category labels of the audit tables (Figure 4, Tables 3-4), as declared by the ``audit``
command a registered method provides (SourceLearn's ``audit_cli.COMMAND``), so the tables that lay
out ``<run>/audit/*.json`` need not import the method."""

from __future__ import annotations

from sourcebench.harness.commands import find_command

_COLUMNS = find_command("audit").columns

KINDS: tuple[str, ...] = tuple(_COLUMNS["kinds"])  # unit kinds (Figure 4a)
GROUND_LABELS: tuple[str, ...] = tuple(_COLUMNS["grounding"])  # Table 3
PRESERVE_LABELS: tuple[str, ...] = tuple(_COLUMNS["preservation"])  # Table 4
COVERAGE_BINS: tuple[str, ...] = tuple(_COLUMNS["coverage_bins"])  # Figure 4d
