"""Data some tables need beyond the scored rows, derived once per run folder into ``reproduce/``.

Deriving it embeds questions, builds or loads the Hybrid RAG index and loads saved models, so it runs
in the application tier with the rest of ``sourcebench reproduce``; the tables in ``reports/`` only
read the files written here (their names: ``reports.results.DERIVED``).

- ``matched_<method>.json`` (Table 2): the prompt tokens a reference method used on every test task,
  which the budget-matched counterparts read up to (the ``match_context_file`` option of Hybrid RAG,
  RAPTOR and HippoRAG 2; ``methods.evidence``).
- ``regions.json`` (Table 5): for every test and guidance task of every split, the source region it
  touches, and whether a test task's region overlaps any guidance task's (seen) or not (unseen).
- ``cycles.json`` (Table 6): units and observations of the model after c self-directed cycles.

Region of a task (Table 5), precisely:

1. Anchor elements: the task's gold evidence (``task.metadata["gold_element_ids"]``, else the
   elements of its ``gold_doc_ids``) when the benchmark labels it; otherwise the top ``anchor_k`` elements of the Hybrid RAG ranking for the
   question alone (the same index and per-file cap as Hybrid RAG; never the reference answer), so
   guidance and test tasks are placed by the same reference-free rule.
2. Regions: the SourceLearn regions (of the source's M0 model in the run folder: LLM blocks, folders
   or deterministic blocks, read through ``Method.source_regions`` of the ``regions_from`` method)
   that contain an anchor; an element in no region stands for itself. Without an M0 model the
   regions are the anchor elements themselves (``granularity: "elements"``).
3. A test task is *seen* in a split if its regions intersect the union of the regions of that
   split's guidance tasks (those the methods learned from, after ``guidance_limit``), else *unseen*.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sourcebench.harness.conventions import (
    HYBRID_INDEX_KIND,
    context_key,
    gold_document_elements,
    gold_element_ids,
    index_inputs,
)
from sourcebench.harness.data import Source, Task
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_write_json, read_json
from sourcebench.harness.registry import get_method_class
from sourcebench.harness.runner import limit_tasks
from sourcebench.reports.results import DERIVED
from sourcebench.reports.rundata import load_run

REGION_DEFINITION = (
    "anchors = gold evidence elements if labelled, else the top-k Hybrid RAG elements for the question; "
    "regions = SourceLearn M0 regions containing an anchor (elements when no M0 model); a test task is seen "
    "if its regions intersect those of any guidance task of the same split"
)


# ------------------------------------------------------------------------------------- Table 2

def matched_targets(run_dir: Path, reference: str) -> tuple[dict[str, int], int]:
    """(targets, missing): the reference's prompt tokens per ``source\\tseed\\ttask`` key, and how many
    test tasks scored by other methods of the folder it has not scored yet."""
    data = load_run(run_dir)
    targets = {context_key(r["source"], int(r["seed"]), str(r["task_id"])): int(r.get("context_tokens") or 0)
               for r in data.results if r["method"] == reference}
    others = {context_key(r["source"], int(r["seed"]), str(r["task_id"])) for r in data.results
              if r["method"] != reference and "@matched=" not in r["method"]}
    return targets, len(others - set(targets))


def write_matched(run_dir: Path, reference: str) -> tuple[Path, int]:
    targets, missing = matched_targets(run_dir, reference)
    path = Path(run_dir) / DERIVED / f"matched_{reference}.json"
    atomic_write_json(path, {"reference": reference, "unit": "prompt tokens (characters / 4)", "targets": targets})
    return path.resolve(), missing


# ------------------------------------------------------------------------------------- Table 5

def gold_ids(task: Task, source: Source) -> list[str]:
    """Labelled gold elements; else every element of the labelled gold documents; else none."""
    return sorted(gold_element_ids(task) or gold_document_elements(task, source))


def _index(run_dir: Path, source: Source, embedder_spec: str, recorded: str):
    """The Hybrid RAG index of the run (loaded from its artifacts, or built the same way)."""
    from sourcebench.harness.artifacts import ArtifactStore
    from sourcebench.harness.embeddings import get_embedder
    from sourcebench.harness.retrieval import HybridIndex

    embedder = get_embedder(embedder_spec, run_dir / "cache")
    if recorded and embedder.name != recorded:
        raise DataError(f"{run_dir}: the run used embedder {recorded}, the config gives {embedder.name}")
    store = ArtifactStore(run_dir / "artifacts")
    inputs = index_inputs(source, embedder.name)
    if store.exists(HYBRID_INDEX_KIND, inputs):
        return HybridIndex.load(store.path(HYBRID_INDEX_KIND, inputs), source.elements, embedder)

    async def build(folder: Path) -> dict[str, Any]:
        HybridIndex(source.elements, embedder).save(folder)
        return {"n_elements": len(source.elements)}

    folder = asyncio.run(store.get_or_build(HYBRID_INDEX_KIND, inputs, build))
    return HybridIndex.load(folder, source.elements, embedder)


def task_anchors(task: Task, index: Any, source: Source, k: int) -> tuple[list[str], str]:
    gold = gold_ids(task, source)
    if gold:
        return gold, "gold"
    cap = 3 if source.kind == "code" else None
    return [e.element_id for e in index.search(task.question, k=k, per_file_cap=cap)], "retrieved"


class _Placer:
    """Anchors and regions of the tasks of one source (anchors computed once per task)."""

    def __init__(self, index: Any, source: Source, region_of: dict[str, str], k: int):
        self.index, self.source, self.region_of, self.k = index, source, region_of, k
        self.cache: dict[str, tuple[list[str], str]] = {}

    def place(self, t: Task) -> tuple[list[str], list[str], str]:
        if t.id not in self.cache:
            self.cache[t.id] = task_anchors(t, self.index, self.source, self.k)
        anchors, how = self.cache[t.id]
        return anchors, sorted({self.region_of.get(e, e) for e in anchors}), how


def derive_regions(run_dir: Path, bench: Any, embedder_spec: str, anchor_k: int,
                   guidance_limit: int | None, regions_from: str = "sourcelearn-m0") -> dict[str, Any]:
    """Write ``reproduce/regions.json`` for every source and split seed that has scored test rows.

    ``regions_from``: the registered method whose ``source_regions`` partition the sources."""
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    partition = get_method_class(regions_from).source_regions(run_dir)
    tested: dict[str, dict[int, set[str]]] = {}
    for r in data.results:
        tested.setdefault(r["source"], {}).setdefault(int(r["seed"]), set()).add(str(r["task_id"]))
    out: dict[str, Any] = {"definition": REGION_DEFINITION, "anchor_k": anchor_k, "granularity": {}, "sources": {}}
    for sid in sorted(tested):
        source = bench.load_source(sid)
        tasks = {t.id: t for t in bench.load_tasks(sid)}
        index = _index(run_dir, source, embedder_spec, str(data.run.get("embedder") or ""))
        placer = _Placer(index, source, partition.get(sid, {}), anchor_k)
        out["granularity"][sid] = "sourcelearn-regions" if sid in partition else "elements"
        per_seed: dict[str, Any] = {}
        for seed, test_ids in sorted(tested[sid].items()):
            man_path = run_dir / "splits" / bench.name / sid / f"seed{seed}.json"
            if not man_path.is_file():
                raise DataError(f"{man_path}: split manifest missing")
            man = read_json(man_path)
            guidance = limit_tasks([tasks[i] for i in man["guidance_ids"] if i in tasks], guidance_limit, seed)
            g_regions: set[str] = set()
            for g in guidance:
                g_regions |= set(placer.place(g)[1])
            tests = {}
            for tid in sorted(test_ids):
                if tid not in tasks:
                    continue
                anchors, regions, how = placer.place(tasks[tid])
                tests[tid] = {"anchors": anchors, "anchor": how, "regions": regions,
                              "seen": bool(set(regions) & g_regions)}
            per_seed[str(seed)] = {"n_guidance": len(guidance), "guidance_regions": sorted(g_regions), "tests": tests}
        out["sources"][sid] = per_seed
    atomic_write_json(run_dir / DERIVED / "regions.json", out)
    return out


# ------------------------------------------------------------------------------------- Table 6

def derive_cycles(run_dir: Path, aliases: dict[int, str]) -> dict[str, Any]:
    """Write ``reproduce/cycles.json``: per source and cycle count, units and last-cycle observations.

    ``aliases`` maps a cycle count to the method name its model was scored under (``method@settings``
    for a variant); the model is the artifact that produced the scored rows (``artifact`` field of the
    rows), read through the method's ``artifact_stats``.
    """
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    out: dict[str, Any] = {"definition": "units: units of the saved model; observations: inspection and study notes "
                                         "of the last self-directed cycle", "sources": {}}
    for c, alias in sorted(aliases.items()):
        arts = {(r["source"], r.get("artifact")) for r in data.results if r["method"] == alias and r.get("artifact")}
        if not arts:
            continue
        cls = get_method_class(alias.partition("@")[0])
        for sid, art in sorted(arts):
            stats = cls.artifact_stats(run_dir / "artifacts" / ("method_" + alias.replace("/", "_")) / art)
            if stats is None:
                continue
            obs = stats.get("observations") if c > 0 else None
            out["sources"].setdefault(sid, {})[str(c)] = {"method": alias, "units": stats.get("units"),
                                                          "observations": obs}
    atomic_write_json(run_dir / DERIVED / "cycles.json", out)
    return out
