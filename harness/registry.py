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
COMMAND_GROUP = "sourcebench.commands"

_BUILTIN_METHODS = {
    "hybrid_rag": "sourcebench.methods.hybrid_rag:HybridRAG",
    "no_source": "sourcebench.methods.no_source:NoSource",
    "raptor": "sourcebench.methods.raptor:RAPTOR",
    "hipporag2": "sourcebench.methods.hipporag2:HippoRAG2",
    "awm": "sourcebench.methods.awm:AWM",
    "sourcelearn": "sourcebench.methods.sourcelearn.method:SourceLearn",
    "sourcelearn-m0": "sourcebench.methods.sourcelearn.method:SourceLearnM0",
    "sourcelearn-ms": "sourcebench.methods.sourcelearn.method:SourceLearnMS",
    "sourcelearn-wo-self": "sourcebench.methods.sourcelearn.method:SourceLearnWithoutSelf",
    "sourcelearn-wo-cross": "sourcebench.methods.sourcelearn.method:SourceLearnLocal",
    "sourcelearn-wo-failure": "sourcebench.methods.sourcelearn.method:SourceLearnWithoutFailure",
    "rika": "sourcebench.methods.rika:RIKA",
    "kb-curator": "sourcebench.methods.kb_curator:KBCurator",
    "navigator": "sourcebench.methods.navigator:Navigator",
}
_BUILTIN_BENCHMARKS = {
    "phantomwiki": "sourcebench.adapters.phantomwiki:PhantomWiki",
    "apibench": "sourcebench.adapters.apibench:APIBench",
    "swe_qa": "sourcebench.adapters.swe_qa:SWEQA",
    "multidoc2dial": "sourcebench.adapters.multidoc2dial:MultiDoc2Dial",
    "narrativeqa": "sourcebench.adapters.narrativeqa:NarrativeQA",
    "appworld": "sourcebench.adapters.appworld:AppWorld",
}
# Subcommands other packages bring to the CLI: each target is a ``harness.method.Command``.
_BUILTIN_COMMANDS = {
    "protocol": "sourcebench.reports.protocols.cli:COMMAND",
    "reproduce": "sourcebench.reports.reproduce:COMMAND",
}
BUILTINS = {METHOD_GROUP: _BUILTIN_METHODS, BENCHMARK_GROUP: _BUILTIN_BENCHMARKS, COMMAND_GROUP: _BUILTIN_COMMANDS}
_EXTRA: dict[str, dict[str, Any]] = {METHOD_GROUP: {}, BENCHMARK_GROUP: {}, COMMAND_GROUP: {}}


def register_method(name: str, cls: Any) -> None:
    """Register at run time (handy in notebooks and tests)."""
    _EXTRA[METHOD_GROUP][name] = cls


def register_benchmark(name: str, cls: Any) -> None:
    _EXTRA[BENCHMARK_GROUP][name] = cls


def _targets(group: str, builtin: dict[str, str]) -> dict[str, Any]:
    """Built-ins, then installed entry points, then run-time registrations. An entry point may name a
    built-in only with the built-in's own target (this distribution's); another package's entry point
    under a built-in's name is an error, never a silent replacement."""
    found: dict[str, Any] = dict(builtin)
    for ep in entry_points(group=group):
        if ep.name in builtin and ep.value != builtin[ep.name]:
            dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
            raise ConfigError(f"{dist} registers {group} entry point {ep.name!r} = {ep.value!r}, but "
                              f"{ep.name!r} is a built-in ({builtin[ep.name]}); rename it in that package")
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


def command_targets() -> dict[str, Any]:
    """The subcommands other packages register (``sourcebench.commands``), by name, unresolved."""
    return _targets(COMMAND_GROUP, _BUILTIN_COMMANDS)


def resolve(target: Any) -> Any:
    """A registry target (``module:attr`` string, entry point, or object) as the object it names."""
    return _resolve(target)
