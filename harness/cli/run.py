"""``sourcebench run``: learn and test methods on a benchmark, then write the leaderboard."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.plan import Variant
from sourcebench.reports.protocols import NEEDS_MODEL, compute, parse_protocols
from sourcebench.reports.protocols.cli import add_settings as add_protocol_settings
from sourcebench.reports.protocols.cli import protocol_list, settings_of

from ..config import BackendConfig, BudgetConfig, DataConfig, ExecutionConfig, RunConfig
from ..errors import ConfigError
from ..health import EXIT_DEGRADED
from ..llm import parse_model_spec
from ..options import (
    REASONING_EFFORTS,
    add_cost_arguments,
    add_degradation_arguments,
    add_reasoning_arguments,
    guidance_limit,
    key_values,
    method_configs,
    non_empty_csv,
    non_negative_float,
    non_negative_int,
    positive_int,
    resolve_guidance_limit,
    seed_list,
)
from ..registry import method_list
from ..runner import Runner
from .common import EPILOG, console


def _methods(text: str) -> list[str]:
    non_empty_csv(text)  # one clear line for an empty list
    try:
        return method_list(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_parser(sub: Any) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="learn and test methods on a benchmark, then write the leaderboard",
                       description="Learn each (method, source, split) once, freeze the artifact, run the test "
                       "phase as inspect-ai tasks, score, and write results.jsonl and a leaderboard. Re-running "
                       "the same command resumes an interrupted run; a finished run makes no model calls.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    r.add_argument("--benchmark", required=True, help="benchmark name (see `sourcebench list`)")
    r.add_argument("--methods", required=True, type=_methods, help="comma-separated method names; "
                   "METHOD@KEY=VALUE[,KEY=VALUE] runs a method under other settings as its own row, named by them "
                   "(e.g. hybrid_rag,hybrid_rag@top_k=4)")
    r.add_argument("--model", required=True, help="solver model (inspect-ai name), e.g. local/smollm2")
    r.add_argument("--judge-model", help="judge model for LLM-judged benchmarks (default: the solver model)")
    r.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="split seeds (default 0,1,2)")
    r.add_argument("--limit", type=positive_int, help="test tasks per source and seed (seeded subset, same for all methods)")
    r.add_argument("--guidance-limit", type=guidance_limit,
                   help="guidance tasks per source and seed (seeded subset), or 'all'. Default: all, except that "
                   "with --limit N it is ceil(3N/7), the split's own 30:70 ratio, so that a quick run is quick "
                   "for methods that learn from guidance too")
    r.add_argument("--sources", type=non_empty_csv, help="comma-separated source ids (default: all)")
    r.add_argument("--out", type=Path, help="output folder (default runs/<benchmark>-<model>)")
    r.add_argument("--data-dir", type=Path, help="folder holding benchmark data (default: $SOURCEBENCH_DATA_DIR, "
                   "./data, ../shared/data)")
    r.add_argument("--cache-dir", type=Path, help="model-call and embedding cache folder (default OUT/cache); "
                   "runs that share one never pay twice for the same call (same model, settings, messages)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="benchmark option (repeatable), e.g. "
                   "max_difficulty=2 for phantomwiki, flask=DIR for swe_qa")
    r.add_argument("--method-config", action="append", metavar="METHOD.KEY=VALUE", help="method setting (repeatable)")
    r.add_argument("--embedder", default="auto", help="auto (local MiniLM if installed, else hash), local, hash, "
                   "openai/<model>")
    r.add_argument("--max-tokens", type=positive_int, default=512, help="max output tokens per call (default 512)")
    r.add_argument("--temperature", type=non_negative_float, default=0.0, help="sampling temperature (default 0)")
    r.add_argument("--context-window", type=positive_int, help="solver context window in tokens; longer prompts are "
                   "scored failures (default: known for local models)")
    r.add_argument("--reasoning-effort", choices=REASONING_EFFORTS,
                   help="the solver's reasoning effort, for models that take one (default: the provider's)")
    r.add_argument("--judge-reasoning-effort", choices=REASONING_EFFORTS,
                   help="the judge's reasoning effort (default: the provider's)")
    add_reasoning_arguments(r)
    add_degradation_arguments(r)
    add_cost_arguments(r)
    r.add_argument("--max-samples", type=positive_int, help="concurrent test tasks (default: twice --max-connections "
                   "when that is given, else inspect's)")
    r.add_argument("--max-connections", type=positive_int, help="the run's connection budget: model calls in flight "
                   "at once across every cell, stage and phase, learning included (default: 32 for a served model, "
                   "the hosted APIs' first paid tiers serve more; a local/ model's pool of contexts)")
    r.add_argument("--max-retries", type=non_negative_int, default=5, help="retries of a failed model call (HTTP 429/5xx, "
                   "timeout, dropped connection, unparsable reply) with exponential backoff, after which the task "
                   "is a scored failure with the reason (default 5)")
    r.add_argument("--attempt-timeout", type=positive_int, help="seconds before one attempt of a model call is "
                   "abandoned and retried (default: the provider's)")
    r.add_argument("--timeout", type=positive_int, help="seconds a model call may take, retries included (default: none)")
    r.add_argument("--executor", default="local", choices=["local", "ray"], help="run the (method, source, seed) "
                   "cells here (local, default) or as Ray tasks (ray; the output folder must be shared by all nodes)")
    r.add_argument("--test-processes", type=positive_int, default=1, help="split every cell's test tasks over N "
                   "processes (local executor; --max-connections and --max-samples are shared among them). "
                   "For fast remote endpoints at high concurrency, where one process is CPU-bound; not for "
                   "local/ models, which would be loaded once per process (default 1)")
    r.add_argument("--learn-concurrency", type=positive_int, help="cells (method x source x seed) learned at the "
                   "same time. Default: every pending cell for a served model (--max-connections bounds their calls "
                   "in flight, so chains of calls in one cell leave the connections to the others); one for a "
                   "local/ model (on a 2-core machine, 2 overlaps cells: one llama.cpp context per core)")
    r.add_argument("--ray-address", help="Ray cluster to use with --executor ray, e.g. auto or ray://head:10001 "
                   "(default: start a local instance)")
    r.add_argument("--display", default=None, choices=["full", "conversation", "rich", "plain", "log", "none"],
                   help="inspect-ai display during the test phase (default: plain on a terminal, none otherwise)")
    r.add_argument("--rerun", action="append", type=_methods, metavar="METHOD", help="learn and test these methods "
                   "again although their artifacts and rows exist (repeatable or comma-separated); edited code is "
                   "re-learned without it")
    r.add_argument("--no-report", action="store_true", help="do not write the leaderboard at the end")
    r.add_argument("--protocols", type=protocol_list, help="after the test phase, run these evaluation protocols and "
                   "add them to the leaderboard: key-overlap, break-even, prequential, harmful, all or none "
                   "(see `sourcebench protocol -h`). Default: key-overlap and break-even (no model calls) when a "
                   "method learns from guidance")
    add_protocol_settings(r)

    return r


def check_arguments(a: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Checks across options, before anything is loaded; returns the parsed method configs."""
    configs = method_configs(a.method_config)
    running = set(a.methods) | {Variant.parse(m).method for m in a.methods}  # a variant's base method too
    for name, values in configs.items():
        if name not in running:
            key = next(iter(values))
            raise ConfigError(f"--method-config {name}.{key}: method '{name}' is not in --methods "
                              f"({', '.join(a.methods)})")
    return configs


def run(a: argparse.Namespace) -> int:
    for name in (a.model, a.judge_model):  # before any folder is made
        if name is not None:
            parse_model_spec(name)
    configs = check_arguments(a)
    for v in map(Variant.parse, a.methods):  # a variant starts from its method's --method-config settings
        if not v.is_native and v.method in configs:
            configs[v.alias] = {**configs[v.method], **configs.get(v.alias, {})}
    out = a.out or Path("runs") / f"{a.benchmark}-{a.model.replace('/', '_')}"
    display = a.display or ("plain" if sys.stdout.isatty() else "none")
    cfg = RunConfig(
        out=out, rerun=_rerun(a),
        data=DataConfig(benchmark=a.benchmark, methods=a.methods, method_configs=configs,
                        options=key_values(a.opt, "--opt"), data_dir=a.data_dir, sources=a.sources, seeds=a.seeds,
                        limit=a.limit, guidance_limit=resolve_guidance_limit(a.limit, a.guidance_limit)),
        backend=BackendConfig(model=a.model, judge_model=a.judge_model, embedder=a.embedder, max_tokens=a.max_tokens,
                              temperature=a.temperature, context_window=a.context_window,
                              reasoning_effort=a.reasoning_effort, judge_reasoning_effort=a.judge_reasoning_effort,
                              reasoning_tokens=a.reasoning_tokens, judge_reasoning_tokens=a.judge_reasoning_tokens,
                              max_retries=a.max_retries, timeout=a.timeout, attempt_timeout=a.attempt_timeout,
                              cache_dir=a.cache_dir),
        execution=ExecutionConfig(executor=a.executor, ray_address=a.ray_address, test_processes=a.test_processes,
                                  learn_concurrency=a.learn_concurrency, max_connections=a.max_connections,
                                  max_samples=a.max_samples, display=display),
        budget=BudgetConfig(max_cost=a.max_cost, price_input=a.price_input, price_output=a.price_output,
                            max_failure_share=a.max_failure_share))
    con = console()
    summary = Runner(cfg, console=con).run()
    con.print(f"done in {summary['seconds']} s: {summary['rows_new']} new result row(s), "
                  f"{summary['live_calls']} live model call(s); results in {summary['out']}/results.jsonl")
    if a.protocols is not None:  # the report is written after them, with them
        summary["report"] = _run_protocols(a, out, con)
    else:
        summary["report"] = {} if a.no_report else write_report(out, data_dir=a.data_dir)
    if summary["report"]:
        con.print(f"leaderboard: {summary['report'].get('html')} (also {summary['report'].get('md')})")
    if summary.get("unavailable"):
        srcs = ", ".join(u["source"] for u in summary["unavailable"])
        con.print(f"not evaluated (unavailable, reason above): {a.benchmark}/{srcs}")
        if not summary["rows_new"] and not summary["rows_done_before"]:
            return 3  # nothing could be scored: say so to scripts too
    if summary.get("degraded"):
        con.print(f"[red]{len(summary['degraded'])} degraded cell(s), listed above and marked in the report"
                      + ("" if a.allow_degraded else f"; exit code {EXIT_DEGRADED} (--allow-degraded: 0)") + "[/]")
        if not a.allow_degraded:
            return EXIT_DEGRADED
    return 0


def _rerun(a: argparse.Namespace) -> list[str]:
    names = [n for group in a.rerun or [] for n in group]
    if unknown := [n for n in names if n not in a.methods]:
        raise ConfigError(f"--rerun {','.join(unknown)}: not among --methods ({','.join(a.methods)})")
    return names


def _run_protocols(a: argparse.Namespace, out: Path, console: Any) -> dict[str, Any]:
    """Run the protocols that need model calls on the finished run, then write the report with all of them."""
    names = parse_protocols(a.protocols)
    for name in (n for n in names if n in NEEDS_MODEL):
        compute(name, out, methods=a.methods, data_dir=a.data_dir, settings=settings_of(a), progress=console.print)
    return {} if a.no_report else write_report(out, protocols=names, data_dir=a.data_dir)
