"""Which method variants each table needs, and under which names they are stored.

A run folder holds one row per (task, method name), so a method run with a non-default setting
(SourceLearn with 3 self-study cycles, Hybrid RAG with k = 2) is stored under an *alias*:
``<method>@<key>=<value>[,...]`` (``sourcelearn-ms@cycles=3``, ``hybrid_rag@top_k=2``), and Table 2's
budget-matched counterparts as ``<method>@matched=<reference>``. A setting equal to the method's
effective base value is no variant at all, so Figure 5's k = 8 reuses Table 1's cells.

Task-time variants (``top_k``, ``exclude_gold``, matched budgets) learn with the base config: the
paper degrades or widens retrieval at task time only, so their learned artifact is the base one
(rebuilt under the alias from cached model calls, at no model cost).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sourcebench.harness.registry import parse_variant, variant_alias

from .config import BenchmarkEntry, ExperimentConfig

STAGE_METHODS = {"M0": "sourcelearn-m0", "MS": "sourcelearn-ms", "MT": "sourcelearn",
                 "MT_wo_self": "sourcelearn-wo-self", "M_local": "sourcelearn-wo-cross",
                 "MS+Pi1": "sourcelearn-wo-failure"}


@dataclass(frozen=True)
class Variant:
    """One method under one setting, as stored in a run folder (``alias`` is the rows' method)."""

    alias: str
    method: str
    overrides: tuple[tuple[str, Any], ...] = ()
    task_time: bool = False  # overrides only change answering: learn with the base config
    matched_to: str | None = None  # Table 2: read up to this method's per-task prompt tokens

    def config(self, cfg: ExperimentConfig) -> dict[str, Any]:
        return {**cfg.base_config(self.method), **dict(self.overrides)}

    def learn_config(self, cfg: ExperimentConfig) -> dict[str, Any]:
        return cfg.base_config(self.method) if self.task_time or self.matched_to else self.config(cfg)

    @property
    def is_native(self) -> bool:
        return self.alias == self.method

    @classmethod
    def parse(cls, name: str) -> Variant:
        """A name of ``--methods`` (``hybrid_rag`` or ``hybrid_rag@top_k=4``) as a variant; the same alias
        format as the reproduce plan's, so a variant run by hand and one a config asks for share rows."""
        if "@" not in name:
            return cls(name, name)
        method, overrides = parse_variant(name)
        return cls(variant_alias(method, overrides), method, tuple(sorted(overrides.items())))


def resolve_method(name: str) -> tuple[Any | None, str]:
    """(class, "") or (None, why it cannot be used): registered names may fail to import."""
    from sourcebench.harness.errors import ConfigError
    from sourcebench.harness.registry import get_method_class, method_names

    if name not in method_names():
        return None, f"method {name} is not registered"
    try:
        return get_method_class(name), ""
    except Exception as e:  # noqa: BLE001 - a module not written yet, a broken plugin
        cause = e.__cause__ if isinstance(e, ConfigError) and e.__cause__ is not None else e  # the registry's wrap
        msg = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return None, f"method {name} is not available ({type(cause).__name__}: {msg})"


def _effective(method: str, config: dict[str, Any]) -> dict[str, Any]:
    cls, _ = resolve_method(method)
    if cls is None:
        return dict(config)
    try:
        return cls.Config(**config).model_dump()
    except Exception:  # noqa: BLE001 - invalid: compare as written; the runner reports it
        return dict(config)


def native(cfg: ExperimentConfig, method: str) -> Variant:
    return Variant(method, method)


def with_overrides(cfg: ExperimentConfig, method: str, overrides: dict[str, Any], task_time: bool) -> Variant:
    """The variant of ``method`` with these settings; the method itself if they change nothing."""
    base = _effective(method, cfg.base_config(method))
    kept = tuple(sorted((k, v) for k, v in overrides.items() if k not in base or base[k] != v))
    if not kept:
        return native(cfg, method)
    return Variant(variant_alias(method, dict(kept)), method, kept, task_time=task_time)


def matched(cfg: ExperimentConfig, method: str, reference: str) -> Variant:
    return Variant(f"{method}@matched={reference}", method, (), task_time=True, matched_to=reference)


def k_variant(cfg: ExperimentConfig, method: str, k: int) -> Variant:
    return with_overrides(cfg, method, {"top_k": k}, task_time=True)


def gold_removed(cfg: ExperimentConfig, method: str) -> Variant:
    return with_overrides(cfg, method, {"exclude_gold": True}, task_time=True)


def cycles_variant(cfg: ExperimentConfig, method: str, m0_method: str, cycles: int) -> Variant:
    return native(cfg, m0_method) if cycles == 0 else with_overrides(cfg, method, {"cycles": cycles}, task_time=False)


def table_variants(cfg: ExperimentConfig, table_id: str, bench: BenchmarkEntry) -> list[Variant]:
    """The variants one table needs on one benchmark (in display order)."""
    t = getattr(cfg.tables, table_id)
    out: list[Variant] = []
    if table_id == "table1":
        out = [native(cfg, m) for m in t.methods]
    elif table_id == "table2":
        out = [matched(cfg, m, t.reference) for m in t.counterparts] + [native(cfg, t.reference)]
    elif table_id in ("table3", "table4", "figure4"):
        out = [native(cfg, STAGE_METHODS[s]) for s in t.stages if s in STAGE_METHODS]
    elif table_id == "table5":
        out = [native(cfg, m) for m in t.methods]
    elif table_id == "table6":
        out = [cycles_variant(cfg, t.method, t.m0_method, c) for c in t.cycles]
    elif table_id == "figure3":
        out = [native(cfg, m) for m in dict.fromkeys(t.stages + t.pathways)]
    elif table_id == "figure5":
        out = [k_variant(cfg, m, k) for m in t.methods for k in t.k]
        if bench.id in t.gold_removal:
            out += [native(cfg, m) for m in t.methods] + [gold_removed(cfg, m) for m in t.methods]
    return list({v.alias: v for v in out}.values())


@dataclass
class FolderPlan:
    """Everything to run in one (backend, benchmark) run folder, and for which tables."""

    backend: str
    benchmark: str
    variants: list[Variant] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)


def plan(cfg: ExperimentConfig, only: set[str] | None = None) -> list[FolderPlan]:
    """One ``FolderPlan`` per (backend, benchmark) that any enabled table covers, in config order."""
    folders: dict[tuple[str, str], FolderPlan] = {}
    for tid in cfg.tables.enabled():
        if only and tid not in only:
            continue
        backends, benches = cfg.scope(tid)
        for b in backends:
            for bench in benches:
                fp = folders.setdefault((b.id, bench.id), FolderPlan(b.id, bench.id))
                fp.tables.append(tid)
                known = {v.alias for v in fp.variants}
                fp.variants += [v for v in table_variants(cfg, tid, bench) if v.alias not in known]
    order = {(b.id, n.id): i for i, (b, n) in enumerate((b, n) for b in cfg.backends for n in cfg.benchmarks)}
    return sorted(folders.values(), key=lambda f: order[(f.backend, f.benchmark)])
