"""One folder per benchmark: its adapter, its fetcher, its data and a README, and nothing of another one.

A benchmark is read in one place (``adapters/<benchmark>/``, as inspect_evals lays out a benchmark);
what all benchmarks share (downloads, the fetch manifest, venvs, the ``FetchedData`` mixin, data
availability) stays in ``adapters/fetch/`` and ``adapters/availability.py``.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from sourcebench.adapters.fetch import FETCHERS
from sourcebench.harness import registry
from tests.conftest import ROOT

ADAPTERS = ROOT / "adapters"
SHARED = {"__init__.py", "availability.py", "fetch"}  # adapters/ entries that belong to no benchmark
SHARED_FETCH = {"__init__.py", "download.py", "manifest.py", "venv.py"}
SECTIONS = ("Sources", "Tasks", "Scoring", "Data", "Deviations")


def benchmark_classes() -> dict[str, type]:
    """Every built-in benchmark by name: the registered ones and TinyWiki (the conformance checks')."""
    from sourcebench.adapters.tinywiki import TinyWiki

    found = {name: registry.resolve(t) for name, t in registry.BUILTINS[registry.BENCHMARK_GROUP].items()}
    return {**found, "tinywiki": TinyWiki}


def folders() -> set[str]:
    return {p.name for p in ADAPTERS.iterdir() if p.is_dir() and p.name not in SHARED and p.name != "__pycache__"}


def test_adapters_holds_one_folder_per_benchmark_and_the_shared_code_only():
    top = {p.name for p in ADAPTERS.iterdir() if p.name != "__pycache__"}
    assert top - folders() == SHARED
    assert folders() == set(benchmark_classes())
    assert {p.name for p in (ADAPTERS / "fetch").iterdir() if p.name != "__pycache__"} == SHARED_FETCH


@pytest.mark.parametrize("name", sorted(benchmark_classes()))
def test_a_benchmark_lives_in_its_folder(name):
    cls = benchmark_classes()[name]
    folder = ADAPTERS / name
    assert cls.__module__.startswith(f"sourcebench.adapters.{name}."), cls.__module__
    assert (folder / "__init__.py").is_file() and (folder / "README.md").is_file()
    package = __import__(f"sourcebench.adapters.{name}", fromlist=["_"])
    assert getattr(package, cls.__name__) is cls  # the registered target is the package's export
    if (folder / "fetch.py").is_file():  # `sourcebench data fetch NAME` runs it
        assert FETCHERS[name] == f"sourcebench.adapters.{name}.fetch"
    else:
        assert name not in FETCHERS


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## +(.+?)\s*$", text, flags=re.MULTILINE)
    return {title: body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _flat(text: str) -> str:
    return " ".join(text.replace("\n- ", "\n").split())


@pytest.mark.parametrize("name", sorted(benchmark_classes()))
def test_a_benchmarks_readme_says_what_it_is_and_quotes_its_deviations(name):
    cls = benchmark_classes()[name]
    sections = _sections((ADAPTERS / name / "README.md").read_text(encoding="utf-8"))
    assert [s for s in SECTIONS if s in sections] == list(SECTIONS), sorted(sections)
    deviations = _flat(sections["Deviations"])
    missing = [d for d in cls.deviations if _flat(d) not in deviations]
    assert missing == [], f"adapters/{name}/README.md does not quote these deviations: {missing}"


def test_wheels_ship_each_benchmarks_data():
    """The folders are listed packages, and PhantomWiki's bundled universe (a data folder, not a
    package) is package-data of its folder."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert {f"sourcebench.adapters.{n}" for n in folders()} <= set(tool["setuptools"]["packages"])
    assert tool["setuptools"]["package-data"]["sourcebench.adapters.phantomwiki"] == ["data/*.md", "data/*/*.json"]
    from sourcebench.adapters.phantomwiki.benchmark import BUNDLED

    assert BUNDLED == ADAPTERS / "phantomwiki" / "data" and (BUNDLED / "PROVENANCE.md").is_file()


def test_the_independence_contract_names_every_benchmark_folder():
    """import-linter keeps the folders from importing each other (tests/test_layers.py runs it); a new
    folder must join the contract."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    independence = [c for c in contracts if c["type"] == "independence"]
    assert [set(c["modules"]) for c in independence] == [{f"sourcebench.adapters.{n}" for n in folders()}]


def test_no_benchmark_folder_and_no_shared_module_imports_another_benchmark():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("sourcebench", exclude_type_checking_imports=True, cache_dir=None)
    names = folders()

    def bench_of(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["sourcebench", "adapters"] and parts[2] in names else None

    bad = []
    for m in graph.modules:
        if not m.startswith("sourcebench.adapters"):
            continue
        for imported in graph.find_modules_directly_imported_by(m):
            other = bench_of(imported)
            if other is not None and other != bench_of(m):
                bad.append((m, imported))
    assert bad == []
