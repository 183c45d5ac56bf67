"""``sourcebench reproduce CONFIG``: the command (options, config checks, exit code).

It runs models (the runner, the embedder, the judge), so it belongs to the application tier: the
driver is ``pipeline``, the derived data ``derive``. What it reads and renders (the experiment
config model, the plan of cells, the status file, the tables) is ``reports/``, which never runs a
model. Registered as a ``sourcebench.commands`` entry point, as the reports' ``protocol`` is.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from sourcebench.harness.health import EXIT_DEGRADED
from sourcebench.harness.method import Command
from sourcebench.reports.config import ExperimentConfig, load_config
from sourcebench.reports.plan import STAGE_METHODS, resolve_method
from sourcebench.reports.results import status_path

from .pipeline import Reproduction

DESCRIPTION = """``sourcebench reproduce CONFIG``: run every cell an experiment config needs, then write every table
and figure of the paper from the results.

Per (backend, benchmark) there is one run folder, ``<output>/<backend>/<benchmark>``, driven by the
ordinary runner (``harness.runner``), so an interrupted reproduction resumes and a finished one
makes no model call. In each folder:

1. every method variant the enabled tables need runs (``reports.plan``), variants under an alias;
2. then the budget-matched counterparts of Table 2, which read the reference's per-task prompt sizes
   (they wait until the reference has scored every task the folder's other methods scored);
3. then the derived data: regions (Table 5), cycle statistics (Table 6), the SourceLearn audits
   (Tables 3-4, Figure 4) through the run's judge model (cached, counted under method ``audit``).

A method that is not available (registered but not importable, or without the setting a table
needs) or a benchmark whose adapter or data is missing is "not run", with the reason, and the rest
goes on; an error (unreachable model, bad option) is "failed" and makes the command exit 1 after
the report is written. ``reproduce-<config>.json`` records the status of every cell.

Configs that share an output root share run folders, so they must agree on the settings of each
method name; a folder that already holds a method under other settings is refused ("failed"),
never silently mixed.
"""


# ----------------------------------------------------------------------------------------- CLI

EPILOG = """examples:
  sourcebench reproduce configs/small.yaml                      # PhantomWiki + APIBench TorchHub on SmolLM2
  sourcebench reproduce configs/table1.yaml --out runs/paper    # every cell of Table 1, then the report
  sourcebench reproduce configs/table1.yaml --render-only       # rewrite the tables from finished runs

Cells reuse finished results: re-running a config only runs what is missing."""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("reproduce", help="run an experiment config and write every paper table and figure",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path, help="experiment config (YAML or TOML), e.g. configs/small.yaml")
    p.add_argument("--out", type=Path, help="output root (default: the config's output)")
    p.add_argument("--limit", type=int, help="test tasks per source and seed, overriding the config")
    p.add_argument("--only", help="comma-separated tables/figures whose cells to run (default: every enabled one); "
                   "the report always covers every enabled table")
    p.add_argument("--render-only", action="store_true", help="write the reports from existing results; run nothing")
    from sourcebench.harness.options import add_degradation_arguments, add_reasoning_arguments

    add_reasoning_arguments(p)
    add_degradation_arguments(p)
    p.add_argument("--cache-dir", type=Path, help="model-call cache shared by every run folder, e.g. the cache/ of "
                   "an earlier `sourcebench run` with the same model (default: the config's cache_dir, else each "
                   "folder's own)")
    return p


def check_methods(cfg: ExperimentConfig, where: str | Path) -> None:
    """Every method a config names (baseline, method settings, tables) is registered, and every method
    setting is one its config has: a misspelling would otherwise be a "not run" cell in the report and
    exit 0 (once the baseline itself did not run)."""
    import difflib

    from sourcebench.harness.errors import ConfigError
    from sourcebench.harness.options import check_setting_value
    from sourcebench.harness.registry import method_names

    known = set(method_names())
    named: dict[str, str] = {cfg.baseline: "baseline", **{m: f"methods.{m}" for m in cfg.methods}}
    for tid in cfg.tables.enabled():
        t = getattr(cfg.tables, tid)
        for attr in ("methods", "counterparts", "stages", "pathways"):
            values = getattr(t, attr, None) or []
            if attr == "stages" and tid in ("table3", "table4", "figure4"):
                bad = [x for x in values if x not in STAGE_METHODS]
                if bad:
                    raise ConfigError(f"{where}: tables.{tid}.stages: unknown stage {bad[0]!r}; known: "
                                      f"{', '.join(STAGE_METHODS)}")
                continue
            for m in values:
                named.setdefault(m, f"tables.{tid}.{attr}")
        for attr in ("reference", "method", "m0_method"):
            if isinstance(getattr(t, attr, None), str):
                named.setdefault(getattr(t, attr), f"tables.{tid}.{attr}")
    for m, at in named.items():
        if m not in known:
            near = difflib.get_close_matches(m, sorted(known), n=1)
            raise ConfigError(f"{where}: {at}: unknown method {m!r}" + (f" (did you mean {near[0]!r}?)" if near
                                                                       else f"; known: {', '.join(sorted(known))}"))
    for m, entry in cfg.methods.items():
        cls, _ = resolve_method(m)
        if cls is None:  # registered but not importable here: "not run" with the reason, as before
            continue
        fields = getattr(getattr(cls, "Config", None), "model_fields", None)
        for key, value in entry.config.items():
            if fields is not None and key not in fields:
                raise ConfigError(f"{where}: methods.{m}.config.{key}: unknown setting of {m} (known: "
                                  f"{', '.join(sorted(fields)) or 'none'})")
            check_setting_value(f"{where}: methods.{m}.config.{key}", value)


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    cfg = load_config(args.config)
    check_methods(cfg, args.config)
    only = {x.strip() for x in args.only.split(",") if x.strip()} if args.only else None
    unknown = sorted((only or set()) - set(cfg.tables.enabled()))
    if unknown:
        from sourcebench.harness.errors import ConfigError

        raise ConfigError(f"--only: {', '.join(unknown)} not enabled in {args.config} "
                          f"(enabled: {', '.join(cfg.tables.enabled())})")
    if args.limit is not None and args.limit <= 0:
        from sourcebench.harness.errors import ConfigError

        raise ConfigError(f"--limit {args.limit}: expected a positive integer")
    root = args.out or Path(cfg.output)
    console = Console(highlight=False)
    t0 = time.time()
    rep = Reproduction(cfg, root, console=console, limit=args.limit, only=only, cache_dir=args.cache_dir,
                       reasoning_tokens=args.reasoning_tokens, judge_reasoning_tokens=args.judge_reasoning_tokens,
                       max_failure_share=args.max_failure_share)
    paths = rep.run(render_only=args.render_only)
    console.print(f"report: {paths['index.html']} (tables in {paths['index.html'].parent}); "
                  f"{time.time() - t0:.0f} s")
    if rep.failed:
        console.print(f"[red]some cells failed; see {status_path(root, cfg.name)}[/]")
        return 1
    if rep.degraded:
        console.print(f"[red]{len(rep.degraded)} degraded cell(s), listed above and marked in the reports"
                      + ("" if args.allow_degraded else f"; exit code {EXIT_DEGRADED}") + "[/]")
        if not args.allow_degraded:
            return EXIT_DEGRADED
    return 0


__all__ = ["COMMAND", "Reproduction", "add_parser", "check_methods", "main"]


COMMAND = Command(name="reproduce", add_parser=add_parser, run=main)
