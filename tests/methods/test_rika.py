"""RIKA with the scripted model: a ``World`` dictates what each extractor, the atomiser, the router
and the relation judge reply, keyed on the trajectories and claims in the prompt, so the tests can
drive the evidence-based admission state batch by batch and assert its exact evolution.

Every reference answer contains REFSECRET; the judge is a fake that never returns it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.data import Answer, Element, Evidence, Score, Source, Task
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext
from sourcebench.harness.providers import scripted
from sourcebench.methods.rika import RIKA, RIKAState
from sourcebench.methods.rika.admission import update
from sourcebench.methods.rika.atomise import Atom
from sourcebench.methods.rika.claims import Claim, ClaimStore, claim_id
from sourcebench.methods.rika.experience import Trajectory, grounded_spans, stream_order
from sourcebench.methods.rika.relations import Judgement
from sourcebench.methods.rika.render import render
from tests.methods.toybench import toy_bench

ELEMENTS = {
    "carol": Element(id="carol#job", title="Carol / Job", text="The job of Carol is baker. Carol lives in Lyon."),
    "dave": Element(id="dave#job", title="Dave / Job", text="The job of Dave is pilot. Dave lives in Oslo."),
    "alice": Element(id="alice#family", title="Alice / Family", text="The mother of Alice is Carol."),
    "bob": Element(id="bob#family", title="Bob / Family", text="The father of Bob is Dave."),
    "erin": Element(id="erin#hobby", title="Erin / Hobby", text="The hobby of Erin is rowing."),
}
SOURCE = Source(id="toyworld", kind="documents", description="articles about a few people",
                elements=list(ELEMENTS.values()))
GUIDANCE = [Task(id=f"g{i}", source_id=SOURCE.id, question=f"Question number {i}: what is the job of the mother of Alice?",
                 reference=f"REFSECRET-{i}") for i in range(1, 7)]
TEST = Task(id="t1", source_id=SOURCE.id, question="Where does Dave live?", reference="REFSECRET-T")

KINDS = ("factual", "procedural", "conceptual", "metacognitive")


# -- the scripted world ----------------------------------------------------------------------------


class World:
    """Replies per prompt kind. ``items[kind][question]``: claims the extractor of ``kind`` returns for
    the trajectory asking ``question`` (cited with that trajectory's label); ``atoms[text]``: the
    atomiser's split of a claim (default: whole); ``routes[text]`` (default deferred);
    ``relations[(new, stored)]``: the judged relation (default independent)."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, list[dict[str, Any]]]] = {k: {} for k in KINDS}
        self.atoms: dict[str, list[tuple[str, list[str]]]] = {}
        self.routes: dict[str, str] = {}
        self.relations: dict[tuple[str, str], str] = {}
        self.broken_relate: set[str] = set()
        self.answers: dict[str, str] = {}

    def add(self, kind: str, question: str, claim: str, spans: list[str], scope: str = "", parents=(),
            cite_all: bool = False) -> None:
        """``cite_all``: the claim cites every trajectory of the batch, not only the one asking ``question``."""
        self.items[kind].setdefault(question, []).append(
            {"claim": claim, "spans": spans, "scope": scope, "parents": list(parents), "cite_all": cite_all})

    def __call__(self, messages: list[dict[str, str]], schema: dict | None) -> str | None:
        prompt = "\n".join(m["content"] for m in messages)
        for kind in KINDS:
            if f"Task: extract {kind.upper()} knowledge" in prompt:
                return self._extract(kind, prompt)
        if "Task: split one" in prompt:
            text = re.search(r"^Claim \(\w+\): (.+)$", prompt, re.MULTILINE).group(1)
            atoms = self.atoms.get(text, [(text, [])])
            return json.dumps({"atoms": [{"claim": a, "evidence_spans": s} for a, s in atoms]})
        if "Task: route one claim" in prompt:
            text = re.search(r"^Claim \(\w+\): (.+)$", prompt, re.MULTILINE).group(1)
            return json.dumps({"route": self.routes.get(text, "deferred"), "reason": "scripted"})
        if "Task: judge how the NEW claim" in prompt:
            new = re.search(r"^NEW claim: \(\w+\) (.+?)(?: \[scope: .*\])?$", prompt, re.MULTILINE).group(1)
            if new in self.broken_relate:
                return "not json"
            rels = []
            for label, stored in re.findall(r"^(C\d+): \(\w+\) (.+?)(?: \[scope: .*\])?$", prompt, re.MULTILINE):
                if (new, stored) in self.relations:
                    rels.append({"candidate": label, "relation": self.relations[(new, stored)]})
            return json.dumps({"relations": rels})
        if schema is None:  # a guidance or test answer
            q = re.search(r"^Question: (.+)$", messages[-1]["content"], re.MULTILINE).group(1)
            return self.answers.get(q, "Carol")
        return None

    def _extract(self, kind: str, prompt: str) -> str:
        out = []
        found = re.findall(r"^### Trajectory (T\d+)\nQuestion: (.+)$", prompt, re.MULTILINE)
        for label, question in found:
            for it in self.items[kind].get(question, []):
                cited = [lab for lab, _ in found] if it["cite_all"] else [label]
                d = {"claim": it["claim"], "scope": it["scope"], "source_trajectories": cited,
                     "evidence_spans": it["spans"], "grounding_type": "direct",
                     "grounding_explanation": "the quoted feedback shows it"}
                if kind in ("conceptual", "metacognitive"):
                    d["parent_ids"] = it["parents"]
                out.append(d)
        return json.dumps({"claims": out})


# -- fixtures ---------------------------------------------------------------------------------------


def contexts(tmp_path: Path, correct: set[str] | None = None, method: str = "rika"):
    llm = LLM(ModelSpec(name="scripted/unit", max_tokens=256), CallCache(tmp_path / "c.sqlite"), UsageLedger())
    judged: list[str] = []

    async def judge(task: Task, answer: Answer) -> Score:
        judged.append(task.id)
        ok = correct is None or task.id in correct
        return Score(value=float(ok), correct=ok, judge="fake")

    workdir = tmp_path / "artifact"
    workdir.mkdir(exist_ok=True)
    common = {"source": SOURCE, "benchmark": toy_bench(SOURCE, GUIDANCE + [TEST], "RIKA"), "embedder": HashEmbedder(),
              "store": ArtifactStore(tmp_path / "store"), "judge": judge}
    return (LearnContext(llm=llm.bind(method, "learn"), workdir=workdir, **common),
            Context(llm=llm.bind(method, "answer"), **common), llm, judged)


def traj(task_id: str, *keys: str, label: str = "T1", correct: bool = True, answer: str = "Carol") -> Trajectory:
    ev = tuple(Evidence(element_id=ELEMENTS[k].id, title=ELEMENTS[k].title, text=ELEMENTS[k].text) for k in keys)
    return Trajectory(label=label, task_id=task_id, question=f"question of {task_id}", evidence=ev, answer=answer,
                      correct=correct, value=float(correct))


def run_batch(method: RIKA, store: ClaimStore, trajectories: list[Trajectory], batch: int, ctx) -> dict:
    return asyncio.run(method.update_batch(store, trajectories, batch, ctx))


def only(store: ClaimStore, text: str) -> Claim:
    found = [c for c in store.claims.values() if c.text == text]
    assert len(found) == 1, [c.text for c in store.claims.values()]
    return found[0]


def calls(marker: str) -> list[dict]:
    return [c for c in scripted.CALLS if any(marker in m["content"] for m in c["messages"])]


@pytest.fixture
def world() -> World:
    w = World()
    scripted.set_script(w)
    return w


# -- acceptance: admission, forgetting, contradiction, propagation ----------------------------------

GENERAL = "Each person in Toyworld has exactly one job."


def test_deferred_claim_is_admitted_only_at_the_third_supporting_batch(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    paraphrase = "Every Toyworld resident holds a single job."
    world.add("factual", "question of g1", GENERAL, ["The job of Carol is baker"])
    world.add("factual", "question of g2", paraphrase, ["The job of Dave is pilot"])
    world.relations[(paraphrase, GENERAL)] = "equivalent"
    world.add("factual", "question of g3", GENERAL, ["The job of Carol is baker"])
    seen = []
    for b, (tid, key) in enumerate([("g1", "carol"), ("g2", "dave"), ("g3", "carol")], 1):
        run_batch(method, store, [traj(tid, key)], b, lctx)
        c = only(store, GENERAL)
        seen.append((c.evidence, c.admitted, render(store.admitted())))
    assert [(e, a) for e, a, _ in seen] == [(1, False), (2, False), (3, True)]
    assert seen[0][2] == "" and seen[1][2] == "" and GENERAL in seen[2][2]
    c = only(store, GENERAL)
    assert c.route == "deferred" and c.supporters == ["g1", "g2", "g3"] and c.batches == [1, 2, 3]
    assert c.aliases == [paraphrase] and c.source_trajectories == ["g1", "g2", "g3"]
    assert [h.batch for h in c.history] == [1, 2, 3] and c.below == 0
    assert len(store.claims) == 1  # the paraphrase was merged, not stored twice


def test_a_claim_below_threshold_for_three_batches_is_forgotten(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    world.add("factual", "question of g1", GENERAL, ["The job of Carol is baker"])
    world.add("factual", "question of g1", "The job of Carol is baker.", ["The job of Carol is baker"])
    world.routes["The job of Carol is baker."] = "immediate"
    run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    cid = only(store, GENERAL).id
    below = []
    for b, tid in [(2, "g2"), (3, "g3")]:
        run_batch(method, store, [traj(tid, "erin")], b, lctx)  # nothing extracted
        below.append(store.claims[cid].below)
    assert below == [1, 2] and not store.claims[cid].admitted  # pending, still in the state
    run_batch(method, store, [traj("g4", "erin")], 4, lctx)
    assert cid not in store.claims
    assert [(f.id, f.forgotten_batch, f.evidence) for f in store.forgotten] == [(cid, 4, 1)]
    # the admitted immediate claim stays: it is at its threshold, so its counter never runs
    assert only(store, "The job of Carol is baker.").admitted


def test_support_that_does_not_reach_the_threshold_does_not_reset_the_window(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    for tid in ("g1", "g2", "g4"):
        world.add("factual", f"question of {tid}", GENERAL, ["The job of Carol is baker"])
    run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    run_batch(method, store, [traj("g2", "carol")], 2, lctx)
    run_batch(method, store, [traj("g3", "erin")], 3, lctx)
    assert only(store, GENERAL).below == 2 and only(store, GENERAL).evidence == 2
    run_batch(method, store, [traj("g4", "carol")], 4, lctx)  # e = 3 reaches k: admitted, counter reset
    assert only(store, GENERAL).admitted and only(store, GENERAL).below == 0


def test_a_contradicting_trajectory_lowers_evidence(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    baker, pilot = "Carol works as a baker.", "Carol works as a pilot."
    for tid in ("g1", "g2", "g3"):
        world.add("factual", f"question of {tid}", GENERAL, ["The job of Carol is baker"])
    world.add("factual", "question of g3", baker, ["The job of Carol is baker"])
    world.routes[baker] = "immediate"
    world.add("factual", "question of g4", pilot, ["The job of Dave is pilot"])
    world.routes[pilot] = "immediate"
    world.relations[(pilot, baker)] = "contradict"
    world.relations[(pilot, GENERAL)] = "contradict"
    run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    run_batch(method, store, [traj("g2", "carol")], 2, lctx)
    run_batch(method, store, [traj("g3", "carol")], 3, lctx)
    assert only(store, GENERAL).evidence == 3 and only(store, GENERAL).admitted
    assert only(store, baker).evidence == 1 and only(store, baker).admitted
    log = run_batch(method, store, [traj("g4", "dave")], 4, lctx)
    general, b = only(store, GENERAL), only(store, baker)
    assert general.evidence == 2 and general.opposers == ["g4"] and not general.admitted
    assert b.evidence == 0 and not b.admitted and b.below == 1  # immediate: 1 -> 0 makes it pending
    assert general.history[-1].batch == 4 and general.history[-1].oppose == ["g4"]
    assert log["state"]["opposition_units"] == 2
    doc = render(store.admitted())
    assert pilot in doc and baker not in doc and GENERAL not in doc
    assert any(e.kind == "contradicts" and {e.src, e.dst} == {only(store, pilot).id, b.id} for e in store.edges)


def test_support_flows_from_specific_to_general_claims_only(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    specific = "Dave works as a pilot."
    world.add("factual", "question of g1", GENERAL, ["The job of Carol is baker"])
    world.add("factual", "question of g2", specific, ["The job of Dave is pilot"])
    world.routes[specific] = "immediate"
    world.relations[(specific, GENERAL)] = "specialise"
    world.add("factual", "question of g3", GENERAL, ["The job of Carol is baker"])
    world.add("factual", "question of g4", specific, ["The job of Dave is pilot"])
    trace = []
    for b, (tid, key) in enumerate([("g1", "carol"), ("g2", "dave"), ("g3", "carol"), ("g4", "dave")], 1):
        run_batch(method, store, [traj(tid, key)], b, lctx)
        s = [c for c in store.claims.values() if c.text == specific]
        trace.append((only(store, GENERAL).evidence, s[0].evidence if s else None))
    # batch 2: the specific claim supports the general one; batch 3: the general one does not support the
    # specific one; batch 4: the specific one's new support flows up again
    assert trace == [(1, None), (2, 1), (3, 1), (4, 2)]
    s, g = only(store, specific), only(store, GENERAL)
    assert [(e.kind, e.src, e.dst) for e in store.edges] == [("entails", s.id, g.id)]
    assert g.supporters == ["g1", "g2", "g3", "g4"] and s.supporters == ["g2", "g4"]
    assert g.admitted and g.source_trajectories == ["g1", "g3"]  # provenance: only where it was derived


def test_generalise_points_the_edge_from_the_stored_claim_to_the_new_one(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    specific = "Dave works as a pilot."
    world.add("factual", "question of g1", specific, ["The job of Dave is pilot"])
    world.add("factual", "question of g2", GENERAL, ["The job of Carol is baker"])
    world.relations[(GENERAL, specific)] = "generalise"
    world.add("factual", "question of g3", specific, ["The job of Dave is pilot"])
    for b, (tid, key) in enumerate([("g1", "dave"), ("g2", "carol"), ("g3", "dave")], 1):
        run_batch(method, store, [traj(tid, key)], b, lctx)
    s, g = only(store, specific), only(store, GENERAL)
    assert [(e.kind, e.src, e.dst) for e in store.edges] == [("entails", s.id, g.id)]
    assert g.supporters == ["g2", "g3"]  # g1 came before the edge existed: evidence is never back-dated


def test_immediate_claims_are_admitted_at_threshold_one(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    fact = "The job of Carol is baker."
    world.add("factual", "question of g1", fact, ["The job of Carol is baker"], scope="Carol's article")
    world.routes[fact] = "immediate"
    log = run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    c = only(store, fact)
    assert c.route == "immediate" and c.evidence == 1 and c.admitted
    assert log["routes"] == {"immediate": 1} and log["state"]["n_admitted"] == 1
    assert render(store.admitted()) == "## Factual knowledge\n- The job of Carol is baker. (scope: Carol's article)"


def test_an_equivalent_claim_routed_differently_falls_back_to_deferred(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    fact, broad = "The job of Carol is baker.", "Carol has the job of baker."
    world.add("factual", "question of g1", fact, ["The job of Carol is baker"])
    world.routes[fact] = "immediate"
    world.add("factual", "question of g2", broad, ["The job of Carol is baker"])
    world.relations[(broad, fact)] = "equivalent"
    run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    assert only(store, fact).admitted
    run_batch(method, store, [traj("g2", "carol")], 2, lctx)
    c = only(store, fact)
    assert c.route == "deferred" and c.evidence == 2 and not c.admitted and c.aliases == [broad]


# -- extraction, grounding gate, atomisation, relations ---------------------------------------------


def test_hierarchical_extraction_conditions_second_order_on_first_order_claims(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    q1, q2 = "question of g1", "question of g2"
    world.add("factual", q1, "The job of Carol is baker.", ["The job of Carol is baker"])
    world.add("factual", q2, "The job of Dave is pilot.", ["The job of Dave is pilot"])
    world.add("procedural", q1, "Read the job section of the person named.", ["judged correct"])
    world.add("conceptual", q1, "Job sections state one job per person.", [], parents=["F1", "F2"])
    world.add("conceptual", q1, "Claim with a made-up parent.", [], parents=["F9"])
    world.add("metacognitive", q1, "Check the job section before answering job questions.", [], parents=["P1"])
    log = run_batch(method, store, [traj("g1", "carol", label="T1"), traj("g2", "dave", label="T2")], 1, lctx)
    concept_prompt = calls("Task: extract CONCEPTUAL")[0]["messages"][-1]["content"]
    assert "F1 (from T1): The job of Carol is baker." in concept_prompt and "F2 (from T2)" in concept_prompt
    assert "Read the job section" not in concept_prompt  # procedural claims go to the metacognitive extractor
    meta_prompt = calls("Task: extract METACOGNITIVE")[0]["messages"][-1]["content"]
    assert "P1 (from T1): Read the job section of the person named." in meta_prompt
    assert log["kept"] == {"factual": 2, "procedural": 1, "conceptual": 1, "metacognitive": 1}
    assert log["dropped"] == {"conceptual/no_parent": 1}
    concept = only(store, "Job sections state one job per person.")
    assert concept.type == "conceptual" and concept.grounding == "indirect"
    assert concept.source_trajectories == ["g1", "g2"]  # inherited from its factual parents
    assert concept.parents == [only(store, "The job of Carol is baker.").id, only(store, "The job of Dave is pilot.").id]
    assert concept.evidence == 2  # one unit per trajectory
    meta = only(store, "Check the job section before answering job questions.")
    assert meta.parents == [only(store, "Read the job section of the person named.").id]


def test_ungrounded_claims_are_dropped_and_second_order_calls_skipped(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    q = "question of g1"
    world.add("factual", q, "Carol flies zeppelins.", ["zeppelin"])  # only in the answer, not feedback
    world.add("factual", q, "Carol lives in Paris.", ["Carol lives in Paris"])  # not in any excerpt
    world.add("factual", q, "Citing nothing.", [])
    world.add("conceptual", q, "Should never be asked for.", [], parents=["F1"])
    log = run_batch(method, store, [traj("g1", "carol", answer="a zeppelin")], 1, lctx)
    assert log["kept"]["factual"] == 0 and log["dropped"] == {"factual/ungrounded": 3}
    assert not calls("Task: extract CONCEPTUAL") and not store.claims
    assert not calls("Task: split one")  # nothing to atomise, route or relate


def test_spans_must_be_feedback_verbatim():
    fb = traj("g1", "carol").feedback(400)
    assert grounded_spans(['"The job of  Carol is baker."', "judged correct", "Carol is a baker", "ba"], fb) == [
        '"The job of Carol is baker."', "judged correct"]


def test_atomisation_splits_compound_claims_and_grounds_each_atom(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    compound = "Carol is a baker and Dave is a pilot, and Carol likes jazz."
    world.add("factual", "question of g1", compound, ["The job of Carol is baker", "The job of Dave is pilot"],
              cite_all=True)
    world.atoms[compound] = [("Carol is a baker.", ["The job of Carol is baker"]),
                             ("Dave is a pilot.", ["The job of Dave is pilot"]),
                             ("Carol likes jazz.", ["Carol likes jazz"])]
    log = run_batch(method, store, [traj("g1", "carol", label="T1"), traj("g2", "dave", label="T2")], 1, lctx)
    assert sorted(c.text for c in store.claims.values()) == ["Carol is a baker.", "Dave is a pilot."]
    assert only(store, "Carol is a baker.").source_trajectories == ["g1"]
    assert only(store, "Dave is a pilot.").source_trajectories == ["g2"]
    assert log["atoms"] == {"split": 1, "ungrounded_atom": 1}  # jazz is grounded by no feedback
    split_calls = calls("Task: split one")
    assert len(split_calls) == 1 and "Claim (factual): " + compound in split_calls[0]["messages"][-1]["content"]


def test_a_failed_relation_judgment_withholds_the_atom(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    world.add("factual", "question of g1", GENERAL, ["The job of Carol is baker"])
    world.add("factual", "question of g2", "Dave works as a pilot.", ["The job of Dave is pilot"])
    world.broken_relate.add("Dave works as a pilot.")
    run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    log = run_batch(method, store, [traj("g2", "dave")], 2, lctx)
    assert log["relations"] == {"withheld": 1} and log["state"]["integration"] == {"withheld": 1}
    assert [c.text for c in store.claims.values()] == [GENERAL]
    failures = lctx.llm.llm.ledger.drain()[1]
    assert any(f["stage"] == "relate" for f in failures)


def test_relation_candidates_include_earlier_atoms_of_the_same_batch(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA(), ClaimStore()
    a, b = "Carol works as a baker.", "Carol bakes bread for a living."
    world.add("factual", "question of g1", a, ["The job of Carol is baker"])
    world.add("factual", "question of g2", b, ["The job of Carol is baker"])
    world.relations[(b, a)] = "equivalent"
    run_batch(method, store, [traj("g1", "carol", label="T1"), traj("g2", "carol", label="T2")], 1, lctx)
    c = only(store, a)
    assert len(store.claims) == 1 and c.aliases == [b] and c.supporters == ["g1", "g2"] and c.evidence == 2


def test_routing_ablation_forces_one_route_without_calls(tmp_path, world):
    lctx, _, _, _ = contexts(tmp_path)
    method, store = RIKA({"routing": "immediate"}), ClaimStore()
    world.add("factual", "question of g1", GENERAL, ["The job of Carol is baker"])
    run_batch(method, store, [traj("g1", "carol")], 1, lctx)
    assert not calls("Task: route one claim")
    assert only(store, GENERAL).route == "immediate" and only(store, GENERAL).admitted


# -- the state in plain code ------------------------------------------------------------------------


def _atom(text: str, tid: str, route: str = "deferred") -> Atom:
    return Atom("factual", text, "", (tid,), ("span",), "direct", "x", "F1", route=route)


def test_entailment_graph_stays_acyclic_and_forgetting_keeps_transitive_support():
    store = ClaimStore()
    update(store, [_atom("a", "t1"), _atom("b", "t1"), _atom("c", "t1")],
           [[], [Judgement(("atom", 0), "generalise")], [Judgement(("atom", 1), "generalise")]], 1, k=3, m=3)
    a, b, c = (only(store, x) for x in "abc")
    assert store.generalisations(a.id) == {b.id, c.id}
    assert not store.add_edge("entails", c.id, a.id, 1, [])  # would close a cycle
    store.remove(b.id, 2)
    assert store.generalisations(a.id) == {c.id} and b.id not in {e.src for e in store.edges} | {e.dst for e in store.edges}
    update(store, [_atom("a", "t9")], [[Judgement(("claim", a.id), "equivalent")]], 3, k=3, m=3)
    assert "t9" in store.claims[c.id].supporters  # still flows through the removed middle claim


def test_claim_ids_are_stable_and_content_derived():
    assert claim_id("factual", "The job of Carol is baker.", "") == claim_id("factual", "the job of  carol is baker", "")
    assert claim_id("factual", "x", "") != claim_id("conceptual", "x", "")
    assert claim_id("factual", "x", "Oslo") != claim_id("factual", "x", "Lyon")


# -- rendering ---------------------------------------------------------------------------------------


def _claim(i: int, kind: str, text: str, scope: str = "") -> Claim:
    return Claim(id=f"{kind[:4]}-{i:010d}", type=kind, text=text, scope=scope, route="deferred", created_batch=1,
                 seq=i, supporters=["g1", "g2", "g3"], admitted=True, route_reason="SECRET-ROUTE-REASON",
                 evidence_spans=["SECRET-SPAN"], grounding_explanation="SECRET-EXPLANATION")


def test_rendering_is_deterministic_grouped_and_metadata_free():
    claims = [_claim(3, "metacognitive", "Check sections first."), _claim(0, "factual", "Carol is a baker.", "Lyon"),
              _claim(2, "procedural", "Read the job section."), _claim(1, "factual", "Dave is a pilot.")]
    doc = render(claims)
    assert doc == render(list(reversed(claims))) == render(sorted(claims, key=lambda c: c.text))
    assert doc == ("## Factual knowledge\n- Carol is a baker. (scope: Lyon)\n- Dave is a pilot.\n\n"
                   "## Procedural knowledge\n- Read the job section.\n\n"
                   "## Metacognitive knowledge\n- Check sections first.")
    for secret in ["fact-", "meta-", "SECRET", "deferred", "g1", "evidence", "3"]:
        assert secret not in doc
    assert render([]) == ""


# -- the method end to end ---------------------------------------------------------------------------


def _world_for_learning(world: World) -> None:
    for t in GUIDANCE:
        world.add("factual", t.question, "The mother of Alice is Carol.", ["The mother of Alice is Carol"])
        world.add("procedural", t.question, "For a job of a relative, read the family section then the job section.",
                  ["judged correct"])
    world.routes["The mother of Alice is Carol."] = "immediate"


def learn(tmp_path: Path, world: World, correct=None, **config):
    _world_for_learning(world)
    method = RIKA(config)
    lctx, tctx, llm, judged = contexts(tmp_path, correct)
    stats = asyncio.run(method.learn(SOURCE, GUIDANCE, lctx))
    return method, stats, lctx, tctx, llm, judged


def test_learning_runs_the_stream_in_batches_and_injects_admitted_knowledge(tmp_path, world):
    _, stats, lctx, _, _, judged = learn(tmp_path, world)
    assert sorted(judged) == sorted(t.id for t in GUIDANCE)
    assert stats["n_batches"] == 2 and stats["n_guidance"] == 6
    data = json.loads((lctx.workdir / "claims.json").read_text())
    batches = [b["tasks"] for b in data["batches"]]
    assert [len(b) for b in batches] == [5, 1]
    assert [t for b in batches for t in b] == stream_order([t.id for t in GUIDANCE], 0)
    answers = [c for c in scripted.CALLS if c["schema"] is None]
    first = [c for c in answers if any(t.question in c["messages"][-1]["content"]
                                       for t in GUIDANCE if t.id in batches[0])]
    later = [c for c in answers if c not in first]
    assert len(first) == 5 and len(later) == 1
    assert all("Knowledge about the source" not in c["messages"][-1]["content"] for c in first)
    assert "- The mother of Alice is Carol." in later[0]["messages"][-1]["content"]
    fact = next(c for c in data["store"]["claims"].values() if c["text"] == "The mother of Alice is Carol.")
    proc = next(c for c in data["store"]["claims"].values() if c["type"] == "procedural")
    assert fact["admitted"] and len(fact["supporters"]) == 6
    assert proc["route"] == "deferred" and proc["admitted"]  # six trajectories corroborated it
    assert (lctx.workdir / "knowledge.md").read_text().strip() == render(
        [Claim.model_validate(c) for c in data["store"]["claims"].values() if c["admitted"]])
    assert data["stats"] == stats


def test_test_time_prompt_has_the_knowledge_next_to_hybrid_rag_evidence(tmp_path, world):
    method, _, lctx, tctx, _, _ = learn(tmp_path, world)
    state = method.load(lctx.workdir, tctx)
    assert isinstance(state, RIKAState) and len(state.claims) == 2
    n = len(scripted.CALLS)
    ans = asyncio.run(method.answer(TEST, state, tctx))
    assert len(scripted.CALLS) == n + 1
    user = scripted.CALLS[-1]["messages"][-1]["content"]
    assert "Knowledge about the source:\n" + state.notes in user and "## Procedural knowledge" in user
    assert "Source excerpts:" in user and "dave#job" in user
    assert ans.metadata["n_claims"] == 2 and len(ans.evidence_ids) == len(SOURCE.elements)


def test_entries_are_addressable_one_at_a_time(tmp_path, world):
    method, _, lctx, tctx, _, _ = learn(tmp_path, world)
    state = method.load(lctx.workdir, tctx)
    entries = method.entries(state)
    assert [t for _, t in entries] == ["The mother of Alice is Carol.",
                                       "For a job of a relative, read the family section then the job section."]
    fact_id = entries[0][0]
    smaller = method.without(state, fact_id)
    assert method.entries(smaller) == entries[1:]
    assert "The mother of Alice is Carol." not in smaller.notes and entries[1][1] in smaller.notes
    assert method.entries(state) == entries  # the original state is untouched
    with pytest.raises(KeyError):
        method.without(state, "fact-unknown")


def test_reference_never_reaches_a_prompt_or_the_artifact(tmp_path, world):
    learn(tmp_path, world, correct={"g1", "g3"})
    assert scripted.CALLS
    for call in scripted.CALLS:
        assert all("REFSECRET" not in m["content"] for m in call["messages"])
    files = [f for f in (tmp_path / "artifact").rglob("*") if f.is_file()]
    assert {f.name for f in files} == {"claims.json", "knowledge.md", "trajectories.json"}
    for f in files:
        assert "REFSECRET" not in f.read_text()
    records = json.loads((tmp_path / "artifact" / "trajectories.json").read_text())
    assert {r["task_id"]: r["correct"] for r in records} == {t.id: t.id in {"g1", "g3"} for t in GUIDANCE}


def test_learning_is_deterministic(tmp_path, world):
    learn(tmp_path / "a", world)
    world2 = World()
    scripted.set_script(world2)
    learn(tmp_path / "b", world2)
    for name in ("claims.json", "knowledge.md", "trajectories.json"):
        assert (tmp_path / "a" / "artifact" / name).read_text() == (tmp_path / "b" / "artifact" / name).read_text()


def test_costs_are_recorded_by_stage(tmp_path, world):
    _, _, _, _, llm, _ = learn(tmp_path, world)
    stages: dict[str, int] = {}
    for r in llm.ledger.snapshot():
        if r["phase"] == "learn":
            stages[r["stage"]] = stages.get(r["stage"], 0) + r["calls"]
    assert stages["guidance_answer"] == 6
    # four extractor calls per batch (second-order ones run because first-order claims survived)
    assert all(stages[f"extract_{k}"] == 2 for k in KINDS)
    assert stages["atomise"] == stages["route"] == 12  # one per claim / atom: 2 claims x 6 trajectories
    assert "relate" in stages  # the procedural atom is judged against the stored fact


def test_learning_needs_the_judge(tmp_path):
    lctx, _, _, _ = contexts(tmp_path)
    lctx.judge = None
    with pytest.raises(Exception, match="judge"):
        asyncio.run(RIKA().learn(SOURCE, GUIDANCE, lctx))


def test_config_rejects_unknown_keys_and_orders_types():
    with pytest.raises(ValidationError):
        RIKA({"nope": 1})
    assert RIKA({"knowledge_types": ["procedural", "factual"]}).config.knowledge_types == ["factual", "procedural"]


def test_learn_more_continues_the_stream_as_one_learning_run_would(tmp_path, world):
    """Prequential evaluation uses learn_more: block by block must equal the whole stream at once."""
    _world_for_learning(world)
    order = [t for i in stream_order([t.id for t in GUIDANCE], 0) for t in GUIDANCE if t.id == i]
    method = RIKA()
    lctx, tctx, _, _ = contexts(tmp_path / "whole")
    asyncio.run(method.learn(SOURCE, GUIDANCE, lctx))
    whole = method.load(lctx.workdir, tctx)

    lctx2, tctx2, _, _ = contexts(tmp_path / "blocks")
    state = method.load(lctx.workdir, tctx)  # any state: learn_more must not change it
    empty = RIKAState(claims=(), notes="")
    first = asyncio.run(method.learn_more(empty, order[:5], lctx2))
    assert first.store is not None and first.store.batch == 1 and empty.store is None
    before = first.store.model_dump()
    second = asyncio.run(method.learn_more(first, order[5:], lctx2))
    assert first.store.model_dump() == before  # the earlier state is untouched
    assert second.store.batch == 2 and second.notes == whole.notes
    assert second.store.model_dump() == whole.store.model_dump()
    assert method.entries(second) == method.entries(whole) and method.entries(state) == method.entries(whole)
