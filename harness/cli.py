"""``sourcebench``: run comparisons, write leaderboards, list methods and benchmarks, judge files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError, SourceBenchError

EPILOG = """examples:
  sourcebench run --benchmark phantomwiki --methods hybrid_rag,no_source --model local/smollm2 --limit 20
  sourcebench run --benchmark swe_qa --sources flask --opt flask=./flask-3.1.1 --methods hybrid_rag \\
      --model openai/gpt-4o-mini --judge-model openai/gpt-4o
  sourcebench report runs/phantomwiki
  sourcebench judge apibench --hub torchhub --responses responses.jsonl

models are inspect-ai model names: local/smollm2 (embedded, offline), openai/<model> (OPENAI_API_KEY),
openai-api/<service>/<model> for any OpenAI-compatible server (<SERVICE>_BASE_URL, <SERVICE>_API_KEY),
vllm/<model>, scripted/extractive (deterministic test model)."""


def _csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _seeds(s: str) -> list[int]:
    try:
        return [int(x) for x in _csv(s)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {s!r}: expected comma-separated integers, e.g. 0,1,2") from None


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def _kv(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"{flag} {it!r}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _method_configs(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """--method-config hybrid_rag.top_k=10  (values parsed as JSON when possible)."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in _kv(items, "--method-config").items():
        if "." not in k:
            raise ConfigError(f"--method-config {k}={v}: expected METHOD.KEY=VALUE")
        m, key = k.split(".", 1)
        try:
            val: Any = json.loads(v)
        except json.JSONDecodeError:
            val = v
        out.setdefault(m, {})[key] = val
    return out


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (naming the option), not a usage dump."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="sourcebench",
        description="SourceBench: compare source-learning methods (SourceLearn and baselines) on seeded "
        "guidance/test splits of real benchmarks, with any inspect-ai model.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="learn and test methods on a benchmark, then write the leaderboard",
                       description="Learn each (method, source, split) once, freeze the artifact, run the test "
                       "phase as inspect-ai tasks, score, and write results.jsonl and a leaderboard. Re-running "
                       "the same command resumes an interrupted run; a finished run makes no model calls.",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    r.add_argument("--benchmark", required=True, help="benchmark name (see `sourcebench list`)")
    r.add_argument("--methods", required=True, type=_csv, help="comma-separated method names")
    r.add_argument("--model", required=True, help="solver model (inspect-ai name), e.g. local/smollm2")
    r.add_argument("--judge-model", help="judge model for LLM-judged benchmarks (default: the solver model)")
    r.add_argument("--seeds", type=_seeds, default=[0, 1, 2], help="split seeds (default 0,1,2)")
    r.add_argument("--limit", type=_positive, help="test tasks per source and seed (seeded subset, same for all methods)")
    r.add_argument("--guidance-limit", type=_positive, help="guidance tasks per source and seed (seeded subset)")
    r.add_argument("--sources", type=_csv, help="comma-separated source ids (default: all)")
    r.add_argument("--out", type=Path, help="output folder (default runs/<benchmark>-<model>)")
    r.add_argument("--data-dir", type=Path, help="folder holding benchmark data (default: $SOURCEBENCH_DATA_DIR, "
                   "./data, ../shared/data)")
    r.add_argument("--opt", action="append", metavar="KEY=VALUE", help="benchmark option (repeatable), e.g. "
                   "max_difficulty=2 for phantomwiki, flask=DIR for swe_qa")
    r.add_argument("--method-config", action="append", metavar="METHOD.KEY=VALUE", help="method setting (repeatable)")
    r.add_argument("--embedder", default="auto", help="auto (local MiniLM if installed, else hash), local, hash, "
                   "openai/<model>")
    r.add_argument("--max-tokens", type=_positive, default=512, help="max output tokens per call (default 512)")
    r.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0)")
    r.add_argument("--context-window", type=_positive, help="solver context window in tokens; longer prompts are "
                   "scored failures (default: known for local models)")
    r.add_argument("--max-samples", type=_positive, help="concurrent test tasks (default: inspect's)")
    r.add_argument("--display", default=None, choices=["full", "conversation", "rich", "plain", "log", "none"],
                   help="inspect-ai display during the test phase (default: plain on a terminal, none otherwise)")
    r.add_argument("--no-report", action="store_true", help="do not write the leaderboard at the end")

    rep = sub.add_parser("report", help="write the leaderboard (Markdown, CSV, HTML) of a run folder")
    rep.add_argument("run_dir", type=Path)
    rep.add_argument("--baseline", default="hybrid_rag", help="method the deltas and tests are relative to")
    rep.add_argument("--out", type=Path, help="report folder (default RUN_DIR/report)")
    rep.add_argument("--seed", type=int, default=0, help="bootstrap seed")

    sub.add_parser("list", help="list registered methods and benchmarks")

    d = sub.add_parser("data", help="say, for each benchmark, whether its data is present and how to get it")
    d.add_argument("--data-dir", type=Path)

    from methods.sourcelearn.audit_cli import add_parser as add_audit_parser

    add_audit_parser(sub)

    j = sub.add_parser("judge", help="score a responses file with an official evaluator")
    jsub = j.add_subparsers(dest="judge_cmd", metavar="EVALUATOR", parser_class=_Parser)
    ja = jsub.add_parser("apibench", help="the APIBench AST evaluator (official verdicts)")
    ja.add_argument("--hub", required=True, choices=["torchhub", "huggingface", "tensorflowhub"])
    ja.add_argument("--responses", required=True, type=Path, help="JSON lines of {question_id, text}")
    ja.add_argument("--data-dir", type=Path, help="folder holding the apibench data files")
    return p


def _console():
    from rich.console import Console

    return Console(stderr=False, highlight=False)


def cmd_run(a: argparse.Namespace) -> int:
    from .runner import RunConfig, Runner

    out = a.out or Path("runs") / f"{a.benchmark}-{a.model.replace('/', '_')}"
    display = a.display or ("plain" if sys.stdout.isatty() else "none")
    cfg = RunConfig(benchmark=a.benchmark, methods=a.methods, model=a.model, judge_model=a.judge_model,
                    seeds=a.seeds, limit=a.limit, guidance_limit=a.guidance_limit, sources=a.sources, out=out,
                    data_dir=a.data_dir, options=_kv(a.opt, "--opt"), method_configs=_method_configs(a.method_config),
                    embedder=a.embedder, max_tokens=a.max_tokens, temperature=a.temperature,
                    context_window=a.context_window, max_samples=a.max_samples, display=display,
                    write_report=not a.no_report)
    console = _console()
    summary = Runner(cfg, console=console).run()
    console.print(f"done in {summary['seconds']} s: {summary['rows_new']} new result row(s), "
                  f"{summary['live_calls']} live model call(s); results in {summary['out']}/results.jsonl")
    if summary["report"]:
        console.print(f"leaderboard: {summary['report'].get('html')} (also {summary['report'].get('md')})")
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from reports.leaderboard import write_report

    paths = write_report(a.run_dir, out_dir=a.out, baseline=a.baseline, seed=a.seed)
    md = Path(paths["md"]).read_text(encoding="utf-8")
    print(md)
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    from rich.table import Table

    from .registry import benchmark_names, get_benchmark_class, get_method_class, method_names

    console = _console()
    t = Table(title="methods")
    t.add_column("name")
    t.add_column("version")
    t.add_column("learns from guidance")
    t.add_column("description")
    for n in method_names():
        try:
            c = get_method_class(n)
            t.add_row(n, c.version, "yes" if c.uses_guidance else "no", c.description or (c.__doc__ or "").strip().split("\n")[0])
        except Exception as e:  # a broken third-party plugin must not hide the others
            t.add_row(n, "?", "?", f"[red]cannot load: {e}[/]")
    console.print(t)
    b = Table(title="benchmarks")
    b.add_column("name")
    b.add_column("version")
    b.add_column("scoring")
    b.add_column("options")
    for n in benchmark_names():
        try:
            c = get_benchmark_class(n)
            b.add_row(n, c.version, c.scorer_name, ", ".join(c.known_options) if len(c.known_options) < 5 else "per-source paths")
        except Exception as e:
            b.add_row(n, "?", "?", f"[red]cannot load: {e}[/]")
    console.print(b)
    return 0


def cmd_data(a: argparse.Namespace) -> int:
    from .registry import benchmark_names, get_benchmark_class

    for n in benchmark_names():
        st = get_benchmark_class(n)(data_dir=a.data_dir).data_status()
        mark = "present" if st.present else "MISSING"
        print(f"{n:14s} {mark:8s} {st.location or '-'}")
        print(f"{'':14s} {st.detail}")
        if not st.present and st.how_to_get:
            print(f"{'':14s} how to get it: {st.how_to_get}")
    return 0


def cmd_judge(a: argparse.Namespace) -> int:
    if a.judge_cmd != "apibench":
        raise ConfigError("judge: choose an evaluator, e.g. `sourcebench judge apibench --hub torchhub --responses F`")
    from judges.apibench_ast import evaluate_file

    rows, totals = evaluate_file(a.hub, a.responses, a.data_dir)
    for r in rows:
        print(json.dumps({"question_id": r["question_id"], "correct": r["correct"], "hallucination": r["hallucination"]}))
    print(json.dumps({"totals": totals}))
    return 0


def cmd_audit(a: argparse.Namespace) -> int:
    from methods.sourcelearn.audit_cli import run

    return run(a)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if not a.cmd:
        parser.print_help()
        return 2
    os.environ.setdefault("INSPECT_LOG_LEVEL", "warning")
    try:
        return {"run": cmd_run, "report": cmd_report, "list": cmd_list, "data": cmd_data, "judge": cmd_judge,
                "audit": cmd_audit}[a.cmd](a)
    except SourceBenchError as e:
        print(f"sourcebench: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("sourcebench: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
