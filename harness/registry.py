"""Registries of methods and benchmarks, extensible by third-party packages through entry points.

A package adds a method by declaring, in its own pyproject.toml::

    [project.entry-points."sourcebench.methods"]
    my_method = "my_pkg.module:MyMethod"

and likewise ``sourcebench.benchmarks`` for a benchmark adapter. Built-ins are registered the same
way (see this project's pyproject.toml), with a fallback table for a source checkout that has not
been pip-installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import json
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
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
DISTRIBUTION = "sourcebench"  # this package's distribution name (its entry points name the built-ins)
# Subcommands found through the ``sourcebench.commands`` entry points, as another package's would be; these two
# are of the application tier (harness/cli/): each target is a ``harness.method.Command``.
_BUILTIN_COMMANDS = {
    "protocol": "sourcebench.harness.cli.protocol:COMMAND",
    "reproduce": "sourcebench.harness.cli.reproduce:COMMAND",
}
BUILTINS = {METHOD_GROUP: _BUILTIN_METHODS, BENCHMARK_GROUP: _BUILTIN_BENCHMARKS, COMMAND_GROUP: _BUILTIN_COMMANDS}
_EXTRA: dict[str, dict[str, Any]] = {METHOD_GROUP: {}, BENCHMARK_GROUP: {}, COMMAND_GROUP: {}}


def register_method(name: str, cls: Any) -> None:
    """Register at run time (handy in notebooks and tests)."""
    _EXTRA[METHOD_GROUP][name] = cls


def register_benchmark(name: str, cls: Any) -> None:
    _EXTRA[BENCHMARK_GROUP][name] = cls


@contextlib.contextmanager
def registered(group: str, classes: dict[str, Any]) -> Iterator[None]:
    """``classes`` registered at run time under their names for the duration of the block (a
    conformance check's temporary benchmark, a config's variant aliases); what was registered under
    those names before is restored after."""
    extra = _EXTRA[group]
    saved = {k: extra[k] for k in classes if k in extra}
    extra.update(classes)
    try:
        yield
    finally:
        for k in classes:
            extra.pop(k, None)
        extra.update(saved)


def _targets(group: str, builtin: dict[str, str]) -> dict[str, Any]:
    """Built-ins, then installed entry points, then run-time registrations. An entry point may name a
    built-in only with the built-in's own target (this distribution's); another package's entry point
    under a built-in's name is an error, never a silent replacement. This distribution's own entry
    point under another target is the metadata of an editable install made before a built-in moved
    (entry points are written at install time): the built-in table, which is the code's, wins."""
    found: dict[str, Any] = dict(builtin)
    for ep in entry_points(group=group):
        if ep.name in builtin and ep.value != builtin[ep.name]:
            dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed package"
            if dist == DISTRIBUTION:  # our own, as installed: an editable install's entry points are written at
                continue  # install time, so a built-in moved since keeps its old target there until reinstalled
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


def _unknown(what: str, name: str, known: list[str]) -> ConfigError:
    """An unknown name, with the closest known ones first ("did you mean")."""
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ConfigError(f"unknown {what} '{name}'{hint} known: {', '.join(sorted(known))}")


def get_method_class(name: str) -> Any:
    """The class registered as ``name``; ``method@key=value[,key=value]`` is that method under these
    settings, as a subclass of its own named by them (its rows and artifacts are its own)."""
    targets = _targets(METHOD_GROUP, _BUILTIN_METHODS)
    if name not in targets and "@" in name:
        base, overrides = parse_variant(name)
        return variant_class(get_method_class(base), overrides, base)
    if name not in targets:
        raise _unknown("method", name, list(targets))
    try:
        return _resolve(targets[name])
    except Exception as e:  # noqa: BLE001 - a broken plugin: one line, as `sourcebench list` shows it
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"method '{name}' cannot be loaded ({type(e).__name__}: {msg})") from e


def get_benchmark_class(name: str) -> Any:
    targets = _targets(BENCHMARK_GROUP, _BUILTIN_BENCHMARKS)
    if name not in targets:
        raise _unknown("benchmark", name, list(targets))
    return _resolve(targets[name])


# -- variants: one method under another setting, as its own row -------------------------------------

def variant_value(v: Any) -> str:
    """A setting's value as written in a variant's name (JSON, without a string's quotes)."""
    return json.dumps(v, sort_keys=True, separators=(",", ":")).strip('"')


def variant_alias(method: str, overrides: dict[str, Any]) -> str:
    """The name a method's variant is stored under: ``method@key=value[,...]``, keys sorted."""
    return method + "@" + ",".join(f"{k}={variant_value(v)}" for k, v in sorted(overrides.items()))


def parse_variant(name: str) -> tuple[str, dict[str, Any]]:
    """``method@key=value[,...]`` as (method, settings); values are read as JSON where they parse."""
    base, _, spec = name.partition("@")
    overrides: dict[str, Any] = {}
    for part in spec.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"method variant {name!r}: expected {base}@KEY=VALUE[,KEY=VALUE], got {part!r}")
        try:
            overrides[key.strip()] = json.loads(value)
        except ValueError:
            overrides[key.strip()] = value
    return base, overrides


def variant_class(base_cls: Any, overrides: dict[str, Any], method: str | None = None) -> Any:
    """A subclass of ``base_cls`` (registered as ``method``) named by its settings, which it applies over
    any config it is given."""
    alias = variant_alias(method or base_cls.name, overrides)

    def __init__(self: Any, config: Any = None) -> None:
        given = config.model_dump() if hasattr(config, "model_dump") else dict(config or {})
        base_cls.__init__(self, {**given, **overrides})

    return type(f"{base_cls.__name__}Variant", (base_cls,), {
        "name": alias, "__init__": __init__, "__module__": base_cls.__module__,
        "__qualname__": f"{base_cls.__qualname__}[{alias}]"})


def method_list(text: str) -> list[str]:
    """``--methods``: names separated by commas, where a variant's further settings stay with it
    (``a,b@k=1,j=2,c`` is a, b@j=2,k=1 and c); variants are named canonically (keys sorted)."""
    names: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" in part and "@" not in part and names and "@" in names[-1]:
            names[-1] += "," + part
        else:
            names.append(part)
    return [variant_alias(*parse_variant(n)) if "@" in n else n for n in names]


def command_targets() -> dict[str, Any]:
    """The subcommands other packages register (``sourcebench.commands``), by name, unresolved."""
    return _targets(COMMAND_GROUP, _BUILTIN_COMMANDS)


def resolve(target: Any) -> Any:
    """A registry target (``module:attr`` string, entry point, or object) as the object it names."""
    return _resolve(target)


# -- the code a method runs -----------------------------------------------------------------------

_SHARED_METHOD_MODULES = ("__init__.py", "evidence.py")  # what every built-in method may call in methods/


def method_code(cls: Any) -> dict[str, Any]:
    """A hash of the code ``cls`` runs and its package version: what the artifact key and every result
    row record, so that edited code is never answered by an artifact or a row of the old code.

    A built-in method: its module (or its package folder) under ``sourcebench.methods`` plus the shared
    ``methods/__init__.py`` and ``methods/evidence.py``; another package installed as a distribution
    whose file list is known: that distribution's files; and every file of the top-level package folder
    (or the single module file) the class comes from, which is what an editable install's file list
    (a ``.pth``) leaves out. Version: the distribution's, else the method's own ``version``."""
    return _method_code(cls.__module__, str(getattr(cls, "version", "")))


def _method_code(module: str, method_version: str) -> dict[str, Any]:
    import sys

    mod = sys.modules.get(module) or importlib.import_module(module)
    file = Path(getattr(mod, "__file__", "") or "")
    top = module.split(".")[0]
    files: list[Path] = []
    package, version = None, method_version
    if module.startswith("sourcebench.methods."):
        methods_dir = Path(__file__).resolve().parent.parent / "methods"  # the package's folder, not imported
        unit = methods_dir / module.split(".")[2]
        files = _tree(unit) if unit.is_dir() else [unit.with_suffix(".py")]
        files += [methods_dir / f for f in _SHARED_METHOD_MODULES]
        package, version = "sourcebench", _dist_version("sourcebench") or method_version
    else:
        for dist in importlib.metadata.packages_distributions().get(top, []):
            d = importlib.metadata.distribution(dist)
            package, version = d.metadata["Name"] or dist, d.version
            listed = [Path(d.locate_file(f)) for f in (d.files or []) if _is_code_file(str(f))]
            files = [f for f in listed if f.is_file()]
            break
        # and always the code itself: an editable install's file list names a .pth file, not the package
        if file.name:
            files += _own_files(module, file)
    h = hashlib.sha256()
    for f in sorted(set(files)):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return {"code_hash": h.hexdigest()[:16], "package": package, "package_version": version}


def _own_files(module: str, file: Path) -> list[Path]:
    """The top-level package folder of ``module`` (its module file when it is a top-level module)."""
    if "." not in module and file.name != "__init__.py":
        return [file]
    top_file = getattr(importlib.import_module(module.split(".")[0]), "__file__", None)  # None: namespace package
    return _tree(Path(top_file).parent if top_file else file.parent)


def _is_code_file(name: str) -> bool:
    return "__pycache__" not in name and not name.endswith((".pyc", "RECORD", "INSTALLER", "REQUESTED",
                                                               "direct_url.json"))


def _tree(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and _is_code_file(str(p))]


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
