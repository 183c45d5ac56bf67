"""Typed command-line settings shared by every command that takes them (run, reproduce, estimate, a
method's own commands): argument types that reject bad values with one line, and option groups.

Core, not the CLI: a method's or the reports' subcommand adds the same options without importing
the application tier.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from .errors import ConfigError

UNLIMITED = -1  # reasoning allowance meaning: send no output cap (``--reasoning-tokens unlimited``)


# Default reasoning allowance per effort, from the providers' documentation: OpenAI advises reserving
# at least 25,000 tokens for reasoning and output when starting with its reasoning models (medium, and
# the default effort of a reasoning family); DeepSeek's reasoner writes up to 32K tokens by default
# (high) and 64K at most (xhigh, max); low and minimal effort reason far less.
DEFAULT_REASONING_TOKENS = {"minimal": 2_048, "low": 8_192, "medium": 25_000, "high": 32_768,
                            "xhigh": 65_536, "max": 65_536}


def csv_list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def seed_list(s: str) -> list[int]:
    """``--seeds``: a non-empty list of distinct non-negative integers (a repeated seed would write every
    row twice; a negative one cannot seed numpy's generator)."""
    try:
        seeds = [int(x) for x in csv_list(s)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {s!r}: expected comma-separated integers, e.g. 0,1,2") from None
    try:
        return check_seeds(seeds, "--seeds")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def check_seeds(seeds: Any, what: str = "seeds") -> list[int]:
    """``seeds`` if it is a non-empty list of distinct non-negative integers, else a ConfigError naming ``what``."""
    if not isinstance(seeds, (list, tuple)) or not seeds:
        raise ConfigError(f"{what}: expected a non-empty list of distinct non-negative integers, e.g. 0,1,2")
    bad = [x for x in seeds if isinstance(x, bool) or not isinstance(x, int) or x < 0]
    if bad:
        raise ConfigError(f"{what}: {bad[0]!r} is not a non-negative integer")
    dup = sorted({x for x in seeds if list(seeds).count(x) > 1})
    if dup:
        raise ConfigError(f"{what}: seed {dup[0]} given more than once (each seed is one split)")
    return list(seeds)


def check_epochs(epochs: Any, temperature: float, model: str) -> int:
    """``epochs`` (answers per test task) if valid for this sampling: more than one needs a temperature
    above 0, since at 0 the repeats would be the same answer counted as independent samples (the
    ``scripted/`` test model is exempt: its replies vary with the seed, which each epoch changes)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"--epochs: expected a positive integer, got {epochs!r}")
    if epochs > 1 and not temperature > 0 and not str(model).startswith("scripted/"):
        raise ConfigError(f"--epochs {epochs}: needs --temperature above 0 (at temperature 0 every epoch would "
                          "repeat the same answer, a fake repeat)")
    return epochs


def non_empty_csv(s: str) -> list[str]:
    """A comma-separated list that must name something (``--sources ''`` would otherwise mean "all")."""
    out = csv_list(s)
    if not out:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {s!r}")
    return out


def finite_float(s: str) -> float:
    try:
        x = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {s!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {s!r}")
    return x


def non_negative_float(s: str) -> float:
    x = finite_float(s)
    if x < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {s!r}")
    return x


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")  # inspect-ai's values


def guidance_limit(s: str) -> int | str:
    return "all" if s.strip().lower() == "all" else positive_int(s)


def resolve_guidance_limit(limit: int | None, guidance_limit: int | str | None) -> int | None:
    """Guidance tasks per source and seed for a run: ``--limit`` subsamples both sides of the split
    in its 30:70 ratio unless ``--guidance-limit`` says otherwise (``all``: no limit)."""
    if guidance_limit == "all":
        return None
    if guidance_limit is not None:
        return int(guidance_limit)
    return None if limit is None else max(1, math.ceil(3 * limit / 7))


def non_negative_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {s!r}")
    return v


def key_values(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"{flag} {it!r}: expected KEY=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def method_configs(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """--method-config hybrid_rag.top_k=10  (values parsed as JSON when possible)."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in key_values(items, "--method-config").items():
        if "." not in k or not k.split(".", 1)[0] or not k.split(".", 1)[1]:
            raise ConfigError(f"--method-config {k}={v}: expected METHOD.KEY=VALUE")
        m, key = k.split(".", 1)
        try:
            val: Any = json.loads(v)
        except json.JSONDecodeError:
            val = v
        check_setting_value(f"--method-config {k}", val)
        out.setdefault(m, {})[key] = val
    return out


def check_setting_value(where: str, val: Any) -> None:
    """A method setting that is a number must be finite and non-negative: every numeric method setting
    is a count, size, share, threshold or weight, and a negative ``top_k`` silently retrieved from the
    end of the ranking instead of failing."""
    if isinstance(val, (int, float)) and not isinstance(val, bool) and (not math.isfinite(val) or val < 0):
        raise ConfigError(f"{where}: expected a finite non-negative number, got {val!r}")


def reasoning_tokens(s: str) -> int:
    """``--reasoning-tokens``: a count of tokens (0: no allowance) or 'unlimited' (no output cap sent)."""
    if s.strip().lower() in ("unlimited", "none"):
        return UNLIMITED
    return non_negative_int(s)


def add_reasoning_arguments(p: argparse.ArgumentParser) -> None:
    """The reasoning allowance options (run, reproduce, audit)."""
    defaults = ", ".join(f"{k} {v:,}" for k, v in DEFAULT_REASONING_TOKENS.items())
    p.add_argument("--reasoning-tokens", type=reasoning_tokens, metavar="N", help="on a reasoning backend (an "
                   "effort is set, the model family reasons, or the probe reports reasoning tokens), tokens added to "
                   "every stage's reply bound for reasoning, which counts against the output cap; 'unlimited' sends "
                   f"no cap. Default by effort: {defaults} (medium when no effort is given)")
    p.add_argument("--judge-reasoning-tokens", type=reasoning_tokens, metavar="N",
                   help="the same for the judge model (default by the judge's effort)")


def add_degradation_arguments(p: argparse.ArgumentParser) -> None:
    """When a cell counts as degraded, and whether that fails the command (run, reproduce)."""
    p.add_argument("--max-failure-share", type=share, default=0.10, metavar="X", help="a cell is degraded when a "
                   "learning stage failed more than this share of its model requests, the method lost more than this "
                   "share of what it attempted, or more than this share of its test answers failed (default 0.1)")
    p.add_argument("--allow-degraded", action="store_true", help="exit 0 even when a cell is degraded (default: "
                   "exit code 4; degraded cells are marked with the reason in every report)")


def add_cost_arguments(p: argparse.ArgumentParser) -> None:
    """``--max-cost`` and the prices it is computed with (run)."""
    p.add_argument("--max-cost", type=non_negative_float, metavar="USD", help="stop the run, resumably, before a live model call "
                   "would take its spending (live calls of this folder, all invocations) past this many dollars; "
                   "needs --price-input and --price-output")
    p.add_argument("--price-input", type=non_negative_float, metavar="USD", help="price per million input tokens")
    p.add_argument("--price-output", type=non_negative_float, metavar="USD", help="price per million output tokens (visible and "
                   "reasoning)")


def share(s: str) -> float:
    try:
        x = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {s!r}") from None
    if not 0.0 <= x <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {s!r}")
    return x


def method_names(text: str) -> list[str]:
    """``--methods``/``--rerun``: comma-separated names, a variant (``METHOD@KEY=VALUE,...``) kept whole."""
    from .registry import method_list

    non_empty_csv(text)  # one clear line for an empty list
    try:
        return method_list(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int_list(s: str) -> list[int]:
    """``C[,C...]``: one or more positive integers."""
    return [positive_int(x) for x in non_empty_csv(s)]


def add_run_arguments(p: argparse.ArgumentParser, *, required: bool = True, several_connections: bool = False) -> None:
    """Every option of ``run`` but the protocols' (which belong to the reports): ``run`` itself and
    ``estimate``, which takes the same command line to price it (``required=False``: it also takes a
    config instead; ``several_connections``: ``--max-connections`` takes a list, one wall time each)."""
    p.add_argument("--benchmark", required=required, help="benchmark name (see `sourcebench list`)")
    p.add_argument("--methods", required=required, type=method_names, help="comma-separated method names; "
                   "METHOD@KEY=VALUE[,KEY=VALUE] runs a method under other settings as its own row, named by them "
                   "(e.g. hybrid_rag,hybrid_rag@top_k=4)")
    p.add_argument("--model", required=required, help="solver model (inspect-ai name), e.g. local/smollm2")
    p.add_argument("--judge-model", help="judge model for LLM-judged benchmarks (default: the solver model)")
    p.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="split seeds (default 0,1,2)")
    p.add_argument("--limit", type=positive_int, help="test tasks per source and seed (seeded subset, same for all methods)")
    p.add_argument("--guidance-limit", type=guidance_limit,
                   help="guidance tasks per source and seed (seeded subset), or 'all'. Default: all, except that "
                   "with --limit N it is ceil(3N/7), the split's own 30:70 ratio, so that a quick run is quick "
                   "for methods that learn from guidance too")
    p.add_argument("--sources", type=non_empty_csv, help="comma-separated source ids (default: all)")
    p.add_argument("--out", type=Path, help="output folder (default runs/<benchmark>-<model>)")
    p.add_argument("--data-dir", type=Path, help="folder holding benchmark data (default: $SOURCEBENCH_DATA_DIR, "
                   "./data, ../shared/data)")
    p.add_argument("--cache-dir", type=Path, help="model-call and embedding cache folder (default OUT/cache); "
                   "runs that share one never pay twice for the same call (same model, settings, messages)")
    p.add_argument("--opt", action="append", metavar="KEY=VALUE", help="benchmark option (repeatable), e.g. "
                   "max_difficulty=2 for phantomwiki, flask=DIR for swe_qa")
    p.add_argument("--method-config", action="append", metavar="METHOD.KEY=VALUE", help="method setting (repeatable)")
    p.add_argument("--embedder", default="auto", help="auto (local MiniLM if installed, else hash), local, hash, "
                   "openai/<model>")
    p.add_argument("--max-tokens", type=positive_int, default=512, help="max output tokens per call (default 512)")
    p.add_argument("--temperature", type=non_negative_float, default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--epochs", type=positive_int, default=1, help="answers per test task (inspect-ai epochs), for "
                   "a backend that is not deterministic: each is scored and cached under its own key (the solver's "
                   "seed changes with the epoch), the task's score is their mean and the leaderboard shows the "
                   "within-task sd; more than 1 needs --temperature above 0 (default 1)")
    p.add_argument("--context-window", type=positive_int, help="solver context window in tokens; longer prompts are "
                   "scored failures (default: known for local models)")
    p.add_argument("--reasoning-effort", choices=REASONING_EFFORTS,
                   help="the solver's reasoning effort, for models that take one (default: the provider's)")
    p.add_argument("--judge-reasoning-effort", choices=REASONING_EFFORTS,
                   help="the judge's reasoning effort (default: the provider's)")
    add_reasoning_arguments(p)
    add_degradation_arguments(p)
    add_cost_arguments(p)
    p.add_argument("--max-samples", type=positive_int, help="concurrent test tasks (default: twice --max-connections "
                   "when that is given, else inspect's)")
    if several_connections:  # estimate: the wall time at each of several budgets
        p.add_argument("--max-connections", type=positive_int_list, metavar="C[,C...]", help="the run's connection "
                       "budget(s) for the expected wall time (default 32, as `run` for a served model)")
    else:
        p.add_argument("--max-connections", type=positive_int, help="the run's connection budget: model calls in "
                       "flight at once across every cell, stage and phase, learning included (default: 32 for a "
                       "served model, the hosted APIs' first paid tiers serve more; a local/ model's pool of "
                       "contexts)")
    p.add_argument("--max-retries", type=non_negative_int, default=5, help="retries of a failed model call (HTTP 429/5xx, "
                   "timeout, dropped connection, unparsable reply) with exponential backoff, after which the task "
                   "is a scored failure with the reason (default 5)")
    p.add_argument("--attempt-timeout", type=positive_int, help="seconds before one attempt of a model call is "
                   "abandoned and retried (default: the provider's)")
    p.add_argument("--timeout", type=positive_int, help="seconds a model call may take, retries included (default: none)")
    p.add_argument("--executor", default="local", choices=["local", "ray"], help="run the (method, source, seed) "
                   "cells here (local, default) or as Ray tasks (ray; the output folder must be shared by all nodes)")
    p.add_argument("--test-processes", type=positive_int, default=1, help="split every cell's test tasks over N "
                   "processes (local executor; --max-connections and --max-samples are shared among them). "
                   "For fast remote endpoints at high concurrency, where one process is CPU-bound; not for "
                   "local/ models, which would be loaded once per process (default 1)")
    p.add_argument("--learn-concurrency", type=positive_int, help="cells (method x source x seed) learned at the "
                   "same time. Default: every pending cell for a served model (--max-connections bounds their calls "
                   "in flight, so chains of calls in one cell leave the connections to the others); one for a "
                   "local/ model (on a 2-core machine, 2 overlaps cells: one llama.cpp context per core)")
    p.add_argument("--ray-address", help="Ray cluster to use with --executor ray, e.g. auto or ray://head:10001 "
                   "(default: start a local instance)")
    p.add_argument("--display", default=None, choices=["full", "conversation", "rich", "plain", "log", "none"],
                   help="inspect-ai display during the test phase (default: plain on a terminal, none otherwise; full "
                   "shows inspect's rich display, as its full-screen app runs only under inspect's own eval())")
    p.add_argument("--rerun", action="append", type=method_names, metavar="METHOD", help="learn and test these methods "
                   "again although their artifacts and rows exist (repeatable or comma-separated); edited code is "
                   "re-learned without it")
    p.add_argument("--no-report", action="store_true", help="do not write the leaderboard at the end")
