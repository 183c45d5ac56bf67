"""``sourcebench audit``: run the SourceLearn analyses on a finished run folder.

Each analysis prints a table and writes ``<run>/audit/<analysis>.json`` and ``.csv`` (LLM audits
also ``<analysis>_items.jsonl`` with every judged item). Judge calls go through the run's call
cache, so re-running an audit is free, and are appended to ``usage.jsonl`` under method ``audit``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sourcebench.harness.data import Source, Task
from sourcebench.harness.errors import ConfigError, DataError
from sourcebench.harness.io import append_jsonl, atomic_write_json, atomic_write_text
from sourcebench.harness.llm import LLM, BoundLLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Command, NotApplicable

from . import audit as A

ANALYSES = ("kinds", "conditions", "coverage", "grounding", "preservation")
HELP = {
    "kinds": "unit kinds (overview, facts, rules, relations, procedures) per stage (Figure 4a)",
    "conditions": "share of units with explicit conditions per stage (Figure 4b)",
    "coverage": "coverage of the claims test tasks require, and its link to accuracy (Figure 4c, 4d)",
    "grounding": "judge a seeded sample of units against their cited evidence (Table 3)",
    "preservation": "judge units dropped by a stage against the later model (Table 4)",
    "all": "every analysis above",
}
EPILOG = """examples:
  sourcebench audit kinds runs/phantomwiki
  sourcebench audit grounding runs/phantomwiki --sample 120 --seed 0 --judge-model openai/gpt-4o
  sourcebench audit all runs/phantomwiki --stages all --data-dir ../shared/data

stages: M0, MS, MT (default) and the ablation models MT_wo_self, M_local, MS+Pi1 (`--stages all`: every
stage found). Coverage reads the reference answers of test tasks to list the claims each needs; that is an
audit after the fact, never an input to a method."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``audit`` with one subcommand per analysis to the ``sourcebench`` subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("run_dir", type=Path, help="run folder (sourcebench run --out DIR)")
    common.add_argument("--stages", default=",".join(A.MAIN_STAGES),
                        help="comma-separated stages, or 'all' (default M0,MS,MT)")
    common.add_argument("--sources", help="comma-separated source ids (default: every source with a model)")
    judged = argparse.ArgumentParser(add_help=False)
    judged.add_argument("--judge-model", help="judge model (default: the run's judge model, else its solver model)")
    judged.add_argument("--data-dir", type=Path, help="benchmark data folder (default: the run's --data-dir, "
                        "else the usual search path)")
    judged.add_argument("--sample", type=int, default=50, help="units judged per stage or step (default 50; "
                        "0 = all)")
    judged.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    judged.add_argument("--max-tasks", type=int, help="coverage: test tasks per source and split (seeded subset)")
    judged.add_argument("--budget-tokens", type=int, help="most source-model tokens shown to the judge "
                        "(default 24000, less for a small context window)")
    from sourcebench.harness.options import reasoning_tokens

    judged.add_argument("--reasoning-tokens", type=reasoning_tokens, metavar="N", help="the judge's reasoning "
                        "allowance on a reasoning backend (default: the run's, else by effort; 'unlimited': no cap)")
    judged.add_argument("--concurrency", type=int, default=4, help="concurrent judge calls (default 4)")

    p = subparsers.add_parser("audit", help="analyse saved SourceLearn source models (Figure 4, Tables 3-4)",
                              description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="audit_cmd", metavar="ANALYSIS", required=True)
    for name in ANALYSES + ("all",):
        parents = [common] if name in ("kinds", "conditions") else [common, judged]
        sub.add_parser(name, parents=parents, help=HELP[name], description=HELP[name], epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    return p


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


def run_analysis(run_dir: Path, analysis: str, options: dict[str, Any]) -> None:
    """One analysis with the settings of a reproduce config (``sourcebench reproduce``): ``stages`` and
    optionally ``sources``, ``seed``, ``sample``, ``max_tasks``, ``judge_model``, ``data_dir``.
    Raises ``NotApplicable`` when the folder has no model of those stages or sources."""
    rm = A.load_run(run_dir)
    have = rm.source_ids()
    stages = [s for s in options["stages"] if s in {m.stage for m in rm.models}]
    if not have or not stages:
        raise NotApplicable("no SourceLearn model of the requested stages in this folder "
                            f"(needs {', '.join(A.METHOD_OF_STAGE.get(s, s) for s in options['stages'])})")
    sources = [s for s in have if not options.get("sources") or s in options["sources"]]
    if not sources:
        raise NotApplicable(f"none of the sources {', '.join(options['sources'])} has a SourceLearn model here")
    run(argparse.Namespace(
        audit_cmd=analysis, run_dir=run_dir, stages=",".join(options["stages"]), sources=",".join(sources),
        judge_model=options.get("judge_model"), data_dir=options.get("data_dir"), sample=options.get("sample", 50),
        seed=options.get("seed", 0), max_tasks=options.get("max_tasks"), budget_tokens=None, concurrency=4))


async def _run(args: argparse.Namespace) -> int:
    rm = A.load_run(args.run_dir)
    if not rm.models:
        raise DataError(f"{args.run_dir}: no SourceLearn source models under artifacts/ (run a sourcelearn "
                        "variant first)")
    stages = _stages(args.stages, rm)
    sources = _csv(args.sources) if args.sources else rm.source_ids()
    unknown = set(sources) - set(rm.source_ids())
    if unknown:
        raise ConfigError(f"--sources: no source model for {', '.join(sorted(unknown))}; have "
                          f"{', '.join(rm.source_ids())}")
    env = _Env(rm, args)
    for name in ANALYSES if args.audit_cmd == "all" else (args.audit_cmd,):
        await RUNNERS[name](rm, stages, sources, env)
    env.console.print(f"audit results in {rm.run_dir / 'audit'}")
    return 0


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _stages(spec: str, rm: A.RunModels) -> list[str]:
    found = A.order_stages(m.stage for m in rm.models)
    if spec.strip() == "all":
        return found
    want = _csv(spec)
    bad = [s for s in want if s not in A.STAGE_ORDER]
    if bad:
        raise ConfigError(f"--stages: unknown stage(s) {', '.join(bad)}; known: {', '.join(A.STAGE_ORDER)}")
    return A.order_stages(want)


class _Env:
    """Lazily opened judge model and benchmark (pure analyses need neither)."""

    def __init__(self, rm: A.RunModels, args: argparse.Namespace):
        from rich.console import Console

        self.rm = rm
        self.args = args
        # piped output gets room for source ids instead of rich's 80-column default
        self.console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
        self.out = rm.run_dir / "audit"
        self._llm: BoundLLM | None = None
        self._bench: Any = None
        self._sources: dict[str, Source] = {}

    # -- judge model --------------------------------------------------------------------------------
    def judge_spec(self) -> ModelSpec:
        allowance = getattr(self.args, "reasoning_tokens", None)
        if getattr(self.args, "judge_model", None):
            return ModelSpec(name=self.args.judge_model, role="judge", temperature=0.0, max_tokens=512,
                             reasoning_tokens=allowance)
        settings = self.rm.run.get("judge_model") or self.rm.run.get("model")
        if not isinstance(settings, dict) or not settings.get("name"):
            raise ConfigError(f"{self.rm.run_dir / 'run.json'}: names no model; pass --judge-model")
        fields = ("name", "base_url", "max_tokens", "seed", "context_window", "reasoning_effort", "reasoning_tokens",
                  "reasons")
        kw = {k: settings[k] for k in fields if settings.get(k) is not None}
        if allowance is not None:
            kw["reasoning_tokens"] = allowance
        return ModelSpec(role="judge", temperature=0.0, **kw)

    @property
    def llm(self) -> BoundLLM:
        if self._llm is None:
            cache = CallCache(self.rm.run_dir / "cache" / "llm_calls.sqlite")
            self._llm = LLM(self.judge_spec(), cache, UsageLedger()).bind("audit", "judge")
        return self._llm

    def budget(self) -> int:
        if getattr(self.args, "budget_tokens", None):
            return int(self.args.budget_tokens)
        window = self.llm.spec.effective_context_window()
        return min(A.CONTEXT_TOKENS, max(1000, window - 2000)) if window else A.CONTEXT_TOKENS

    def flush_usage(self, source_id: str) -> None:
        rows, fails = self.llm.llm.ledger.drain()
        base = {"benchmark": self.rm.benchmark, "source": source_id, "seed": None}
        append_jsonl(self.rm.run_dir / "usage.jsonl", [{**base, **r} for r in rows])
        append_jsonl(self.rm.run_dir / "failures.jsonl", [{**base, **f} for f in fails])

    # -- benchmark data -------------------------------------------------------------------------------
    def data_dir(self) -> Path | None:
        if getattr(self.args, "data_dir", None):
            return self.args.data_dir
        argv = shlex.split(str(self.rm.run.get("command") or ""))
        for i, a in enumerate(argv):
            if a == "--data-dir" and i + 1 < len(argv):
                return Path(argv[i + 1])
            if a.startswith("--data-dir="):
                return Path(a.split("=", 1)[1])
        return None

    def bench(self) -> Any:
        if self._bench is None:
            from sourcebench.harness.registry import get_benchmark_class

            meta = self.rm.run.get("benchmark") or {}
            options = meta.get("options") if isinstance(meta, dict) else None
            self._bench = get_benchmark_class(self.rm.benchmark)(data_dir=self.data_dir(), options=options or {})
        return self._bench

    def source(self, source_id: str) -> Source:
        if source_id not in self._sources:
            src = self.bench().load_source(source_id)
            stale = {m.model.source_fingerprint for m in self.rm.models if m.source_id == source_id} - {src.fingerprint}
            if stale:
                self.console.print(f"[yellow]{source_id}: the source changed since some models were learned; "
                                   "their stale units are judged against the current text[/]")
            self._sources[source_id] = src
        return self._sources[source_id]

    def tasks(self, source_id: str) -> dict[str, Task]:
        return {t.id: t for t in self.bench().load_tasks(source_id)}

    # -- output ------------------------------------------------------------------------------------------
    def write(self, name: str, rows: list[dict[str, Any]], extra: dict[str, Any] | None = None,
              items: Sequence[Any] | None = None) -> None:
        atomic_write_json(self.out / f"{name}.json", {"analysis": name, "run": str(self.rm.run_dir),
                                                      **(extra or {}), "rows": rows})
        atomic_write_text(self.out / f"{name}.csv", to_csv(rows))
        if items is not None:
            atomic_write_text(self.out / f"{name}_items.jsonl",
                              "".join(json.dumps(it.model_dump(), ensure_ascii=False) + "\n" for it in items))

    def table(self, title: str, rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
        from rich.table import Table

        if not rows:
            self.console.print(f"{title}: nothing to show")
            return
        t = Table(title=title)
        for _, head in columns:
            t.add_column(head, overflow="fold")
        for r in rows:
            t.add_row(*(_fmt(r.get(key), key) for key, _ in columns))
        self.console.print(t)


def to_csv(rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
    return buf.getvalue()


def _fmt(v: Any, key: str) -> str:
    """Fractions as percentages, correlations with three decimals, averaged counts with one."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if "share" in key or key.endswith(("accuracy", "task_mean")):
            return f"{100 * v:.1f}%"
        return f"{v:.3f}" if key.endswith("_r") else f"{v:.1f}"
    return str(v)


# ------------------------------------------------------------------------------------------ analyses

async def run_kinds(rm: A.RunModels, stages: list[str], sources: list[str], env: _Env) -> None:
    rows = A.per_source_rows(rm, A.unit_kind_table, stages, sources)
    env.write("kinds", rows, {"stages": stages, "kinds": list(A.KINDS)})
    env.table("Unit kinds per stage (Figure 4a; MT averaged over splits)", rows,
              [("source", "source"), ("stage", "stage"), ("n_units", "units")]
              + [(f"shares:{k}", k.split()[0]) for k in A.KINDS])


async def run_conditions(rm: A.RunModels, stages: list[str], sources: list[str], env: _Env) -> None:
    rows = A.per_source_rows(rm, A.condition_share, stages, sources)
    env.write("conditions", rows, {"stages": stages})
    env.table("Units with explicit conditions (Figure 4b)", rows,
              [("source", "source"), ("stage", "stage"), ("n_units", "units"), ("with_conditions", "with conditions"),
               ("share", "share"), ("share_non_card", "share (no cards)")])


async def run_coverage(rm: A.RunModels, stages: list[str], sources: list[str], env: _Env) -> None:
    records: list[A.CoverageRecord] = []
    for sid in sources:
        try:
            records += await A.coverage_audit(env.llm, rm, env.source(sid), env.tasks(sid), stages,
                                              concurrency=env.args.concurrency, max_tasks=env.args.max_tasks,
                                              seed=env.args.seed, budget_tokens=env.budget())
        finally:
            env.flush_usage(sid)
    rows = list(A.coverage_table(records).values())
    assoc = A.coverage_accuracy(records)
    assoc_rows = [{"stage": s, "n": v["n"], "point_biserial_r": v["point_biserial_r"],
                   **{f"{b}:n": v["bins"][b]["n"] for b in A.COVERAGE_BINS},
                   **{f"{b}:accuracy": v["bins"][b]["accuracy"] for b in A.COVERAGE_BINS}} for s, v in assoc.items()]
    env.write("coverage", rows, {"stages": stages, "judge_model": env.llm.spec.name, "accuracy_by_coverage": assoc},
              items=records)
    atomic_write_text(env.out / "coverage_accuracy.csv", to_csv(assoc_rows))
    env.table("Coverage of the claims test tasks require (Figure 4c)", rows,
              [("source", "source"), ("stage", "stage"), ("n_tasks", "tasks"), ("n_claims", "claims"),
               ("claim_share", "claims represented"), ("task_mean", "mean per task"), ("failed", "failed")])
    env.table("Accuracy by coverage of required claims (Figure 4d)", assoc_rows,
              [("stage", "stage"), ("n", "tasks")]
              + [(f"{b}:accuracy", f"acc ({b})") for b in A.COVERAGE_BINS]
              + [(f"{b}:n", f"n ({b})") for b in A.COVERAGE_BINS] + [("point_biserial_r", "point-biserial r")])


async def run_grounding(rm: A.RunModels, stages: list[str], sources: list[str], env: _Env) -> None:
    items: list[A.JudgedItem] = []
    for sid in sources:
        by_stage = rm.stages(sid)
        try:
            chosen = {s: by_stage[s] for s in stages if s in by_stage}
            items += await A.grounding_audit(env.llm, env.source(sid), chosen, sample=env.args.sample,
                                             seed=env.args.seed, concurrency=env.args.concurrency)
        finally:
            env.flush_usage(sid)
    rows = list(A.label_table(items, A.GROUND_LABELS).values())
    env.write("grounding", rows, {"stages": stages, "sample": env.args.sample, "seed": env.args.seed,
                                  "judge_model": env.llm.spec.name}, items=items)
    env.table(f"Grounding audit (Table 3; up to {env.args.sample} units per stage, seed {env.args.seed})", rows,
              [("source", "source"), ("stage", "stage"), ("n", "units")]
              + [(f"{lab}_pct", f"{lab} %") for lab in A.GROUND_LABELS] + [(A.FAILED, "failed")])


async def run_preservation(rm: A.RunModels, stages: list[str], sources: list[str], env: _Env) -> None:
    items: list[A.JudgedItem] = []
    for sid in sources:
        by_stage = rm.stages(sid)
        # a selected stage is compared with its parent even when the parent itself was not selected
        wanted = set(stages) | {A.PARENT[s] for s in stages if s in A.PARENT}
        try:
            items += await A.preservation_audit(env.llm, sid, {s: by_stage[s] for s in A.order_stages(wanted)
                                                               if s in by_stage},
                                                sample=env.args.sample, seed=env.args.seed,
                                                concurrency=env.args.concurrency, budget_tokens=env.budget())
        finally:
            env.flush_usage(sid)
    items = [it for it in items if it.stage.split("->")[1] in stages]
    rows = list(A.label_table(items, A.PRESERVE_LABELS).values())
    env.write("preservation", rows, {"stages": stages, "sample": env.args.sample, "seed": env.args.seed,
                                     "judge_model": env.llm.spec.name}, items=items)
    env.table(f"Preservation of dropped units (Table 4; up to {env.args.sample} per step, seed {env.args.seed})",
              rows, [("source", "source"), ("stage", "dropped by"), ("n", "units")]
              + [(f"{lab}_pct", f"{lab} %") for lab in A.PRESERVE_LABELS] + [(A.FAILED, "failed")])


RUNNERS = {"kinds": run_kinds, "conditions": run_conditions, "coverage": run_coverage,
           "grounding": run_grounding, "preservation": run_preservation}

# ``sourcebench audit``, registered through the method registry (``SourceLearnBase.cli_commands``)
COMMAND = Command("audit", add_parser, run, run_analysis=run_analysis,
                  columns={"kinds": A.KINDS, "grounding": A.GROUND_LABELS, "preservation": A.PRESERVE_LABELS,
                           "coverage_bins": A.COVERAGE_BINS})
