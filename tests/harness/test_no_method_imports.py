"""``harness/`` and ``reports/`` read methods only through the Method interface and the registry.

Every module is parsed (ast), so imports inside functions (lazy imports) count as well. The
registry's entry-point table names built-in methods as strings; that is how they are loaded, not
an import, and it is the one place allowed to know them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "reports")


def _is_methods(module: str | None) -> bool:
    return bool(module) and (module == "sourcebench.methods" or module.startswith("sourcebench.methods."))  # type: ignore[union-attr]


def method_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: statement`` for every import of ``methods`` in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    hits = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        hits += [f"{path.relative_to(root)}:{node.lineno}: imports {n}" for n in names if _is_methods(n)]
    return hits


def test_harness_and_reports_import_no_method():
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 20  # the scan found the packages
    hits = [h for p in files for h in method_imports(p)]
    assert not hits, "\n".join(hits)


def test_the_scan_sees_lazy_and_dynamic_imports(tmp_path):
    src = tmp_path / "mod.py"
    src.write_text("import json\n"
                   "def f():\n    from sourcebench.methods.awm import AWM\n    import sourcebench.methods.sourcelearn as s\n"
                   "    return importlib.import_module('sourcebench.methods.rika')\n"
                   "from sourcebench.reports import methods_table\n")
    hits = method_imports(src, tmp_path)
    assert sorted(h.split(": imports ")[1] for h in hits) == ["sourcebench.methods.awm", "sourcebench.methods.rika",
                                                              "sourcebench.methods.sourcelearn"]
    assert all(h.startswith("mod.py:") for h in hits)
