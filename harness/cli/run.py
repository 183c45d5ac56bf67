"""``sourcebench run``: learn and test methods on a benchmark, then write the leaderboard."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sourcebench.reports.leaderboard import write_report
from sourcebench.reports.plan import Variant
from sourcebench.reports.protocols import NEEDS_MODEL, parse_protocols

from ..config import BackendConfig, BudgetConfig, DataConfig, ExecutionConfig, RunConfig
from ..errors import ConfigError
from ..health import EXIT_DEGRADED
from ..llm import parse_model_spec
from ..options import add_run_arguments, key_values, method_configs, resolve_guidance_limit
from ..runner import Runner
from .common import EPILOG, console
from .protocol import add_settings as add_protocol_settings
from .protocol import compute, protocol_list, settings_of


def add_parser(sub: Any) -> argparse.ArgumentParser:
    r = sub.add_parser("run", help="learn and test methods on a benchmark, then write the leaderboard",
                       description="Learn each (method, source, split) once, freeze the artifact, run the test "
                       "phase as inspect-ai tasks, score, and write results.jsonl and a leaderboard. Re-running "
                       "the same command resumes an interrupted run; a finished run makes no model calls.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    add_run_arguments(r)
    add_protocol_arguments(r)
    return r


def add_protocol_arguments(p: argparse.ArgumentParser) -> None:
    """``--protocols`` and their settings (run; estimate takes them too, to take run's command line)."""
    p.add_argument("--protocols", type=protocol_list, help="after the test phase, run these evaluation protocols and "
                   "add them to the leaderboard: key-overlap, break-even, prequential, harmful, all or none "
                   "(see `sourcebench protocol -h`). Default: key-overlap and break-even (no model calls) when a "
                   "method learns from guidance")
    add_protocol_settings(p)


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
                              temperature=a.temperature, epochs=a.epochs, context_window=a.context_window,
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
        con.print(f"[red]{degraded_message(len(summary['degraded']), a.max_failure_share, a.limit, a.allow_degraded)}[/]")
        if not a.allow_degraded:
            return EXIT_DEGRADED
    return 0


def degraded_message(cells: int, max_share: float, limit: int | None, allowed: bool) -> str:
    """The closing line of a run with degraded cells. The threshold is a share, so in a small run one
    failure can be the reason: the line says of how many tasks."""
    per = f"; with --limit {limit}, one failed answer of {limit} is {100 / limit:.0f} %" if limit else ""
    return (f"{cells} degraded cell(s), listed above and marked in the report: a cell is degraded when more than "
            f"{100 * max_share:.0f} % of its answers or of a stage's model requests failed (--max-failure-share "
            f"{max_share:g}, a share of the cell's tasks{per})"
            + ("" if allowed else f"; exit code {EXIT_DEGRADED} (--allow-degraded: 0)"))


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
