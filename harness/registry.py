"""Registries of methods and benchmarks, extensible by third-party packages through entry points.

A package adds a method by declaring, in its own pyproject.toml::

    [project.entry-points."sourcebench.methods"]
    my_method = "my_pkg.module:MyMethod"

and likewise ``sourcebench.benchmarks`` for a benchmark adapter. Built-ins are registered the same
way (see this project's pyproject.toml), with a fallback table for a source checkout that has not
been pip-installed.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from .errors import ConfigError

METHOD_GROUP = "sourcebench.methods"
BENCHMARK_GROUP = "sourcebench.benchmarks"

_BUILTIN_METHODS = {
    "hybrid_rag": "methods.hybrid_rag:HybridRAG",
    "no_source": "methods.no_source:NoSource",
    "raptor": "methods.raptor:RAPTOR",
    "hipporag2": "methods.hipporag2:HippoRAG2",
    "awm": "methods.awm:AWM",
    "sourcelearn": "methods.sourcelearn.method:SourceLearn",
    "sourcelearn-m0": "methods.sourcelearn.method:SourceLearnM0",
    "sourcelearn-ms": "methods.sourcelearn.method:SourceLearnMS",
    "sourcelearn-wo-self": "methods.sourcelearn.method:SourceLearnWithoutSelf",
    "sourcelearn-wo-cross": "methods.sourcelearn.method:SourceLearnLocal",
    "sourcelearn-wo-failure": "methods.sourcelearn.method:SourceLearnWithoutFailure",
    "rika": "methods.rika:RIKA",
    "kb-curator": "methods.kb_curator:KBCurator",
    "navigator": "methods.navigator:Navigator",
}
_BUILTIN_BENCHMARKS = {
    "phantomwiki": "adapters.phantomwiki:PhantomWiki",
    "apibench": "adapters.apibench:APIBench",
    "swe_qa": "adapters.swe_qa:SWEQA",
    "multidoc2dial": "adapters.multidoc2dial:MultiDoc2Dial",
    "narrativeqa": "adapters.narrativeqa:NarrativeQA",
    "appworld": "adapters.appworld:AppWorld",
}
_EXTRA: dict[str, dict[str, Any]] = {METHOD_GROUP: {}, BENCHMARK_GROUP: {}}


def register_method(name: str, cls: Any) -> None:
    """Register at run time (handy in notebooks and tests)."""
    _EXTRA[METHOD_GROUP][name] = cls


def register_benchmark(name: str, cls: Any) -> None:
    _EXTRA[BENCHMARK_GROUP][name] = cls


def _targets(group: str, builtin: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = dict(builtin)
    for ep in entry_points(group=group):
        found[ep.name] = ep
    found.update(_EXTRA[group])
    return found


def _resolve(target: Any) -> Any:
    if isinstance(target, str):
        mod, _, attr = target.partition(":")
        return getattr(importlib.import_module(mod), attr)
    from importlib.metadata import EntryPoint

    if isinstance(target, EntryPoint):
        return target.load()
    return target  # a class registered at run time


def method_names() -> list[str]:
    return sorted(_targets(METHOD_GROUP, _BUILTIN_METHODS))


def benchmark_names() -> list[str]:
    return sorted(_targets(BENCHMARK_GROUP, _BUILTIN_BENCHMARKS))


def get_method_class(name: str) -> Any:
    targets = _targets(METHOD_GROUP, _BUILTIN_METHODS)
    if name not in targets:
        raise ConfigError(f"unknown method '{name}'; known: {', '.join(sorted(targets))}")
    return _resolve(targets[name])


def get_benchmark_class(name: str) -> Any:
    targets = _targets(BENCHMARK_GROUP, _BUILTIN_BENCHMARKS)
    if name not in targets:
        raise ConfigError(f"unknown benchmark '{name}'; known: {', '.join(sorted(targets))}")
    return _resolve(targets[name])
