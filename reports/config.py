"""Experiment configs for ``sourcebench reproduce``: backends x benchmarks x methods x seeds, and the
tables and figures to produce from them.

A config plus the results folder it names determine every table: the config says which cells
exist, the run folders hold the scored rows. Configs are YAML or TOML, validated with pydantic;
unknown keys are errors (a typo must not silently drop a table), and every reference from a table
to a backend or benchmark is checked when the file is loaded.

Endpoints: model names are inspect-ai names; a backend's ``env`` sets non-secret endpoint
variables (``<SERVICE>_BASE_URL``) while it runs. Keys never go into a config: names that look like
credentials are rejected, they must come from the environment.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sourcebench.harness.errors import ConfigError

SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SECRET_NAME = re.compile(r"(?i)(key|token|secret|password|passwd|credential)")

# Display names of the registered methods (a config's ``methods.<name>.label`` overrides them).
DEFAULT_LABELS = {
    "hybrid_rag": "Hybrid RAG",
    "no_source": "No source",
    "raptor": "RAPTOR",
    "hipporag2": "HippoRAG 2",
    "awm": "AWM",
    "sourcelearn": "SourceLearn",
    "sourcelearn-m0": "M0",
    "sourcelearn-ms": "MS",
    "sourcelearn-wo-self": "w/o self-directed",
    "sourcelearn-wo-cross": "w/o cross-task",
    "sourcelearn-wo-failure": "w/o failure-guided",
    "rika": "RIKA",
    "kb-curator": "KB curator",
    "navigator": "Book navigator",
}
TABLE_IDS = ("table1", "table2", "table3", "table4", "table5", "table6", "figure3", "figure4", "figure5")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _slug(v: str, what: str) -> str:
    if not SLUG.match(v):
        raise ValueError(f"{what} {v!r}: use letters, digits, '.', '_' or '-' (it names a folder)")
    return v


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]  # inspect-ai's values


class Backend(_Strict):
    """One model backend: the solver, its judge, and generation settings."""

    id: str = Field(description="folder name of this backend's runs")
    label: str | None = None
    model: str = Field(description="inspect-ai model name, e.g. openai/gpt-4o-mini or local/smollm2")
    judge_model: str | None = None
    embedder: str | None = None  # default: the config's embedder
    max_tokens: int = Field(512, gt=0)
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    context_window: int | None = Field(None, gt=0)
    reasoning_effort: Effort | None = None  # the solver's; None: the provider's default
    judge_reasoning_effort: Effort | None = None
    # reasoning allowance added to each reply bound on a reasoning backend (None: the effort's
    # default; -1: no output cap), for the solver and the judge (harness/llm/)
    reasoning_tokens: int | None = Field(None, ge=-1)
    judge_reasoning_tokens: int | None = Field(None, ge=-1)
    max_samples: int | None = Field(None, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="non-secret endpoint variables")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return _slug(v, "backend id")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if SECRET_NAME.search(k)]
        if bad:
            raise ValueError(f"env {', '.join(bad)}: credentials must come from the environment, not the config")
        return v

    @property
    def name(self) -> str:
        return self.label or self.id


class BenchmarkEntry(_Strict):
    """One benchmark column: a registered benchmark, its sources and options."""

    id: str
    benchmark: str | None = None  # registered name (default: id)
    label: str | None = None
    group: str | None = None  # column group in Table 1, e.g. "Document QA"
    sources: list[str] | None = None  # default: every source of the benchmark
    options: dict[str, str] = Field(default_factory=dict)
    limit: int | None = Field(None, gt=0)  # default: the config's limit
    guidance_limit: int | None = Field(None, gt=0)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return _slug(v, "benchmark id")

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, v: Any) -> Any:
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else v

    @property
    def registered(self) -> str:
        return self.benchmark or self.id

    @property
    def name(self) -> str:
        return self.label or self.id


class MethodEntry(_Strict):
    """Display label and base config of a method, shared by every table that uses it."""

    label: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class Statistics(_Strict):
    bootstrap_resamples: int = Field(2000, gt=0)
    permutation_resamples: int = Field(9999, gt=0)
    seed: int = 0


class _Scoped(_Strict):
    """Where a table's cells live: one or more backends, a subset of benchmarks (default all)."""

    backends: list[str] | None = None
    benchmarks: list[str] | None = None


class Table1(_Scoped):
    methods: list[str] = Field(default_factory=lambda: ["hybrid_rag", "raptor", "hipporag2", "awm", "sourcelearn"])
    show_ci: bool = False  # also print the 95% interval in the Markdown/LaTeX cells (CSV/HTML always have it)


class Table2(_Scoped):
    counterparts: list[str] = Field(default_factory=lambda: ["hybrid_rag", "raptor", "hipporag2"])
    reference: str = "sourcelearn"
    sources: list[str] | None = None  # columns; default every source of the chosen benchmarks


class AuditTable(_Scoped):
    sources: list[str] | None = None
    sample: int = Field(120, ge=0)  # units judged per stage (Table 3) or per step (Table 4); 0 = all
    seed: int = 0
    stages: list[str] = Field(default_factory=lambda: ["M0", "MS", "MT"])


class Table5(_Scoped):
    methods: list[str] = Field(default_factory=lambda: ["hybrid_rag", "sourcelearn-m0", "sourcelearn-ms",
                                                        "sourcelearn"])
    anchor_k: int = Field(1, gt=0)  # retrieved elements that stand for a task without gold labels


class Table6(_Scoped):
    sources: list[str] | None = None
    cycles: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4])
    method: str = "sourcelearn-ms"  # the model after c self-directed cycles (cycle 0 = m0_method)
    m0_method: str = "sourcelearn-m0"

    @field_validator("cycles")
    @classmethod
    def _cycles(cls, v: list[int]) -> list[int]:
        if not v or any(c < 0 for c in v) or len(set(v)) != len(v):
            raise ValueError("cycles: distinct non-negative integers, e.g. [0, 1, 2, 3, 4]")
        return sorted(v)


class Figure3(_Scoped):
    stages: list[str] = Field(default_factory=lambda: ["sourcelearn-m0", "sourcelearn-wo-self", "sourcelearn-ms",
                                                       "sourcelearn"])
    pathways: list[str] = Field(default_factory=lambda: ["sourcelearn-ms", "sourcelearn-wo-failure",
                                                         "sourcelearn-wo-cross", "sourcelearn"])


class Figure4(_Scoped):
    sources: list[str] | None = None
    stages: list[str] = Field(default_factory=lambda: ["M0", "MS", "MT"])
    coverage_max_tasks: int | None = Field(20, gt=0)  # test tasks per source and split in the coverage audit
    seed: int = 0


class Figure5(_Scoped):
    methods: list[str] = Field(default_factory=lambda: ["hybrid_rag", "sourcelearn"])
    k: list[int] = Field(default_factory=lambda: [8, 4, 2, 1, 0])
    gold_removal: list[str] = Field(default_factory=lambda: ["multidoc2dial"])  # benchmark ids with gold labels

    @field_validator("k")
    @classmethod
    def _k(cls, v: list[int]) -> list[int]:
        if not v or any(x < 0 for x in v) or len(set(v)) != len(v):
            raise ValueError("k: distinct non-negative integers, e.g. [8, 4, 2, 1, 0]")
        return sorted(v, reverse=True)


class Tables(_Strict):
    table1: Table1 | None = None
    table2: Table2 | None = None
    table3: AuditTable | None = None
    table4: AuditTable | None = None
    table5: Table5 | None = None
    table6: Table6 | None = None
    figure3: Figure3 | None = None
    figure4: Figure4 | None = None
    figure5: Figure5 | None = None

    def enabled(self) -> list[str]:
        return [t for t in TABLE_IDS if getattr(self, t) is not None]


class ExperimentConfig(_Strict):
    """The whole experiment; see configs/*.yaml for annotated examples."""

    name: str
    description: str = ""
    output: str = Field(description="output root: one run folder per backend and benchmark below it")
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    limit: int | None = Field(None, gt=0)
    guidance_limit: int | None = Field(None, gt=0)
    embedder: str = "auto"
    data_dir: str | None = None
    cache_dir: str | None = Field(None, description="model-call cache shared by every run folder (default: each "
                                  "folder's own cache/); relative to the working directory")
    baseline: str = "hybrid_rag"
    statistics: Statistics = Field(default_factory=Statistics)
    backends: list[Backend]
    benchmarks: list[BenchmarkEntry]
    methods: dict[str, MethodEntry] = Field(default_factory=dict)
    tables: Tables

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v) or any(x < 0 for x in v):
            raise ValueError("seeds: a non-empty list of distinct non-negative integers")
        return v

    @model_validator(mode="after")
    def _references(self) -> ExperimentConfig:
        if not self.backends:
            raise ValueError("backends: give at least one backend")
        if not self.benchmarks:
            raise ValueError("benchmarks: give at least one benchmark")
        for what, ids in (("backend", [b.id for b in self.backends]), ("benchmark", [b.id for b in self.benchmarks])):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            if dup:
                raise ValueError(f"{what} ids must be unique: {', '.join(dup)}")
        if not self.tables.enabled():
            raise ValueError(f"tables: enable at least one of {', '.join(TABLE_IDS)}")
        backends, benches = {b.id for b in self.backends}, {b.id for b in self.benchmarks}
        for tid in self.tables.enabled():
            t = getattr(self.tables, tid)
            for ref, known, what in ((t.backends, backends, "backend"), (t.benchmarks, benches, "benchmark")):
                unknown = sorted(set(ref or []) - known)
                if unknown:
                    raise ValueError(f"tables.{tid}: unknown {what}(s) {', '.join(unknown)}; "
                                     f"known: {', '.join(sorted(known))}")
        return self

    # -- lookups -------------------------------------------------------------------------------------
    def backend(self, backend_id: str) -> Backend:
        return next(b for b in self.backends if b.id == backend_id)

    def benchmark(self, bench_id: str) -> BenchmarkEntry:
        return next(b for b in self.benchmarks if b.id == bench_id)

    def label(self, method: str) -> str:
        entry = self.methods.get(method)
        return (entry.label if entry and entry.label else None) or DEFAULT_LABELS.get(method, method)

    def base_config(self, method: str) -> dict[str, Any]:
        entry = self.methods.get(method)
        return dict(entry.config) if entry else {}

    def scope(self, table_id: str) -> tuple[list[Backend], list[BenchmarkEntry]]:
        """The backends and benchmarks a table covers, in config order."""
        t = getattr(self.tables, table_id)
        bks = [b for b in self.backends if t.backends is None or b.id in t.backends]
        bns = [b for b in self.benchmarks if t.benchmarks is None or b.id in t.benchmarks]
        return bks, bns


def _summarise(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (and {len(e.errors()) - 3} more)" if len(e.errors()) > 3 else ""
    return "; ".join(parts) + more


def parse_config(data: Any, where: str = "config") -> ExperimentConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{where}: {_summarise(e)}") from None


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML (.yaml/.yml) or TOML (.toml) experiment config."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not valid UTF-8 text (byte {e.start})") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'} ({first})") from None
    return parse_config(data, str(path))
