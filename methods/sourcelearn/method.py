"""SourceLearn and its ablation variants as registered methods.

All variants share one class: they differ in which stages run after construction. The stages that
the paper shares are shared artifacts in the run's store, so an ablation never redoes them:
M0 once per source and backend (``sourcelearn/m0``), MS once per M0 and self-study settings
(``sourcelearn/ms``, shared by every split). Task-guided learning depends on the split's guidance
tasks, so it lives in the variant's own (per-split) artifact. Each variant's artifact folder holds
its final ``model.json`` and ``stats.json``.

At task time every variant answers the same way: Hybrid RAG top-k evidence plus the activated part
of its source model (``activation.py``), through the shared answer prompt.

``exclude_gold`` (Figure 5b, the paper's "gold document removed from retrieval"): the Hybrid RAG
evidence leaves out the task's gold elements, exactly as ``hybrid_rag`` does, while the source model
is used as learned: it was learned from the whole source, and the study asks what that learned
understanding is worth when task-local retrieval misses the gold document. A task without gold
labels is a scored failure. ``top_k`` = 0 (Figure 5a) answers from the activated model alone.

``top_k`` is a task-time setting only: learning retrieves with settings of its own (``deepen_k``,
``connect_k``, ``task_evidence_k``, ``learn_answer_k``, ``inspect_*``, ``code_*``: the official defaults,
``learn_retrieval.py``), which key the shared MS and every variant's artifact, so one MS serves every k.

Ids the model must copy from its prompt (element ids in readings, excerpt and unit ids in
observations, rewrites and diagnoses) are closed to the ids shown, in the schema sent
(``choices=``): the paper's "copied verbatim and checked against the source" is then enforced at
decoding by constrained decoders and structured-output APIs, and still checked in code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from sourcebench.harness.data import Answer, Source, Task, estimate_tokens
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_write_json
from sourcebench.harness.method import REPORT_NOTES, Command, Context, Entry, LearnContext, Method
from sourcebench.harness.token_budget import measure_chars_per_token

from ..evidence import NO_GOLD, failure, gold_document_elements, load_index, retrieve, shared_index_deviations
from .activation import activate
from .config import SourceLearnConfig
from .construct import construct
from .model import KIND_OF_ROLE, SourceModel

__all__ = [
    "SourceLearn",
    "SourceLearnConfig",
    "SourceLearnLocal",
    "SourceLearnM0",
    "SourceLearnMS",
    "SourceLearnWithoutFailure",
    "SourceLearnWithoutSelf",
]

# bumped when a stage's output can change: 2 = reply lists bounded for the decoder (a small model
# repeated items until max_tokens cut the JSON); self-study 2-3: the planner's keys and arity, 5: a
# planning round proposes at least one action; construct 3 / self-study 6: a unit or note cites an id;
# self-study 7: after an empty round the planner sees its refused proposals, studied entities listed last
# construct 4 / self-study 8: material budgets in the source's measured characters per token
# construct 5 / self-study 9: the official evidence windows (grounder 6,000 characters per element,
# consolidation 1,500 and 60,000 per rewrite) and rewrite capacity (60 units of 400 characters)
# construct 6: folding's share over the entities that state the attribute; self-study 10: learning-time
# retrieval (tiers, code windows, DEEPEN 12 / CONNECT 10), 3 observations per question, the structure gate
# self-study 11: two consecutive idle rounds stop the study, the planner's per-entity digest and cross-entity
# units, the official units shown to inspection and study, a per-file cap of 3 on every source's study retrieval;
# self-study 12: rewrites per entity (then one cross-entity pass per region and one pass per CONNECT pair),
# grounding of every statement against all of the rewrite's evidence, preservation 25 a call with no cap
# construct 7: the official reading (budget of 6 in total, 900-character excerpts in 60k batches, code closure
# windows, soft block budgets, the brief with reading questions for documents only) and mechanical abstraction
# self-study 13: learning-time code windows cut as construction's (the official get_source_segment: no decorators,
# no comment after a constant's value), one function for both
CONSTRUCT_VERSION = "7"
SELFSTUDY_VERSION = "13"
MODEL_FILE = "model.json"
STATS_FILE = "stats.json"

DEVIATIONS = [
    ("Regions of small flat sources (no folders, < large_source_chars) are deterministic blocks (APIBench domain, "
     "then alphabetical, ~10 entities) instead of LLM-proposed ones; LLM blocks are used at >= 100k characters."),
    ("Code entities are public top-level symbols (a class with its methods) plus modules defining none; test "
     "files are not read at construction (they stay retrievable by Hybrid RAG), as in the official compiler."),
    ("A document family whose 900-character section excerpts exceed one reading (GROUP_CHARS, 60,000 characters "
     "of whole files) becomes one entity per reading, each with its own card (official: the readings of one family "
     "fill one entity's cells); the reading's material is truncated deterministically (equal shares per element, "
     "then the tail) only to fit a declared context window."),
    ("A code entity is read through its closure window (official build_window, 16,000 characters, the same "
     "function learning-time retrieval expands a symbol hit with). Its one hop into the classes the entity imports "
     "searches the files of the entity's region, a folder or, for a folder of more than 30 entities, a block of it "
     "(official: the whole top-level folder). A symbol larger than the window has no piece of its own in it (as "
     "officially); where the window is then empty the official entity goes unread, here it is read from its own "
     "text cut to fit. Modules without public symbols are read whole, in consecutive parts of about 16,000 "
     "characters (official: not entities)."),
    ("Reading replies carry list bounds in their schema for constrained decoders: each of mechanisms, "
     "distinctions and decisive_details at most the whole reading budget (6; the prompt sets the budget for the "
     "three together, as officially, and nothing is cut in code), attributes at most 40 (official: unbounded)."),
    ("Partitioning: a document source of >= large_source_chars with folders keeps its folders as regions (a folder "
     "of more than 30 entities split into LLM blocks) instead of one LLM partition of the whole source; every "
     "region of such a source gets the official soft token budget (its character share of 40,000 tokens within "
     "[1,200, 6,000]), told to each reading of the region with the region's entity count."),
    ("Abstraction: a shared rule's 'replaces' never removes a card (official: any cited local unit); a card's "
     "cells are folded mechanically, and a rule replacing a card would drop values no rule states."),
    ("Small context windows, learning: prompts budget source material at the source's own characters per token "
     "(median over its elements in the model's tokenizer when the provider counts exactly, at most 4), and the "
     "entity reading and inspection prompts are rebuilt with less material while they overflow the window in the "
     "model's tokens (one dense element, such as a lock file, cannot overflow it); the paper needs no such fit. "
     "The same fit shrinks the grounders' evidence (the elements a prompt shows share what is left) and a "
     "rewrite's evidence; a rewrite's reply takes at most a third of a declared window (8,192 tokens: 15 units "
     "of the official 60). With no declared window the official sizes hold (the grounder's 6,000 characters per "
     "element, at most 60,000 per prompt; 60,000 characters of evidence per rewrite)."),
    ("Rewrites (consolidation per entity, cross-entity and pair passes, recalibration per entity): the writer "
     "lists the current units it keeps unchanged (`keep`) and names the excerpts a new unit rests on; the "
     "official writer re-emits the entity's units and names none. A kept unit stays as it is, as a re-emitted "
     "one would, without the writer restating it; the named excerpts are a hint only: as officially, every "
     "statement is grounded against all of the rewrite's evidence and anchored where the grounder finds it, "
     "and every unit neither kept nor absorbed goes through the preservation check (25 a call, no cap). "
     "Calls on PhantomWiki (API-like test backend, medium effort, sourcelearn/-m0/-ms, 2 tasks), against the "
     "former one rewrite per region: bundled universe (25 entities) ms_consolidate 3 -> 25, ms_ground 10 -> 36, "
     "ms_preserve 3 -> 20; 51-person universe ms_consolidate 6 -> 55, ms_ground 10 -> 98, ms_preserve 6 -> 46, "
     "mt_ground 5 -> 13; APIBench TorchHub ms_consolidate 11 -> 96, ms_ground 32 -> 167, ms_preserve 11 -> 55. "
     "Effect on scores not measured."),
    ("Failure-guided refinement writes through the shared writer in refine mode (a proposal that absorbs "
     "current units is a replacement, one that absorbs none an addition) instead of the official KNOWN / ADD "
     "/ REPLACE_GROUP reply; the gates are the official ones (each new unit grounded alone against all of the "
     "task's evidence, a replacement refused unless every new unit grounds, an addition the model already "
     "states dropped by word overlap confirmed by entailment, at most 4 units replaced, each only if the new "
     "units entail it or its own evidence no longer supports it). The units that already state a needed claim "
     "(shown beside the 12 nearest) are found by the same word-overlap rule; officially the diagnosis's "
     "per-claim status names them. Not measured."),
    ("Small context windows: besides B (in official m_tokens), the rendered notes must fit what the window leaves "
     "after evidence, reply and prompt reserve, in the solver's own tokens when its provider counts them exactly "
     "(local models), else chars / 4; B shrinks until they do."),
    ("If the router call fails, regions are ordered by word overlap between the question and routing cards, "
     "regions of entities the question names first (official: the row fails)."),
    ("Answer prompt: the notes are given to the benchmark's shared answer prompt, which every method uses, so they "
     "come before the Hybrid RAG excerpts (official: excerpts, then the model) and are laid out by region "
     "('## Region title' and '- [role] statement' lines; official: '- [unit id] statement | scope | conditions'). "
     "Kept so every method on a benchmark answers through the same prompt; the effect of the order is not "
     "measured."),
    ("Units with no region (learned cross-source units) are loaded first when routing, as their own block; the "
     "official model has none."),
    ("Self-study planning: after a round whose proposals were all refused (repeats, unknown keys), the next round "
     "is told which were refused and lists already-studied entities last in its digest; with greedy decoding the "
     "unchanged prompt would repeat the refused reply (from the call cache, even) and end the cycle early. The "
     "digest keeps the official 60,000 characters, or three quarters of the material a declared context window "
     "leaves, whichever is less (the entities left out are named, as officially)."),
    ("Diagnosis drops a needed claim that carries a reference token the source never uses, or a reference string "
     "its cited excerpts do not state (the official code keeps every claim the selector returns): such a claim "
     "is the reference answer, not source knowledge, and SourceBench guarantees that no reference text reaches "
     "the model, a lesson or any prompt but diagnosis'. Counted as claims_dropped_as_leaks in the MT stats."),
    ("An empty Pi1 (no preference reaches the support threshold): the official pipeline builds no M_T for that "
     "seed and evaluates nothing; SourceBench evaluates the model task learning reached (M_local, or MS without "
     "failure-guided refinement), not recalibrated, and marks it: mt_built false with the reason in the MT stage "
     "record, in the artifact's stats.json and in artifact_stats, and the leaderboard notes it for that seed "
     "(the learn stats' report_notes), so a table can tell such a seed from a real MT."),
    "Construction grounding uses the backend model itself (as the official code does).",
    ("Lessons: the domain vocabulary exempt from the restatement check is counted over the split's guidance "
     "questions (official: every question of the source, test questions included; the learner here sees no test "
     "question). Content words drop a generic English stop list (the official list also holds words of its "
     "banking benchmark, such as card, credit and account, which the domain vocabulary covers), and a quote "
     "opens a quoted label only after a non-word character, so the apostrophes of \"Bob's father's\" are none."),
    ("Diagnosis: a needed claim may cite several of the retrieved excerpts (official: one excerpt per needed "
     "claim); at most needed_max (4) claims per task, as officially."),
    ("Self-study inspection reads each entity's full text in one observation call (up to 3 observations), cut to "
     "the material the context window leaves (with no declared window the 32,000 tokens assumed: about 100,000 "
     "characters at 4 a token): a document entity is a family's whole files whose 900-character section excerpts "
     "fit one reading (60,000 characters), a code entity a public symbol with its methods or a part of about "
     "16,000 characters of a module without one; the official code reads an entity's files in chunks of 48,000 "
     "characters (STUDY_READ_CHARS), three observations each."),
    "Free-text fields of structured replies carry a length bound in their schema (statements 300 characters, rewritten ones 400 and refined ones 600 as in the official code, names, conditions and questions 120) that a constrained decoder enforces, so a small model cannot loop inside one string until max_tokens; the paper sets none, and a longer reply from an API model still validates (the official code cuts a rewritten statement at 400).",
]


def mt_report_notes(sm: SourceModel) -> list[str]:
    """What the leaderboard says beside a task-learning cell: with an empty Pi1 no MT was built and the model
    task learning reached is scored in its place (the official pipeline evaluates no model for that seed)."""
    mt = [h for h in sm.history if h.stage == "MT"]
    if not mt or mt[-1].stats.get("mt_built", True):
        return []
    return ["empty Pi1: no MT built (the official pipeline evaluates nothing for this seed); scored: the model "
            "task learning reached, not recalibrated"]


def stage_usage(ctx: Context, before: list[dict[str, Any]] | None = None) -> dict[str, dict[str, float]]:
    """Calls and tokens per stage of this method's phase, minus a ``before`` snapshot."""
    def rows(snap: list[dict[str, Any]]) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for r in snap:
            if r["method"] == ctx.llm.method and r["phase"] == ctx.llm.phase and r["status"] != "cached":
                c = out.setdefault(r["stage"], Counter())
                c.update({"calls": r["calls"], "input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"]})
        return out

    now, old = rows(ctx.llm.llm.ledger.snapshot()), rows(before or [])
    diff = {st: dict(c - old.get(st, Counter())) for st, c in now.items()}
    return {st: d for st, d in diff.items() if d}


def model_summary(sm: SourceModel, source: Source) -> dict[str, Any]:
    """What the learn stats say about a model: size, unit roles/kinds/origins, conditions, history."""
    units = sm.units
    return {
        "stage": sm.stage,
        "n_units": len(units),
        "n_live": len(sm.live_units(source)),
        "n_entities": len(sm.entities),
        "n_regions": len(sm.regions),
        "tokens": sm.tokens(),
        "units_by_role": dict(sorted(Counter(u.role for u in units).items())),
        "units_by_kind": dict(sorted(Counter(KIND_OF_ROLE[u.role] for u in units).items())),
        "units_by_origin": dict(sorted(Counter(u.origin for u in units).items())),
        "share_with_conditions": round(sum(1 for u in units if u.conditions) / len(units), 4) if units else 0.0,
        "n_policy": len(sm.policy),
        "history": [{"stage": h.stage, "n_units": h.n_units} for h in sm.history],
    }


class SourceLearnBase(Method):
    """Construct M0 -> (self-study MS) -> (task-guided MT); which stages run is set per variant."""

    version = "8"  # 2: bounded reply lists in every stage (see CONSTRUCT_VERSION); 3: exact-token window fit;
    # 4: a planning retry shows the refused proposals (SELFSTUDY_VERSION 7); 5: learning prompts budget
    # source material in the source's measured characters per token (harness.token_budget); 6:
    # official evidence windows and rewrite capacity, lessons filtered on the task's own identifiers and
    # restatement (one retry), learning retrieval independent of top_k, the structure gate, Pi0 in Pi1, the
    # first routed region cut to its nearest units, folding over the entities that state an attribute; 7: the
    # official mechanisms: per-entity rewrites grounded over all evidence, failure-guided refinement with the
    # question, the nearest units and the official gates, a sequential task-guided chain, the official study
    # loop and lessons with claim statuses, the official reading and mechanical abstraction, the official
    # answering context and activation budget; 8: learning-time code windows cut as construction's (one function,
    # SELFSTUDY_VERSION 13; diagnosis retrieves through it too)
    Config = SourceLearnConfig
    deviations = [*DEVIATIONS, *shared_index_deviations()]  # its raw evidence is the shared index's top k
    start: ClassVar[str] = "M0"  # the model the variant ends with (M0, MS) or task learning starts from
    task_learning: ClassVar[bool] = False
    shared_stages: ClassVar[tuple[str, ...]] = ("construct_", "ms_")  # M0 and MS, keyed by their stage versions
    local: ClassVar[bool] = True  # failure-guided local refinement
    cross: ClassVar[bool] = True  # lessons, policy and recalibration

    config: SourceLearnConfig

    # -- shared artifacts -----------------------------------------------------------------------
    def m0_inputs(self, source: Source, ctx: Context) -> dict[str, Any]:
        c = self.config
        return {"source": source.id, "fingerprint": source.fingerprint, "model": ctx.llm.spec.settings(),
                "embedder": ctx.embedder.name, "version": CONSTRUCT_VERSION,
                "construct": {"read_budget": c.read_budget, "prototype_min_entities": c.prototype_min_entities,
                              "prototype_min_share": c.prototype_min_share, "block_total_tokens": c.block_total_tokens,
                              "block_cap_tokens": c.block_cap_tokens, "block_min_tokens": c.block_min_tokens,
                              "large_source_chars": c.large_source_chars, "seed": c.seed}}

    def ms_inputs(self, source: Source, ctx: Context) -> dict[str, Any]:
        c = self.config
        return {"m0": ctx.store.key("sourcelearn/m0", self.m0_inputs(source, ctx)), "version": SELFSTUDY_VERSION,
                "selfstudy": {"cycles": c.cycles, "study_actions": c.study_actions,
                              "actions_per_round": c.actions_per_round, "empty_rounds_stop": c.empty_rounds_stop,
                              "observations_per_question": c.observations_per_question, "seed": c.seed},
                # learning-time retrieval; the task-time top_k is deliberately absent (one MS for every k)
                "retrieval": {"deepen_k": c.deepen_k, "connect_k": c.connect_k,
                              "inspect_min_hits": c.inspect_min_hits, "inspect_cand_mult": c.inspect_cand_mult,
                              "code_expand_hits": c.code_expand_hits, "code_window_chars": c.code_window_chars}}

    async def _shared(self, kind: str, inputs: dict[str, Any], ctx: Context,
                      make: Callable[[], Awaitable[SourceModel]]) -> tuple[SourceModel, dict[str, Any]]:
        """Load the shared model for these inputs, building it once; returns (model, build stats).

        Whether this cell built it or found it built is not recorded: that is a fact of the schedule
        (which cell came first), and an artifact must not depend on it (the same artifact at any
        concurrency). The build's ``key`` names the shared model; its costs travel in the stats."""

        async def build(folder: Path) -> dict[str, Any]:
            before = ctx.llm.llm.ledger.snapshot()
            sm = await make()
            usage = stage_usage(ctx, before)
            sm.save(folder / MODEL_FILE)
            return {"usage_by_stage": usage, "n_units": len(sm.units)}

        folder = await ctx.store.get_or_build(kind, inputs, build)
        man = ctx.store.verify(folder)
        return SourceModel.load(folder / MODEL_FILE), {"key": folder.name, **man.get("stats", {})}

    async def m0(self, source: Source, ctx: Context) -> tuple[SourceModel, dict[str, Any]]:
        return await self._shared("sourcelearn/m0", self.m0_inputs(source, ctx), ctx,
                                  lambda: construct(source, ctx, self.config))

    async def ms(self, source: Source, ctx: Context) -> tuple[SourceModel, dict[str, Any]]:
        from .selfstudy import self_learn  # lazy: the stage module is optional for M0-only runs

        m0, m0_info = await self.m0(source, ctx)
        ms, info = await self._shared("sourcelearn/ms", self.ms_inputs(source, ctx), ctx,
                                      lambda: self_learn(m0, source, ctx, self.config))
        info["m0"] = m0_info
        return ms, info

    # -- Method API -----------------------------------------------------------------------------
    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        shared: dict[str, Any] = {}
        ctx.llm.chars_per_token = await measure_chars_per_token(((e.id, e.text) for e in source.elements),
                                                                ctx.llm.count_tokens)
        if self.start == "M0":
            sm, info = await self.m0(source, ctx)
            shared["m0"] = info
        else:
            sm, info = await self.ms(source, ctx)
            shared["m0"] = info.pop("m0")
            shared["ms"] = info
        usage: dict[str, Any] = {}
        for part in shared.values():
            usage.update(part.get("usage_by_stage", {}))
        if self.task_learning:
            from .taskguided import task_learn  # lazy, as above

            before = ctx.llm.llm.ledger.snapshot()
            sm = await task_learn(sm, source, guidance, ctx, self.config, local=self.local, cross=self.cross)
            usage.update(stage_usage(ctx, before))
        sm.save(ctx.workdir / MODEL_FILE)
        stats = {"model": model_summary(sm, source), "shared": shared, "usage_by_stage": usage,
                 "n_guidance": len(guidance) if self.task_learning else 0,
                 "chars_per_token": ctx.llm.chars_per_token}
        mt = [h for h in sm.history if h.stage == "MT"] if self.task_learning else []
        if mt and "mt_built" in mt[-1].stats:  # an empty Pi1 builds no MT: said next to the numbers
            stats["mt_built"] = mt[-1].stats["mt_built"]
            if not stats["mt_built"]:
                stats["mt_not_built"] = mt[-1].stats.get("mt_not_built", "")
                stats[REPORT_NOTES] = mt_report_notes(sm)  # the leaderboard prints it per seed
                ctx.progress("task learning: empty Pi1, no MT built; the model task learning reached is evaluated")
        atomic_write_json(ctx.workdir / STATS_FILE, stats)
        return stats

    def load(self, artifact_dir: Path, ctx: Context) -> SourceModel:
        return SourceModel.load(Path(artifact_dir) / MODEL_FILE)

    async def answer(self, task: Task, state: SourceModel, ctx: Context) -> Answer:
        gold: set[str] = set()
        if self.config.exclude_gold:
            gold = gold_document_elements(task, ctx.source)
            if not gold:
                return failure(NO_GOLD)
        index = await load_index(ctx)
        evidence = retrieve(index, ctx.source, task.question, k=self.config.top_k, exclude=gold)
        ev_text = ctx.benchmark.render_evidence(evidence) if evidence else ""
        notes, act = await activate(state, ctx.source, task, ctx, self.config, evidence_tokens=estimate_tokens(ev_text),
                                    evidence_text=ev_text)
        ans = await ctx.solve(task, evidence, notes=notes)
        ans.metadata["activation"] = act
        return ans

    # -- what reports and protocols read (the optional hooks of harness.method.Method) -------------
    entry_kind: ClassVar[str] = "unit"

    def entries(self, state: SourceModel) -> list[Entry]:
        """One entry per unit of the source model, with the text activation shows."""
        return [Entry(u.id, u.render()) for u in state.units]

    def without(self, state: SourceModel, entry_id: str) -> SourceModel:
        return state.model_copy(update={"units": [u for u in state.units if u.id != entry_id]})

    @classmethod
    def source_regions(cls, run_dir: Path) -> dict[str, dict[str, str]]:
        """The regions of each source's M0 model in the run folder (construction's, which every variant
        starts from): an element belongs to the first region, else the first entity's region, naming it."""
        from .audit import load_run

        try:
            rm = load_run(run_dir)
        except DataError:
            return {}
        models = {m.source_id: m.model for m in rm.models if m.stage == "M0"}
        return {sid: _element_regions(model) for sid, model in models.items()}

    @classmethod
    def artifact_stats(cls, artifact_dir: Path) -> dict[str, Any] | None:
        """``units`` of the saved model; ``observations``: inspection and study notes of the last
        self-directed cycle (None without self-study cycles); ``mt_built`` (variants that recalibrate):
        False when Pi1 came out empty, so the model scored is the one task learning reached, not an MT."""
        path = Path(artifact_dir) / MODEL_FILE
        if not path.is_file():
            return None
        model = SourceModel.load(path)
        obs = None
        ms = [h for h in model.history if h.stage == "MS"]
        if ms and ms[-1].stats.get("cycles"):
            last = ms[-1].stats["cycles"][-1]
            obs = int(last.get("observations_inspect", 0)) + int(last.get("observations_study", 0))
        out: dict[str, Any] = {"units": len(model.units), "observations": obs}
        mt = [h for h in model.history if h.stage == "MT"]
        if mt and "mt_built" in mt[-1].stats:  # False: empty Pi1, the model evaluated is not an MT (see deviations)
            out["mt_built"] = bool(mt[-1].stats["mt_built"])
        return out

    @classmethod
    def cli_commands(cls) -> list[Command]:
        from .audit_cli import COMMAND  # lazy: the audits' imports only when the CLI is built

        return [COMMAND]


def _element_regions(model: SourceModel) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in model.regions:
        for e in r.element_ids:
            out.setdefault(e, r.id)
    for ent in model.entities:
        for e in ent.element_ids:
            out.setdefault(e, ent.region)
    return out


class SourceLearnM0(SourceLearnBase):
    name = "sourcelearn-m0"
    description = "SourceLearn initial source model M0 (construction only) + Hybrid RAG evidence"
    start = "M0"
    shared_stages = ("construct_",)  # its artifact holds M0 only (protocols price what an artifact holds)


class SourceLearnMS(SourceLearnBase):
    name = "sourcelearn-ms"
    description = "SourceLearn after self-directed source learning (MS; = w/o task-guided) + Hybrid RAG evidence"
    start = "MS"


class SourceLearn(SourceLearnBase):
    name = "sourcelearn"
    description = "SourceLearn (MT): construct, self-directed and task-guided source learning, activated under B"
    uses_guidance = True
    start = "MS"
    task_learning = True
    zero_learning_variant = "sourcelearn-ms"  # MS: this pipeline given no guidance task; same reader, same B


class SourceLearnWithoutSelf(SourceLearnBase):
    name = "sourcelearn-wo-self"
    description = "SourceLearn ablation: task-guided learning applied directly to M0 (no self-directed learning)"
    uses_guidance = True
    start = "M0"
    task_learning = True
    shared_stages = ("construct_",)  # M0 only: no self-study
    zero_learning_variant = "sourcelearn-m0"  # its task learning starts from M0: M0 is its untrained artifact


class SourceLearnLocal(SourceLearnBase):
    name = "sourcelearn-wo-cross"
    description = "SourceLearn ablation M_local: failure-guided local refinement only (no lessons, policy, recalibration)"
    uses_guidance = True
    start = "MS"
    task_learning = True
    cross = False
    zero_learning_variant = "sourcelearn-ms"  # MS: what its task learning starts from


class SourceLearnWithoutFailure(SourceLearnBase):
    name = "sourcelearn-wo-failure"
    description = "SourceLearn ablation: MS recalibrated under the task-derived policy, without local refinement"
    uses_guidance = True
    start = "MS"
    task_learning = True
    local = False
    zero_learning_variant = "sourcelearn-ms"  # MS: what its task learning starts from
