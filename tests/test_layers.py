"""The package's layers hold (pyproject's import-linter contracts) and no module is in an import cycle.

Both read the import graph of this checkout's ``sourcebench`` (tests/conftest.py puts it first on
the path): every import counts, those inside functions too, but not ``if TYPE_CHECKING:`` ones,
which never run.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests.conftest import ROOT

grimp = pytest.importorskip("grimp")


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("sourcebench", exclude_type_checking_imports=True, cache_dir=None)


def test_import_linter_contracts_hold():
    # in a subprocess: import-linter configures logging, which would silence later tests' caplog
    r = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                        f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True))"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def strongly_connected(graph) -> list[list[str]]:
    """Tarjan's algorithm over the module graph: the components of more than one module are cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_module_is_in_an_import_cycle(graph):
    cycles = strongly_connected(graph)
    assert cycles == [], "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle():
    class Toy:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges.get(m, set())

    assert strongly_connected(Toy()) == [["a", "b", "c"]]


def test_the_core_does_not_import_the_application_tier(graph):
    core = [m for m in graph.modules if m.startswith("sourcebench.harness")
            and not m.startswith("sourcebench.harness.cli")]
    bad = [(m, i) for m in core for i in graph.find_modules_directly_imported_by(m)
           if i.startswith("sourcebench.harness.cli")]
    assert bad == []


def test_packages_listed_in_pyproject_are_the_folders():
    """pyproject lists the installed packages (the root is mapped to ``sourcebench``): a new folder
    with an ``__init__.py`` must be listed, or a wheel would install without it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {"sourcebench"} | {
        "sourcebench." + ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("harness", "methods", "adapters", "judges", "reports")
        for p in (ROOT / top).rglob("__init__.py")}
    assert listed == folders


def test_registry_fallback_tables_are_the_entry_points():
    """The registry's built-in tables (used when the checkout is not installed) say exactly what
    pyproject's entry points say."""
    from sourcebench.harness import registry

    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for group, table in registry.BUILTINS.items():
        assert eps[group] == table, group


MODEL_CALLING = ("sourcebench.harness.protocols", "sourcebench.harness.llm", "sourcebench.harness.providers",
                 "sourcebench.harness.runner", "sourcebench.harness.executors", "sourcebench.harness.backend",
                 "sourcebench.harness.embeddings", "sourcebench.harness.retrieval")


def test_reports_never_reach_the_model_calling_core():
    """Reports read run folders and render: no import chain, direct or through another core module, leads from
    them to what calls a model (pyproject's contract says the same, with no exception)."""
    contract = next(c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
                    if c.get("source_modules") == ["sourcebench.reports"] and c["type"] == "forbidden"
                    and "sourcebench.harness.protocols" in c.get("forbidden_modules", []))
    assert set(MODEL_CALLING) <= set(contract["forbidden_modules"])
    assert not contract.get("ignore_imports")
    graph = grimp.build_graph("sourcebench", exclude_type_checking_imports=True, cache_dir=None)
    reports = {m for m in graph.modules if m.startswith("sourcebench.reports")}
    bad = [(m, f) for f in MODEL_CALLING for m in reports
           if graph.find_shortest_chain(importer=m, imported=f, as_packages=True)]
    assert bad == []
