"""Cost before money: the calls and tokens a run will make, from the sources' sizes and measured rates.

A rate is measured, never guessed: for each method and phase, the calls and input / visible output /
reasoning tokens a finished run (``--calibration RUN_DIR``, or the shipped ``cost_rates.json``
measured on the API-like test backend) spent per unit of work, where the unit is

* ``element`` for learning from the source (every learn stage of a method that does not use
  guidance; the stages of a guidance-using method's source-only sub-artifacts, ``Method.shared_stages``),
* ``guidance`` for learning from guidance tasks (the other learn stages, and judge calls made while
  learning), ``test`` for answering and judging test tasks.

Input tokens of answering calls (prompts of evidence) are then scaled by the ratio of the target
source's mean element size to the calibration's; learning prompts are not (their stages cut what
they read to bounded windows, so their size follows the windows, not the elements). The estimate is
a plan, not a promise: a method whose work depends on what the model writes (agents, self-study)
can differ; ``sourcebench estimate --compare RUN_DIR`` shows estimate against measurement for a
finished run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .io import read_json, read_jsonl

RATES_FILE = Path(__file__).with_name("cost_rates.json")
KINDS = ("calls", "input_tokens", "output_tokens", "reasoning_tokens")
JUDGE_PHASES = ("judge", "learn_judge")


@dataclass
class CellUnits:
    """The work of one (method, source, seed) cell, in the units rates are measured in."""

    method: str
    source: str
    seed: Any
    elements: int
    element_tokens: float  # mean tokens (characters / 4) of an element
    guidance: int
    tests: int
    uses_guidance: bool
    kind: str = ""  # the source's kind (documents, code, api): rates are measured per kind where they can be
    test_ids: tuple[str, ...] = ()  # the cell's test tasks, for the power of the planned comparisons
    judged: bool = True  # the benchmark scores with a judge model: judge calls only then
    epochs: int = 1  # answers per test task (--epochs): the test phase's calls scale with it


@dataclass
class Rate:
    """Per unit: calls and tokens; ``element_tokens``: the calibration's mean element size."""

    unit: str
    per_unit: dict[str, float] = field(default_factory=dict)
    element_tokens: float = 0.0
    n_units: float = 0.0


def unit_of(phase: str, stage: str, uses_guidance: bool, source_stages: tuple[str, ...]) -> str:
    """Which unit a (phase, stage) of usage scales with (see the module docstring)."""
    if phase == "learn_judge":  # the judge calls a method makes while learning from guidance
        return "guidance"
    if phase == "learn":
        if not uses_guidance or any(stage.startswith(p) for p in source_stages):
            return "element"
        return "guidance"
    return "test"


def _units(cell: CellUnits, unit: str) -> float:
    return {"element": cell.elements, "guidance": cell.guidance, "test": cell.tests}[unit]


def measure(run_dirs: Iterable[Path]) -> dict[str, dict[str, Rate]]:
    """Rates ``{method: {"phase/unit": Rate}}`` from finished run folders (usage.jsonl, results, splits)."""
    from .registry import get_method_class

    totals: dict[tuple[str, str, str], dict[str, float]] = defaultdict(lambda: dict.fromkeys(KINDS, 0.0))
    units: dict[tuple[str, str, str], float] = defaultdict(float)
    sizes: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        if not (run_dir / "run.json").is_file():
            raise ConfigError(f"--calibration {run_dir}: not a run folder (no run.json)")
        run = read_json(run_dir / "run.json")
        src = {s["id"]: s for s in run.get("sources", [])}
        results = read_jsonl(run_dir / "results.jsonl", tolerate_torn_tail=True)
        usage = read_jsonl(run_dir / "usage.jsonl", tolerate_torn_tail=True) if (run_dir / "usage.jsonl").exists() else []
        counted: set[tuple] = set()  # (method, label, unit) whose units this folder already added
        tests: dict[tuple, int] = defaultdict(int)
        for r in results:
            tests[(r["method"], r["source"], r["seed"])] += 1
        guidance = _guidance_counts(run_dir, run)
        for method in {r["method"] for r in results}:
            try:
                cls = get_method_class(method)
            except Exception:  # noqa: BLE001 - a method not installed here: its rows cannot be typed
                continue
            # stages that learn from the source alone: a method's shared sub-artifacts (SourceLearn's M0, MS)
            sstages = tuple(getattr(cls, "source_stages", ()) or getattr(cls, "shared_stages", ()) or ())
            cells = [k for k in tests if k[0] == method]
            for u in usage:
                if u.get("method") != method or u.get("status") not in ("live", "cached"):
                    continue
                unit = unit_of(str(u.get("phase")), str(u.get("stage") or ""), cls.uses_guidance, sstages)
                kind = str(src.get(u.get("source"), {}).get("kind") or "")
                key = (method, f"{kind}:{u.get('phase')}/{unit}", unit)
                for k in KINDS:
                    totals[key][k] += float(u.get(k) or 0)
            for unit_key in {k for k in totals if k[0] == method} - counted:
                counted.add(unit_key)
                _, label, unit = unit_key
                kind = label.split(":", 1)[0]
                mine = [c for c in cells if str(src.get(c[1], {}).get("kind") or "") == kind]
                if unit == "element":
                    done = {(m, s) for m, s, _ in mine}  # an artifact per source (per seed if guided)
                    n = sum(int(src.get(s, {}).get("n_elements") or 0) for _, s in done) \
                        if not cls.uses_guidance else \
                        sum(int(src.get(s, {}).get("n_elements") or 0) for _, s, _ in mine)
                elif unit == "guidance":
                    n = sum(guidance.get((s, seed), 0) for _, s, seed in mine)
                else:
                    n = sum(tests[c] for c in mine)
                units[unit_key] += n
                sizes[unit_key] += [float(src[s].get("element_tokens") or 0) for _, s, _ in mine
                                    if s in src and src[s].get("element_tokens")]
    rates: dict[str, dict[str, Rate]] = defaultdict(dict)
    for key, tot in totals.items():
        method, label, unit = key
        if units[key] <= 0:
            continue
        rates[method][label] = Rate(unit, {k: tot[k] / units[key] for k in KINDS},
                                    sum(sizes[key]) / len(sizes[key]) if sizes[key] else 0.0, units[key])
    return dict(rates)


def _guidance_counts(run_dir: Path, run: dict[str, Any]) -> dict[tuple, int]:
    """Guidance tasks a cell learned from: the split manifests' ids, cut to the run's guidance limit."""
    out: dict[tuple, int] = {}
    lim = run.get("guidance_limit")
    for p in sorted((run_dir / "splits").glob("**/*.json")):
        try:
            m = read_json(p)
        except Exception:  # noqa: BLE001 - a foreign file in splits/ is not a manifest
            continue
        if isinstance(m, dict) and "guidance_ids" in m and "source_id" in m:
            n = len(m["guidance_ids"])
            out[(m["source_id"], m.get("seed"))] = min(n, int(lim)) if lim else n
    return out


def load_rates(path: Path = RATES_FILE) -> dict[str, dict[str, Rate]]:
    """The shipped rates (measured on the test backend; see ``benchmarks/calibrate_costs.py``)."""
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {m: {k: Rate(**v) for k, v in by.items()} for m, by in (doc.get("rates") or {}).items()}


def dump_rates(rates: dict[str, dict[str, Rate]], meta: dict[str, Any]) -> str:
    return json.dumps({"meta": meta, "rates": {m: {k: vars(r) for k, r in sorted(by.items())}
                                               for m, by in sorted(rates.items())}}, indent=1, sort_keys=True)


@dataclass
class Estimate:
    """Expected work of one cell and phase; ``basis`` says which rate it came from."""

    method: str
    source: str
    seed: Any
    phase: str
    calls: float
    input_tokens: float
    output_tokens: float
    reasoning_tokens: float
    basis: str


def estimate_cells(cells: list[CellUnits], rates: dict[str, dict[str, Rate]],
                   method_of: dict[str, str] | None = None) -> tuple[list[Estimate], list[str]]:
    """Estimates per cell and phase, and the methods that have no measured rate (said, not guessed).
    ``method_of`` maps a cell's method (a variant's alias) to the registered method whose rate it uses."""
    out, missing = [], []
    learned: set[tuple] = set()
    for c in cells:
        by = rates.get((method_of or {}).get(c.method, c.method))
        if not by:
            if c.method not in missing:
                missing.append(c.method)
            continue
        for label, r in sorted(_for_kind(by, c.kind).items()):
            phase = label.split("/", 1)[0]
            if phase in JUDGE_PHASES and not c.judged:  # scored by rule: no judge calls, learning's nor testing's
                continue
            if r.unit == "element" and not c.uses_guidance:  # one artifact per source, shared by its seeds
                if (c.method, c.source) in learned:
                    continue
                learned.add((c.method, c.source))
            n = _units(c, r.unit) * (c.epochs if r.unit == "test" else 1)
            scale = c.element_tokens / r.element_tokens if r.element_tokens and c.element_tokens and (
                phase == "answer") else 1.0
            p = r.per_unit
            out.append(Estimate(c.method, c.source, c.seed, phase, n * p["calls"], n * p["input_tokens"] * scale,
                                n * p["output_tokens"], n * p["reasoning_tokens"],
                                f"{_fmt(p['calls'])} calls per {r.unit}"))
    return out, missing


def _for_kind(by: dict[str, Rate], kind: str) -> dict[str, Rate]:
    """``{"phase/unit": Rate}`` for a source of this kind: its own measured rates, else the rates of all
    kinds pooled (weighted by their units), so a code repository is estimated from code where measured."""
    out: dict[str, Rate] = {}
    labels = {k.split(":", 1)[1] for k in by}
    for label in sorted(labels):
        own = by.get(f"{kind}:{label}")
        if own is not None:
            out[label] = own
            continue
        rs = [r for k, r in by.items() if k.split(":", 1)[1] == label]
        n = sum(r.n_units for r in rs) or 1.0
        out[label] = Rate(rs[0].unit, {f: sum(r.per_unit[f] * r.n_units for r in rs) / n for f in KINDS},
                          sum(r.element_tokens * r.n_units for r in rs) / n, n)
    return out


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def cost(e_in: float, e_out: float, price_in: float | None, price_out: float | None) -> float | None:
    """Dollars for these tokens at per-million prices (reasoning is billed as output)."""
    if price_in is None or price_out is None:
        return None
    return (e_in * price_in + e_out * price_out) / 1e6


def totals(estimates: list[Estimate]) -> dict[str, float]:
    t = dict.fromkeys(("calls", "input_tokens", "output_tokens", "reasoning_tokens"), 0.0)
    for e in estimates:
        for k in t:
            t[k] += getattr(e, k)
    return t


def within(estimate: float, measured: float) -> str:
    if measured == 0:
        return "n/a" if estimate == 0 else "+inf"
    return f"{100 * (estimate - measured) / measured:+.0f} %"


DEFAULT_DISCORDANCE = 0.3  # share of test tasks where two methods disagree (right vs wrong); measured runs vary


def planned_mde(cells: list[CellUnits], comparisons: int, discordance: float = DEFAULT_DISCORDANCE,
                alpha: float = 0.05, power: float = 0.80) -> dict[str, Any]:
    """The smallest Δ (accuracy points) a planned run detects with ``power`` in each of ``comparisons``
    paired comparisons after Holm, so a user sizes a run before paying for it.

    The reports' paired test flips each task's difference within its source and weighs the sources the
    same (``reports.stats.paired_test``); with a share ``discordance`` of binary tasks on which the two
    methods disagree, the statistic's null standard deviation is sqrt(sum over sources of discordance /
    (S**2 n_s)), n_s the source's distinct test tasks over all seeds, and the MDE is (z(1 - alpha / 2m)
    + z(power)) times it (alpha / m: Holm's threshold for a family's smallest p). Tasks are taken as
    independent: where a benchmark groups them (dialogues, APIs) the real MDE is larger.
    """
    from statistics import NormalDist

    if not 0 < discordance <= 1:
        raise ConfigError(f"--discordance: {discordance} is not in (0, 1]")
    per_source: dict[str, set[str]] = {}
    for c in cells:
        per_source.setdefault(c.source, set()).update(c.test_ids)
    sizes = {s: len(ids) for s, ids in per_source.items() if ids}
    m = max(1, comparisons)
    out: dict[str, Any] = {"tasks": sum(sizes.values()), "sources": len(sizes), "comparisons": m,
                           "discordance": discordance, "power": power, "alpha": alpha, "mde_pp": None}
    if not sizes:
        return out
    k = len(sizes)
    sd = sum(discordance / (k * k * n) for n in sizes.values()) ** 0.5
    z = NormalDist().inv_cdf(1 - alpha / (2 * m)) + NormalDist().inv_cdf(power)
    out["mde_pp"] = 100.0 * z * sd
    return out
