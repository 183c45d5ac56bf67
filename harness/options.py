"""Typed command-line settings shared by every command that takes them (run, reproduce, estimate, a
method's own commands): argument types that reject bad values with one line, and option groups.

Core, not the CLI: a method's or the reports' subcommand adds the same options without importing
the application tier.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from .errors import ConfigError


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
    from .llm import UNLIMITED

    if s.strip().lower() in ("unlimited", "none"):
        return UNLIMITED
    return non_negative_int(s)


def add_reasoning_arguments(p: argparse.ArgumentParser) -> None:
    """The reasoning allowance options (run, reproduce, audit)."""
    from .llm import DEFAULT_REASONING_TOKENS

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
