"""The category labels of the audit tables (Figure 4, Tables 3-4), as declared by the ``audit``
command a registered method provides (SourceLearn's ``audit_cli.COMMAND``), so the tables that lay
out ``<run>/audit/*.json`` need not import the method. Looked up when a table is built, not when
this module is imported: finding the command imports every registered method."""

from __future__ import annotations

from functools import cache

from sourcebench.harness.commands import find_command


@cache
def _columns() -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in find_command("audit").columns.items()}


def kinds() -> tuple[str, ...]:
    """Unit kinds (Figure 4a)."""
    return _columns()["kinds"]


def ground_labels() -> tuple[str, ...]:
    """Grounding labels (Table 3)."""
    return _columns()["grounding"]


def preserve_labels() -> tuple[str, ...]:
    """Preservation labels (Table 4)."""
    return _columns()["preservation"]


def coverage_bins() -> tuple[str, ...]:
    """Key-coverage bins (Figure 4d)."""
    return _columns()["coverage_bins"]
