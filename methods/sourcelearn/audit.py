"""Analyses of saved SourceLearn source models: Figure 4 (a-d) and Tables 3-4 of the paper.

Pure analyses (no model calls) read the saved models only: unit kinds and the share of units with
explicit conditions per stage. LLM audits use the run's judge model through the LLM layer (cached,
counted under method ``audit``): coverage of the claims test tasks require, grounding of sampled
units against their cited elements, and preservation of units a stage dropped.

The coverage audit reads the *reference answers of test tasks* to derive the claims each task needs.
That is fine for an audit, which runs after the test phase and writes nothing a method can read;
no method ever sees a test reference.

Models are found in a run folder by artifact kind: the shared ``sourcelearn_m0``/``sourcelearn_ms``
folders and each variant's ``method_<name>`` folder; the variant decides the stage label.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from sourcebench.harness.data import Source, Task, estimate_tokens, stable_hash
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import read_json, read_jsonl

from .grounding import excerpts_block
from .model import KIND_OF_ROLE, SourceModel, Unit

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

# -------------------------------------------------------------------------------- stages and kinds

KINDS: tuple[str, ...] = tuple(dict.fromkeys(KIND_OF_ROLE.values()))
STAGE_OF_METHOD = {
    "sourcelearn-m0": "M0",
    "sourcelearn-ms": "MS",
    "sourcelearn": "MT",
    "sourcelearn-wo-self": "MT_wo_self",
    "sourcelearn-wo-cross": "M_local",
    "sourcelearn-wo-failure": "MS+Pi1",
}
METHOD_OF_STAGE = {v: k for k, v in STAGE_OF_METHOD.items()}
SHARED_KINDS = {"sourcelearn_m0": "M0", "sourcelearn_ms": "MS"}  # artifact folders shared by variants
STAGE_ORDER: tuple[str, ...] = ("M0", "MS", "MT", "MT_wo_self", "M_local", "MS+Pi1")
MAIN_STAGES: tuple[str, ...] = ("M0", "MS", "MT")
PARENT = {"MS": "M0", "MT": "MS", "MT_wo_self": "M0", "M_local": "MS", "MS+Pi1": "MS"}

GroundLabel = Literal["supported", "partial", "unsupported", "contradicted"]
PreserveLabel = Literal["preserved", "lost", "contradicted"]
GROUND_LABELS: tuple[str, ...] = GroundLabel.__args__  # type: ignore[attr-defined]
PRESERVE_LABELS: tuple[str, ...] = PreserveLabel.__args__  # type: ignore[attr-defined]
FAILED = "failed"  # label of an item whose judge call failed: counted, kept out of the shares

AUDIT_EXCERPT_CHARS = 3000  # the judge sees more of each cited element than the learning gate does
MAX_CLAIMS = 6
CONTEXT_TOKENS = 24000  # most source-model tokens shown to a judge (the paper's activation budget B)

ModelSet = Mapping[str, "SourceModel | Sequence[SourceModel]"]


@dataclass(frozen=True)
class StageModel:
    """One saved source model and where it belongs: stage, source, split seed (None = shared)."""

    stage: str
    source_id: str
    seed: int | None
    model: SourceModel
    path: Path


@dataclass
class RunModels:
    """Everything the audits read from a run folder."""

    run_dir: Path
    run: dict[str, Any]
    models: list[StageModel]
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def benchmark(self) -> str:
        b = self.run.get("benchmark")
        return str(b.get("name") if isinstance(b, dict) else b or "")

    def source_ids(self) -> list[str]:
        return sorted({m.source_id for m in self.models})

    def stages(self, source_id: str) -> dict[str, list[StageModel]]:
        out: dict[str, list[StageModel]] = {}
        for m in sorted(self.models, key=lambda m: (_stage_rank(m.stage), -1 if m.seed is None else m.seed)):
            if m.source_id == source_id:
                out.setdefault(m.stage, []).append(m)
        return out

    def test_ids(self, source_id: str) -> dict[int, list[str]]:
        """Test task ids per split seed: those scored in results.jsonl, else the split manifests."""
        out: dict[int, list[str]] = {}
        for r in self.results:
            if r.get("benchmark") == self.benchmark and r.get("source") == source_id:
                out.setdefault(int(r["seed"]), []).append(str(r["task_id"]))
        if not out:
            folder = self.run_dir / "splits" / self.benchmark / source_id
            for p in sorted(folder.glob("seed*.json")) if folder.is_dir() else []:
                man = read_json(p)
                out[int(man["seed"])] = [str(i) for i in man.get("test_ids", [])]
        return {s: sorted(set(ids)) for s, ids in sorted(out.items())}

    def correct(self, method: str, source_id: str, seed: int) -> dict[str, bool]:
        return {str(r["task_id"]): bool(r.get("correct")) for r in self.results
                if r.get("method") == method and r.get("source") == source_id and int(r["seed"]) == seed}


def _stage_rank(stage: str) -> int:
    return STAGE_ORDER.index(stage) if stage in STAGE_ORDER else len(STAGE_ORDER)


def order_stages(stages: Iterable[str]) -> list[str]:
    return sorted(dict.fromkeys(stages), key=lambda s: (_stage_rank(s), s))


def load_run(run_dir: Path) -> RunModels:
    """Find every SourceLearn model of a run; one per (stage, source, seed).

    Where one slot has several candidates (a variant's copy and the shared folder, or artifacts of
    several configurations), the artifact that produced the scored results wins, then the newest.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").exists():
        raise DataError(f"{run_dir}: not a run folder (no run.json)")
    run = read_json(run_dir / "run.json")
    res_path = run_dir / "results.jsonl"
    results = read_jsonl(res_path, tolerate_torn_tail=True) if res_path.exists() else []
    scored = {(r.get("method"), r.get("artifact")) for r in results}
    slots: dict[tuple[str, str, int | None], list[tuple[tuple, StageModel]]] = {}
    for path in sorted((run_dir / "artifacts").glob("*/*/model.json")):
        kind = path.parent.parent.name
        man = read_json(path.parent / "artifact.json") if (path.parent / "artifact.json").exists() else {}
        inputs = man.get("inputs") or {}
        if kind in SHARED_KINDS:
            stage, seed, method = SHARED_KINDS[kind], None, None
        elif kind.startswith("method_"):
            method = str(inputs.get("method") or kind[len("method_"):])
            stage = STAGE_OF_METHOD.get(method)
            seed = int(inputs["seed"]) if inputs.get("seed") is not None else None
        else:
            continue  # other shared sub-artifacts (indexes, per-split intermediates)
        if stage is None:
            continue
        model = SourceModel.load(path)
        rank = ((method, path.parent.name) in scored, method is not None, str(man.get("created", "")))
        sm = StageModel(stage, model.source_id, seed, model, path)
        slots.setdefault((stage, model.source_id, seed), []).append((rank, sm))
    models = [max(c, key=lambda x: x[0])[1] for c in slots.values()]
    return RunModels(run_dir, run, models, results)


# ---------------------------------------------------------------------- Figure 4 (a, b): pure tables

def _as_list(v: SourceModel | Sequence[SourceModel]) -> list[SourceModel]:
    return [v] if isinstance(v, SourceModel) else list(v)


def unit_kind_counts(model: SourceModel) -> dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    for u in model.units:
        counts[u.kind] += 1
    return counts


def unit_kind_table(models: ModelSet) -> dict[str, dict[str, Any]]:
    """Per stage: unit counts and shares by kind (Figure 4a); several models (splits) are averaged.

    Counts every saved unit: the audit describes what the model holds, with or without the source.
    """
    out: dict[str, dict[str, Any]] = {}
    for stage, ms in models.items():
        ms = _as_list(ms)
        if not ms:
            continue
        per = [unit_kind_counts(m) for m in ms]
        shares = [{k: (c[k] / sum(c.values()) if sum(c.values()) else 0.0) for k in KINDS} for c in per]
        out[stage] = {
            "n_models": len(ms),
            "n_units": float(np.mean([sum(c.values()) for c in per])),
            "counts": {k: float(np.mean([c[k] for c in per])) for k in KINDS},
            "shares": {k: float(np.mean([s[k] for s in shares])) for k in KINDS},
        }
    return out


def has_conditions(unit: Unit) -> bool:
    return any(c.strip() for c in unit.conditions)


def condition_share(models: ModelSet) -> dict[str, dict[str, Any]]:
    """Per stage: share of units stating explicit applicability conditions (Figure 4b).

    ``share`` is over all units; ``share_non_card`` leaves out entity cards, which hold attribute
    values and carry no conditions by design. Several models (splits) are averaged.
    """
    out: dict[str, dict[str, Any]] = {}
    for stage, ms in models.items():
        ms = _as_list(ms)
        if not ms:
            continue
        n = [len(m.units) for m in ms]
        k = [sum(has_conditions(u) for u in m.units) for m in ms]
        nc = [[u for u in m.units if u.role != "card"] for m in ms]
        out[stage] = {
            "n_models": len(ms),
            "n_units": float(np.mean(n)),
            "with_conditions": float(np.mean(k)),
            "share": float(np.mean([a / b if b else 0.0 for a, b in zip(k, n)])),
            "share_non_card": float(np.mean([sum(has_conditions(u) for u in us) / len(us) if us else 0.0
                                             for us in nc])),
        }
    return out


def per_source_rows(run: RunModels, table_fn, stages: Sequence[str], sources: Sequence[str] | None = None
                    ) -> list[dict[str, Any]]:
    """Rows ``{source, stage, ...}`` of a pure table per source, plus ``source="ALL"`` averages."""
    rows: list[dict[str, Any]] = []
    for sid in sources or run.source_ids():
        by_stage = run.stages(sid)
        table = table_fn({s: [m.model for m in by_stage[s]] for s in stages if s in by_stage})
        rows += [{"source": sid, "stage": s, **_flatten(v)} for s, v in table.items()]
    for s in stages:
        same = [r for r in rows if r["stage"] == s]
        if len(same) > 1:
            keys = [k for k in same[0] if k not in ("source", "stage") and isinstance(same[0][k], (int, float))]
            rows.append({"source": "ALL", "stage": s, **{k: float(np.mean([r[k] for r in same])) for k in keys}})
    return rows


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}:"))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ------------------------------------------------------------------------------- shared LLM plumbing

T = TypeVar("T")


async def gather_limited(coros: Sequence[Awaitable[T]], limit: int) -> list[T]:
    sem = asyncio.Semaphore(max(1, limit))

    async def one(c: Awaitable[T]) -> T:
        async with sem:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))


def sample_items(items: Sequence[T], n: int, seed: int, salt: str, key=lambda x: x) -> list[T]:
    """A seeded sample that depends only on (seed, salt) and the item keys, in key order."""
    ordered = sorted(items, key=key)
    if n <= 0 or len(ordered) <= n:
        return ordered
    rng = random.Random(int(stable_hash(seed, salt)[:12], 16))
    picked = sorted(rng.sample(range(len(ordered)), n))
    return [ordered[i] for i in picked]


_WORD = re.compile(r"[a-z0-9]{2,}")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def select_units(units: Sequence[Unit], query: str, budget_tokens: int) -> tuple[list[Unit], bool]:
    """All units if they fit the budget, else those sharing most words with the query (original order).

    Returns the units and whether anything was left out.
    """
    if sum(estimate_tokens(u.render()) + 1 for u in units) <= budget_tokens:
        return list(units), False
    q = _words(query)
    ranked = sorted(range(len(units)), key=lambda i: (-len(q & _words(units[i].render())), i))
    keep, used = set(), 0
    for i in ranked:
        t = estimate_tokens(units[i].render()) + 1
        if used + t > budget_tokens:
            continue
        keep.add(i)
        used += t
    return [u for i, u in enumerate(units) if i in keep], True


JUDGE_TEMPLATE_TOKENS = 64  # the chat template around the counted prompt text


def _prompt_text(msgs: Sequence[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in msgs)


async def fit_units(llm: BoundLLM, units: Sequence[Unit], query: str, budget_tokens: int,
                    prompt: Callable[[list[Unit]], list[dict[str, str]]], reply_tokens: int) -> tuple[list[Unit], bool]:
    """``select_units``, then, when the judge counts its own tokens (local models), fewer units until
    the whole prompt fits the judge's context window with room for the reply.

    The budget is in chars / 4, which undercounts a small model's tokens of code about twofold: on
    SWE-QA flask, SmolLM2 preservation prompts budgeted at 6,192 came to 11,900 tokens and failed.
    Returns the units and whether any were left out."""
    kept, cut = select_units(units, query, budget_tokens)
    window = llm.spec.effective_context_window()
    if not window or not kept:
        return kept, cut
    room = window - reply_tokens - JUDGE_TEMPLATE_TOKENS
    fixed: int | None = None
    for _ in range(4):  # the token ratio of a subset can differ from the whole's: recount after each cut
        n = await llm.count_tokens(_prompt_text(prompt(kept)))
        if n is None or n <= room or not kept:
            break
        if fixed is None:
            fixed = await llm.count_tokens(_prompt_text(prompt([]))) or 0
        est = sum(estimate_tokens(u.render()) + 1 for u in kept)
        ratio = max(n - fixed, 1) / max(est, 1)  # real tokens per budget token of these units
        budget_tokens = min(budget_tokens, est - 1, int((room - fixed) / ratio) - 16)
        kept, cut = select_units(units, query, max(0, budget_tokens))[0], True
    return kept, cut


class JudgedItem(BaseModel):
    """One unit judged by the grounding or preservation audit."""

    audit: Literal["grounding", "preservation"]
    source: str
    stage: str  # a stage (grounding) or a step "M0->MS" (preservation)
    seed: int | None = None
    unit_id: str
    unit: str  # the unit as rendered for the judge
    role: str
    element_ids: list[str] = Field(default_factory=list)
    label: str
    reason: str = ""
    stale: bool = False
    absorbed_by: list[str] = Field(default_factory=list)


def label_table(items: Sequence[JudgedItem], labels: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per (source, stage): counts and percentages of each label (Tables 3 and 4).

    Items whose judge call failed are counted under ``failed`` and left out of the percentages.
    """
    out: dict[str, dict[str, Any]] = {}
    for it in items:
        row = out.setdefault(f"{it.source}|{it.stage}", {"source": it.source, "stage": it.stage, "n": 0,
                                                         FAILED: 0, **{lab: 0 for lab in labels}})
        row["n"] += 1
        row[it.label if it.label in labels else FAILED] += 1
    for row in out.values():
        judged = row["n"] - row[FAILED]
        for lab in labels:
            row[f"{lab}_pct"] = round(100.0 * row[lab] / judged, 1) if judged else None
    return out


# --------------------------------------------------------------------------- Table 3: grounding audit

class GroundingJudgement(BaseModel):
    label: GroundLabel
    reason: str = Field(default="", description="one short sentence")


GROUNDING_SYSTEM = (
    "You audit one unit of a learned model of a source against the source elements the unit cites. "
    "Judge only from the cited elements, not from what you know or assume."
)


async def judge_grounding(llm: BoundLLM, unit: Unit, source: Source, stage_name: str, source_id: str,
                          seed: int | None = None) -> JudgedItem:
    ids = unit.element_ids()
    base = {"audit": "grounding", "source": source_id, "stage": stage_name, "seed": seed, "unit_id": unit.id,
            "unit": unit.render(), "role": unit.role, "element_ids": ids,
            "stale": SourceModel.is_stale(unit, source)}
    block = excerpts_block(source, ids, max_chars=AUDIT_EXCERPT_CHARS)
    if not block:  # nothing to check against: the unit is not established by any evidence
        return JudgedItem(**base, label="unsupported", reason="cites no existing source element")
    msgs = [{"role": "system", "content": GROUNDING_SYSTEM},
            {"role": "user", "content": f"Cited source elements:\n{block}\n\nUnit:\n{unit.render()}\n\nLabel the "
             "unit with one of:\n- supported: the cited elements entail everything the unit says, its conditions "
             "and exceptions included;\n- partial: they entail its main claim but not some detail;\n- unsupported: "
             "they do not establish its main claim;\n- contradicted: they state something incompatible with it.\n"
             "Reply in JSON."}]
    res = await llm.structured(msgs, GroundingJudgement, stage="audit_grounding", max_tokens=200)
    if res.failed or res.value is None:
        return JudgedItem(**base, label=FAILED, reason=res.error[:200])
    v: GroundingJudgement = res.value  # type: ignore[assignment]
    return JudgedItem(**base, label=v.label, reason=v.reason)


async def grounding_audit(llm: BoundLLM, source: Source, models: Mapping[str, Sequence[StageModel]],
                          sample: int = 50, seed: int = 0, concurrency: int = 4) -> list[JudgedItem]:
    """Judge a seeded sample of units per stage (pooled over a stage's split models, one copy per id)."""
    jobs = []
    for stage, sms in models.items():
        pool: dict[str, tuple[Unit, int | None]] = {}
        for sm in sms:
            for u in sm.model.units:
                pool.setdefault(u.id, (u, sm.seed))
        picked = sample_items(list(pool.values()), sample, seed, f"grounding|{source.id}|{stage}",
                              key=lambda x: x[0].id)
        jobs += [judge_grounding(llm, u, source, stage, source.id, s) for u, s in picked]
    return await gather_limited(jobs, concurrency)


# ------------------------------------------------------------------------ Table 4: preservation audit

@dataclass(frozen=True)
class Dropped:
    unit: Unit
    absorbed_by: list[str]  # ids of later units that list it as absorbed


def dropped_units(earlier: SourceModel, later: SourceModel) -> list[Dropped]:
    """Units of ``earlier`` whose id is gone from ``later``, absorbed ones included (with absorbers)."""
    later_ids = {u.id for u in later.units}
    absorbers: dict[str, list[str]] = {}
    for u in later.units:
        for a in u.absorbed:
            absorbers.setdefault(a, []).append(u.id)
    return [Dropped(u, absorbers.get(u.id, [])) for u in earlier.units if u.id not in later_ids]


def related_pool(later: SourceModel, earlier: SourceModel, d: Dropped) -> list[Unit]:
    """The later model's units on the same subject as a dropped unit (the paper: "the same entity").

    Its absorbers; for an entity or pair unit, units sharing a scope key plus the regional and
    source-wide units it may have been condensed into; for a regional unit, everything in its
    regions. The whole later model when nothing matches.
    """
    keys = set(d.unit.scope.keys)
    regions = set(earlier.unit_regions(d.unit))
    broad = d.unit.scope.kind in ("region", "source")

    def related(u: Unit) -> bool:
        if u.id in d.absorbed_by or u.scope.kind == "source" or keys & set(u.scope.keys):
            return True
        in_region = bool(regions & set(later.unit_regions(u)))
        return in_region and (broad or u.scope.kind == "region")

    return [u for u in later.units if related(u)] or list(later.units)


def related_units(later: SourceModel, earlier: SourceModel, d: Dropped, budget_tokens: int = CONTEXT_TOKENS
                  ) -> list[Unit]:
    """``related_pool`` cut to the budget by relevance to the dropped unit."""
    return select_units(related_pool(later, earlier, d), d.unit.render(), budget_tokens)[0]


class PreservationJudgement(BaseModel):
    label: PreserveLabel
    reason: str = Field(default="", description="one short sentence")


PRESERVATION_SYSTEM = "You check whether knowledge removed from a learned model of a source survived a rewrite."


JUDGE_REPLY_TOKENS = 200


def preservation_messages(d: Dropped, context: Sequence[Unit]) -> list[dict[str, str]]:
    block = "\n".join(f"- {u.render()}" for u in context) or "(no units)"
    return [{"role": "system", "content": PRESERVATION_SYSTEM},
            {"role": "user", "content": f"Removed unit:\n{d.unit.render()}\n\nUnits of the new model on the same "
             f"subject:\n{block}\n\nLabel the removed unit with one of:\n- preserved: the new units still convey its "
             "meaning, reworded, merged into another unit, or condensed into a broader rule that keeps its "
             "conditions and exceptions;\n- lost: the new units no longer convey it;\n- contradicted: the new units "
             "state something incompatible with it.\nReply in JSON."}]


async def judge_dropped(llm: BoundLLM, d: Dropped, later: SourceModel, earlier: SourceModel, step: str,
                        source_id: str, seed: int | None, budget_tokens: int = CONTEXT_TOKENS) -> JudgedItem:
    """Judge one dropped unit against the later model's related units, cut to fit the judge."""
    context, _ = await fit_units(llm, related_pool(later, earlier, d), d.unit.render(), budget_tokens,
                                 lambda us: preservation_messages(d, us), JUDGE_REPLY_TOKENS)
    return await judge_preservation(llm, d, context, step, source_id, seed)


async def judge_preservation(llm: BoundLLM, d: Dropped, context: Sequence[Unit], step: str, source_id: str,
                             seed: int | None = None) -> JudgedItem:
    base = {"audit": "preservation", "source": source_id, "stage": step, "seed": seed, "unit_id": d.unit.id,
            "unit": d.unit.render(), "role": d.unit.role, "element_ids": d.unit.element_ids(),
            "absorbed_by": d.absorbed_by}
    msgs = preservation_messages(d, context)
    res = await llm.structured(msgs, PreservationJudgement, stage="audit_preservation", max_tokens=JUDGE_REPLY_TOKENS)
    if res.failed or res.value is None:
        return JudgedItem(**base, label=FAILED, reason=res.error[:200])
    v: PreservationJudgement = res.value  # type: ignore[assignment]
    return JudgedItem(**base, label=v.label, reason=v.reason)


def step_name(earlier: str, later: str) -> str:
    return f"{earlier}->{later}"


async def preservation_audit(llm: BoundLLM, source_id: str, models: Mapping[str, Sequence[StageModel]],
                             sample: int = 50, seed: int = 0, concurrency: int = 4,
                             budget_tokens: int = CONTEXT_TOKENS) -> list[JudgedItem]:
    """For each stage and its parent stage: judge a seeded sample of the units it dropped.

    A per-split later model is compared with the shared earlier one; drops are pooled over splits.
    """
    jobs = []
    for stage, later_sms in models.items():
        parent = PARENT.get(stage)
        if parent is None or parent not in models:
            continue
        step = step_name(parent, stage)
        pool = []
        for lsm in later_sms:
            esm = _matching(models[parent], lsm.seed)
            if esm is None:
                continue
            pool += [(d, lsm, esm) for d in dropped_units(esm.model, lsm.model)]
        picked = sample_items(pool, sample, seed, f"preservation|{source_id}|{step}",
                              key=lambda x: (x[0].unit.id, -1 if x[1].seed is None else x[1].seed))
        jobs += [judge_dropped(llm, d, later.model, earlier.model, step, source_id, later.seed, budget_tokens)
                 for d, later, earlier in picked]
    return await gather_limited(jobs, concurrency)


def _matching(sms: Sequence[StageModel], seed: int | None) -> StageModel | None:
    """The earlier model for a later one: the same split's, else the shared one."""
    for sm in sms:
        if sm.seed == seed:
            return sm
    return next((sm for sm in sms if sm.seed is None), None)


# ------------------------------------------------------------------- Figure 4 (c, d): claim coverage

class RequiredClaims(BaseModel):
    claims: list[str] = Field(description="self-contained statements of source content the answer depends on")


class ClaimCover(BaseModel):
    number: int
    represented: bool


class CoverageVerdicts(BaseModel):
    verdicts: list[ClaimCover]


class CoverageRecord(BaseModel):
    """Which of one test task's required claims one stage model represents."""

    source: str
    stage: str
    seed: int
    task_id: str
    claims: list[str]
    represented: list[bool] = Field(default_factory=list)
    correct: bool | None = None  # the stage's own variant on this task, from results.jsonl
    truncated: bool = False  # the model view was cut to the budget
    failed: bool = False

    @property
    def coverage(self) -> float | None:
        if self.failed or not self.claims:
            return None
        return sum(self.represented) / len(self.claims)


async def required_claims(llm: BoundLLM, task: Task, max_claims: int = MAX_CLAIMS) -> list[str] | None:
    """The source claims a test task needs, from its question and reference (None if the call failed)."""
    msgs = [{"role": "system", "content": "You work out which pieces of source knowledge a question depends on."},
            {"role": "user", "content": f"Question: {task.question}\nReference answer: {task.reference}\n\nList at "
             f"most {max_claims} facts, rules or procedures from the source that someone must know to reach this "
             "answer. Each is one short statement that makes sense on its own (name the entities it is about); "
             "do not restate the final answer as a verdict. Reply in JSON."}]
    res = await llm.structured(msgs, RequiredClaims, stage="audit_claims", max_tokens=400)
    if res.failed or res.value is None:
        return None
    claims = [c.strip() for c in res.value.claims if c.strip()]  # type: ignore[union-attr]
    return list(dict.fromkeys(claims))[:max_claims]


def coverage_messages(model_text: str, claims: Sequence[str]) -> list[dict[str, str]]:
    listing = "\n".join(f"{i}. {c}" for i, c in enumerate(claims, 1))
    return [{"role": "system", "content": "You check which claims a learned model of a source already holds."},
            {"role": "user", "content": f"Source model:\n{model_text}\n\nClaims:\n{listing}\n\nFor every claim number "
             "say whether the source model represents it: it states the claim, entails it, or gives a rule whose "
             "conditions cover the case. A claim that needs information the model lacks is not represented. "
             "Reply in JSON."}]


def coverage_reply_tokens(claims: Sequence[str]) -> int:
    return 40 * len(claims) + 60


async def represented_claims(llm: BoundLLM, model_text: str, claims: Sequence[str]) -> list[bool] | None:
    """One judge call per (task, model): which claims the rendered model represents."""
    msgs = coverage_messages(model_text, claims)
    res = await llm.structured(msgs, CoverageVerdicts, stage="audit_coverage", max_tokens=coverage_reply_tokens(claims))
    if res.failed or res.value is None:
        return None
    got = {v.number: v.represented for v in res.value.verdicts}  # type: ignore[union-attr]
    return [bool(got.get(i, False)) for i in range(1, len(claims) + 1)]


def model_view(model: SourceModel, source: Source | None, query: str, budget_tokens: int = CONTEXT_TOKENS
               ) -> tuple[str, bool]:
    """The model as the solver would see it: live units only, cut to the budget by relevance."""
    units = model.live_units(source) if source is not None else list(model.units)
    kept, cut = select_units(units, query, budget_tokens)
    return model.render(kept), cut


async def fitted_model_view(llm: BoundLLM, model: SourceModel, source: Source | None, query: str,
                            claims: Sequence[str], budget_tokens: int = CONTEXT_TOKENS) -> tuple[str, bool]:
    """``model_view`` cut further, if need be, so the coverage prompt fits the judge's window."""
    units = model.live_units(source) if source is not None else list(model.units)
    kept, cut = await fit_units(llm, units, query, budget_tokens,
                                lambda us: coverage_messages(model.render(us), claims), coverage_reply_tokens(claims))
    return model.render(kept), cut


async def coverage_audit(llm: BoundLLM, run: RunModels, source: Source, tasks: Mapping[str, Task],
                         stages: Sequence[str], concurrency: int = 4, max_tasks: int | None = None, seed: int = 0,
                         budget_tokens: int = CONTEXT_TOKENS) -> list[CoverageRecord]:
    """Per (stage, split seed, test task): required claims, then which the stage's model represents."""
    by_stage = run.stages(source.id)
    plan: list[tuple[str, int, Task, StageModel]] = []
    for split_seed, ids in run.test_ids(source.id).items():
        ids = [i for i in ids if i in tasks]
        if max_tasks:
            ids = sample_items(ids, max_tasks, seed, f"coverage|{source.id}|{split_seed}")
        for stage in stages:
            sm = _matching(by_stage.get(stage, []), split_seed)
            if sm is not None:
                plan += [(stage, split_seed, tasks[i], sm) for i in ids]
    needed = list(dict.fromkeys(t.id for _, _, t, _ in plan))
    claim_lists = await gather_limited([required_claims(llm, tasks[i]) for i in needed], concurrency)
    claims_of = dict(zip(needed, claim_lists))

    async def one(stage: str, split_seed: int, task: Task, sm: StageModel) -> CoverageRecord:
        claims = claims_of[task.id]
        correct = run.correct(METHOD_OF_STAGE.get(stage, ""), source.id, split_seed).get(task.id)
        rec = CoverageRecord(source=source.id, stage=stage, seed=split_seed, task_id=task.id, claims=claims or [],
                             correct=correct, failed=claims is None)
        if not claims:
            return rec
        text, cut = await fitted_model_view(llm, sm.model, source, task.question + "\n" + "\n".join(claims), claims,
                                            budget_tokens)
        got = await represented_claims(llm, text, claims)
        return rec.model_copy(update={"represented": got or [], "failed": got is None, "truncated": cut})

    return await gather_limited([one(*p) for p in plan], concurrency)


def coverage_table(records: Sequence[CoverageRecord]) -> dict[str, dict[str, Any]]:
    """Per (source, stage), and pooled per stage over several sources (``ALL``): share of the
    required claims represented (Figure 4c).

    ``claim_share`` pools all claims (micro); ``task_mean`` averages per-task coverage (macro).
    """
    groups: dict[tuple[str, str], list[CoverageRecord]] = {}
    pooled = len({r.source for r in records}) > 1
    for r in records:
        if r.coverage is not None:
            groups.setdefault((r.source, r.stage), []).append(r)
            if pooled:
                groups.setdefault(("ALL", r.stage), []).append(r)
    out = {}
    for (src, stage), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "ALL", kv[0][0],
                                                                   _stage_rank(kv[0][1]))):
        n_claims = sum(len(r.claims) for r in rs)
        out[f"{src}|{stage}"] = {
            "source": src, "stage": stage, "n_tasks": len(rs), "n_claims": n_claims,
            "claim_share": sum(sum(r.represented) for r in rs) / n_claims if n_claims else None,
            "task_mean": float(np.mean([r.coverage for r in rs])),
            "failed": sum(1 for r in records if r.failed and r.stage == stage and src in ("ALL", r.source)),
        }
    return out


COVERAGE_BINS = ("none", "partial", "all")


def coverage_bin(c: float) -> str:
    return "none" if c <= 0.0 else "all" if c >= 1.0 else "partial"


def point_biserial(coverage: Sequence[float], correct: Sequence[bool]) -> float | None:
    """Pearson correlation of a continuous and a binary variable; None without variance in either."""
    x = np.asarray(coverage, dtype=float)
    y = np.asarray(correct, dtype=float)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def coverage_accuracy(records: Sequence[CoverageRecord]) -> dict[str, dict[str, Any]]:
    """Per stage and pooled (``ALL``): accuracy by coverage bin and the point-biserial r (Figure 4d).

    Pairs each task's coverage under a stage's model with that stage's own variant's verdict on it,
    so only stages whose variant was scored in the run contribute.
    """
    paired = [r for r in records if r.coverage is not None and r.correct is not None]
    out = {}
    for stage in order_stages([r.stage for r in paired]) + (["ALL"] if paired else []):
        rs = [r for r in paired if stage in ("ALL", r.stage)]
        bins = {}
        for b in COVERAGE_BINS:
            inb = [r for r in rs if coverage_bin(r.coverage) == b]  # type: ignore[arg-type]
            bins[b] = {"n": len(inb), "accuracy": sum(r.correct for r in inb) / len(inb) if inb else None}
        r_pb = point_biserial([r.coverage for r in rs], [bool(r.correct) for r in rs])  # type: ignore[misc]
        out[stage] = {"stage": stage, "n": len(rs), "bins": bins, "point_biserial_r": r_pb}
    return out
