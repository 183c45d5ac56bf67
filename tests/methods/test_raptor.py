"""RAPTOR: chunking, layer construction, failed summaries, collapsed-tree budget, artifact, guards,
and the task-time options (matched context budget, gold elements excluded).

Most tests replace the UMAP/GMM clustering by a fixed grouping (``fixed_groups``) so that they run
in milliseconds and the layer structure is known exactly; the two ``slow`` tests run the real
clustering (numba compiles UMAP on its first fit: tens of seconds on a small machine).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Evidence, Score, Source, Task, estimate_tokens
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.errors import DataError
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext
from sourcebench.harness.providers import scripted
from sourcebench.methods.evidence import context_key, prompt_tokens
from sourcebench.methods.raptor import RAPTOR
from sourcebench.methods.raptor import tree as tree_mod
from sourcebench.methods.raptor.chunking import chunk_elements, split_sentences
from sourcebench.methods.raptor.clustering import ClusterParams, cluster_nodes, largest_first, worker_pool
from sourcebench.methods.raptor.tree import Node, Tree, collapsed_retrieve, covering, format_tree

TOPICS = {
    "astronomy": "comet nebula orbit telescope galaxy quasar eclipse meteor planet crater",
    "cooking": "saffron risotto simmer ladle basil dough oven pepper garlic skillet",
    "sailing": "mainsail tiller harbour anchor keel starboard regatta mooring jib buoy",
    "chess": "gambit rook bishop endgame castling pawn checkmate opening knight tempo",
}


def fact(i: int, topic: str, words: str) -> str:
    """One sentence of 201..400 characters: one element is then exactly one 100-token chunk."""
    w = words.split()
    body = " ".join(w[(i + k) % len(w)] for k in range(24))
    s = f"Record {i} about {topic} mentions {body} and ends here."
    assert 200 < len(s) <= 400
    return s


def make_source(n: int, sid: str = "toy") -> Source:
    names = sorted(TOPICS)
    els = []
    for i in range(n):
        topic = names[i % len(names)]
        els.append(Element(id=f"e{i:03d}", title=f"Record {i} ({topic})", text=fact(i, topic, TOPICS[topic])))
    return Source(id=sid, kind="documents", elements=els)


class ToyBench(Benchmark):
    name = "toy"

    def source_ids(self) -> list[str]:
        return ["toy"]

    def load_source(self, source_id: str) -> Source:
        raise NotImplementedError

    def load_tasks(self, source_id: str) -> list[Task]:
        return []

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        raise NotImplementedError


def contexts(tmp_path: Path, source: Source, model: str = "scripted/unit", tag: str = "a"):
    llm = LLM(ModelSpec(name=model, max_tokens=64), CallCache(tmp_path / f"{tag}.sqlite"), UsageLedger())
    workdir = tmp_path / f"artifact-{tag}"
    workdir.mkdir()
    common = {"source": source, "benchmark": ToyBench(), "embedder": HashEmbedder(),
              "store": ArtifactStore(tmp_path / "store")}
    return (LearnContext(llm=llm.bind("raptor", "learn"), workdir=workdir, **common),
            Context(llm=llm.bind("raptor", "answer"), **common), llm)


def learn(tmp_path: Path, source: Source, model: str = "scripted/unit", tag: str = "a", **config):
    method = RAPTOR(config)
    lctx, tctx, llm = contexts(tmp_path, source, model, tag)
    stats = asyncio.run(method.learn(source, [], lctx))
    return method, stats, lctx, tctx, llm


def fixed_groups(size: int):
    """A stand-in for cluster_nodes: consecutive groups of ``size`` (no UMAP, exact layer sizes)."""

    def fake(embeddings, tokens, params, mapper=None):
        n = len(embeddings)
        return [list(range(i, min(i + size, n))) for i in range(0, n, size)]

    return fake


def summary_calls() -> list[dict]:
    return [c for c in scripted.CALLS if "Summarise the passages" in c["messages"][-1]["content"]]


def summary_script(fail_marker: str | None = None):
    """Summaries are 'summary of <first record number>'; a cluster containing ``fail_marker`` raises."""

    def reply(messages, schema):
        text = messages[-1]["content"]
        if "Summarise the passages" not in text:
            return None
        if fail_marker and fail_marker in text:
            raise RuntimeError("provider exploded")
        first = text.split("Passages:\n", 1)[1].split()[:2]
        return "summary of " + " ".join(first)

    return reply


# -- chunking -------------------------------------------------------------------------------------


def test_sentences_keep_punctuation_and_line_starts():
    got = list(split_sentences("One. Two!  Three?\nFour\n\n five."))
    assert got == [("One.", True), ("Two!", False), ("Three?", False), ("Four", True), ("five.", True)]


def test_chunks_pack_sentences_up_to_the_limit_without_overlap():
    sentences = [f"Sentence number {i} says something about item {i * 7}." for i in range(60)]
    els = [Element(id=f"e{j}", title=f"T{j}", text=" ".join(sentences[j * 10:(j + 1) * 10])) for j in range(6)]
    chunks = chunk_elements(els, max_tokens=100)
    assert all(c.tokens <= 100 for c in chunks)
    # no overlap, nothing lost: the chunks hold exactly the sentences, in order
    assert " ".join(" ".join(c.text.split()) for c in chunks) == " ".join(sentences)
    # greedy packing: the next chunk's first sentence would not have fitted
    for a, b in itertools.pairwise(chunks):
        first = b.text.split("\n")[0].split(". ")[0]
        assert estimate_tokens(a.text + " " + first) > 100
    # a chunk running across an element boundary cites both elements, in source order
    spanning = [c for c in chunks if len(c.element_ids) > 1]
    assert spanning and all(list(c.element_ids) == sorted(c.element_ids) for c in spanning)
    assert chunks[0].element_ids[0] == "e0" and chunks[-1].element_ids[-1] == "e5"


def test_over_long_sentences_are_cut_at_clauses_then_words():
    long_clauses = ", ".join(f"clause {i} with several words" for i in range(40)) + "."
    one_word = "x" * 1000
    chunks = chunk_elements([Element(id="a", title="A", text=long_clauses),
                             Element(id="b", title="B", text=one_word)], max_tokens=50)
    assert all(c.tokens <= 50 for c in chunks)
    joined = "".join(c.text for c in chunks if c.element_ids == ("b",))
    assert joined == one_word
    a_text = " ".join(c.text for c in chunks if "a" in c.element_ids and "b" not in c.element_ids)
    assert a_text.replace(" ", "") == long_clauses.replace(" ", "")


def test_one_sentence_per_element_gives_one_chunk_per_element():
    src = make_source(7)
    chunks = chunk_elements(src.elements)
    assert [c.element_ids for c in chunks] == [(e.id,) for e in src.elements]


# -- one copy of each text (code sources) ----------------------------------------------------------

CODE_TREE = {
    "pkg/__init__.py": 'from .core import Engine  # marker-init-import\n',
    "pkg/core.py": (
        '"""Core module (marker-module-doc)."""\n'
        "import os  # marker-import\n\n"
        "DEFAULT = 1  # marker-constant\n\n\n"
        "class Engine:\n"
        '    """Engine doc (marker-class-doc)."""\n\n'
        "    speed = 2  # marker-class-attr\n\n"
        "    class Part:\n"
        "        def spin(self):\n"
        "            return 'marker-nested-class-method'\n\n"
        "    def run(self):\n"
        "        def inner():\n"
        "            return 'marker-nested-function'\n"
        "        return inner()  # marker-method-body\n\n\n"
        "def start():\n"
        "    return Engine().run()  # marker-function\n\n\n"
        "if __name__ == '__main__':\n"
        "    start()  # marker-main\n"
    ),
    "README.md": "# Engine\n\nThe engine runs (marker-readme).\n",
    "setup.cfg": "[metadata]\nname = engine  # marker-config\n",
}


def code_source(root: Path) -> Source:
    from sourcebench.harness.elements import source_from_tree

    for rel, text in CODE_TREE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return source_from_tree("code", root, kind="code")  # the loader SWE-QA uses


def test_each_line_of_a_code_tree_reaches_raptor_once(tmp_path):
    src = code_source(tmp_path / "tree")
    assert {e.id for e in src.elements} >= {"pkg/core.py", "pkg/core.py#Engine", "pkg/core.py#Engine.run"}
    markers = [m for text in CODE_TREE.values() for m in re.findall(r"marker-[a-z-]+", text)]
    assert len(markers) == len(set(markers)) == 13
    _, stats, lctx, _, _ = learn(tmp_path, src, num_layers=0)
    leaves = [n for n in Tree.load(lctx.workdir).nodes if n.layer == 0]
    assert stats["n_chunks"] == len(leaves)
    counts = {m: sum(n.text.count(m) for n in leaves) for m in markers}
    assert counts == dict.fromkeys(markers, 1)  # was 2 or 3 times: file, class and method each chunked
    # the leaves read the file in its line order, and cite the elements whose lines they hold
    order = [m for n in leaves for m in re.findall(r"marker-[a-z-]+", n.text)]
    core = re.findall(r"marker-[a-z-]+", CODE_TREE["pkg/core.py"])
    assert [m for m in order if m in core] == core
    cited = {e for n in leaves for e in n.element_ids}
    assert {"pkg/core.py", "pkg/core.py#Engine", "pkg/core.py#Engine.run", "pkg/core.py#start"} <= cited


FLASK = Path(os.environ.get("FLASK_SDIST", "/tmp/sdists/flask-3.1.1"))


@pytest.mark.skipif(not FLASK.is_dir(), reason=f"flask sdist not at {FLASK} (pip download --no-deps --no-binary "
                                                 ":all: flask==3.1.1, then tar xzf; or set FLASK_SDIST)")
def test_flask_sdist_gives_each_line_to_raptor_once():
    from tests.conftest import need_data

    need_data("swe_qa")  # the adapter reads the pinned commits from the data folder
    from sourcebench.adapters.swe_qa.benchmark import SWEQA
    from sourcebench.methods.raptor import leaf_chunks

    src = SWEQA(options={"flask": str(FLASK)}).load_source("flask")
    chunks = leaf_chunks(src, 100)

    def visible(text: str) -> int:
        return len(re.sub(r"\s", "", text))

    # each file's text once: sections and whole files (symbols are inside their files)
    once = sum(visible(e.text) for e in src.elements if e.kind != "symbol")
    assert sum(visible(c.text) for c in chunks) == once
    assert len(chunks) < 4000  # 3,406 for flask 3.1.1 (5,036 when the file and every symbol were chunked)


# -- layers (fixed clustering) --------------------------------------------------------------------


@pytest.mark.parametrize("n_chunks, num_layers, expected", [
    (11, 5, [11]),                    # official stop rule: <= reduction_dimension + 1 nodes, no layer
    (12, 5, [12, 4]),
    (150, 5, [150, 50, 17, 6]),       # 6 <= 11 stops
    (150, 2, [150, 50, 17]),          # num_layers caps the summary layers
])
def test_layer_structure_follows_the_official_stop_rule(tmp_path, monkeypatch, n_chunks, num_layers, expected):
    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(3))
    scripted.set_script(summary_script())
    _, stats, lctx, _, _ = learn(tmp_path, make_source(n_chunks), num_layers=num_layers)
    assert stats["layer_counts"] == expected
    assert len(summary_calls()) == sum(expected[1:])
    tree = Tree.load(lctx.workdir)
    assert tree.layer_counts == expected
    for node in tree.nodes[expected[0]:]:
        kids = [tree.nodes[c] for c in node.children]
        assert all(k.layer == node.layer - 1 for k in kids)
        assert node.element_ids == list(dict.fromkeys(e for k in kids for e in k.element_ids))
        assert node.title == f"summary (layer {node.layer})"


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_tiny_sources_build_a_leaf_only_tree_and_answer(tmp_path, n):
    method, stats, lctx, tctx, _ = learn(tmp_path, make_source(n))
    assert stats["layer_counts"] == ([n] if n else []) and stats["n_nodes"] == n
    assert not summary_calls()
    state = method.load(lctx.workdir, tctx)
    ans = asyncio.run(method.answer(Task(id="q", source_id="toy", question="Record 1 about cooking?"), state, tctx))
    assert len(ans.evidence_ids) == n
    assert all(i.startswith("raptor:L0:N") for i in ans.evidence_ids)


def test_failed_summary_calls_make_no_node_and_are_never_embedded(tmp_path, monkeypatch):
    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(3))
    scripted.set_script(summary_script(fail_marker="Record 3 "))  # the 2nd cluster of layer 1 fails
    _, stats, lctx, _, llm = learn(tmp_path, make_source(30))
    tree = Tree.load(lctx.workdir)
    assert stats["failed_summaries"] == 1 and tree.layer_counts == [30, 9]
    failed = tree.failed_summaries[0]
    assert failed["layer"] == 1 and failed["children"] == [3, 4, 5] and "provider exploded" in failed["error"]
    assert not any("exploded" in n.text or "Error" in n.text for n in tree.nodes)
    assert all(3 not in n.children for n in tree.nodes)
    # every stored vector is the embedding of its node's own text, nothing else
    assert np.array_equal(tree.embeddings, HashEmbedder().embed([n.text for n in tree.nodes]))
    assert any(f["stage"] == "summarise" for f in llm.ledger.failures)


def test_all_summaries_failing_or_empty_leaves_only_the_leaves(tmp_path, monkeypatch):
    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(3))
    scripted.set_script(lambda messages, schema: "   ")  # empty summaries count as failed
    _, stats, lctx, _, _ = learn(tmp_path, make_source(20))
    tree = Tree.load(lctx.workdir)
    assert tree.layer_counts == [20] and stats["failed_summaries"] == 7
    assert {f["error"] for f in tree.failed_summaries} == {"empty summary"}


def test_summary_prompt_holds_the_cluster_text_and_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(3))
    scripted.set_script(summary_script())
    *_, llm = learn(tmp_path, make_source(12))
    first = summary_calls()[0]["messages"][-1]["content"]
    src = make_source(3)
    assert all(e.text in first for e in src.elements)
    rows = [r for r in llm.ledger.snapshot() if r["stage"] == "summarise"]
    assert rows and rows[0]["calls"] == 4


# -- retrieval ------------------------------------------------------------------------------------


def _tree(sizes: list[int], dim: int = 8) -> tuple[Tree, np.ndarray]:
    """Nodes of the given token sizes whose cosine to the returned query decreases with the index."""
    nodes = [Node(i, 0 if i % 2 else 1, "w" * (4 * s), [], [f"e{i}"], f"t{i}") for i, s in enumerate(sizes)]
    emb = np.zeros((len(sizes), dim), np.float32)
    for i in range(len(sizes)):
        v = np.zeros(dim)
        v[0], v[1 + i % (dim - 1)] = 1.0, 0.05 * (i + 1)
        emb[i] = v / np.linalg.norm(v)
    q = np.zeros(dim, np.float32)
    q[0] = 1.0
    return Tree(nodes, emb, "hash-8"), q


def test_collapsed_tree_stops_at_the_token_budget():
    tree, q = _tree([1000, 1000, 1000, 1000, 10])
    picked = collapsed_retrieve(tree, q, max_tokens=3500, top_k=10)
    assert [n.index for n, _ in picked] == [0, 1, 2]  # the 4th would exceed 3,500; the loop stops there
    assert sum(n.tokens for n, _ in picked) <= 3500
    scores = [s for _, s in picked]
    assert scores == sorted(scores, reverse=True)
    exact, _ = _tree([1500, 2000, 5])
    assert [n.index for n, _ in collapsed_retrieve(exact, q, 3500, 10)] == [0, 1]  # exactly at the cap


def test_collapsed_tree_takes_at_most_top_k_across_layers():
    tree, q = _tree([10] * 25)
    picked = collapsed_retrieve(tree, q, max_tokens=3500, top_k=10)
    assert [n.index for n, _ in picked] == list(range(10))
    assert {n.layer for n, _ in picked} == {0, 1}


def test_answer_passes_nodes_as_evidence_within_budget(tmp_path):
    tree, _ = _tree([900, 900, 900, 900, 900])
    tree.embedder = HashEmbedder().name
    tree.embeddings = HashEmbedder().embed([f"node {i} topic" for i in range(5)])
    folder = tmp_path / "saved"
    tree.save(folder)
    _, tctx, _ = contexts(tmp_path, make_source(1))
    method = RAPTOR()
    state = method.load(folder, tctx)
    ans = asyncio.run(method.answer(Task(id="q", source_id="toy", question="node 2 topic"), state, tctx))
    assert len(ans.evidence_ids) == 3 and ans.evidence_ids[0] == "raptor:L1:N2"
    assert ans.metadata["source_element_ids"] == [f"e{int(i.rsplit('N', 1)[1])}" for i in ans.evidence_ids]
    prompt = scripted.CALLS[-1]["messages"][-1]["content"]
    assert prompt.count("w" * 3600) == 3 and "raptor:L1:N2" in prompt and "t2" in prompt


def test_load_rejects_a_tree_built_with_another_embedder(tmp_path):
    tree, _ = _tree([10, 10])
    tree.save(tmp_path / "t")
    _, tctx, _ = contexts(tmp_path, make_source(1))
    with pytest.raises(DataError, match="embedder"):
        RAPTOR().load(tmp_path / "t", tctx)


def test_artifact_json_and_printout(tmp_path, monkeypatch):
    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(4))
    scripted.set_script(summary_script())
    _, _, lctx, _, _ = learn(tmp_path, make_source(16))
    doc = json.loads((lctx.workdir / "tree.json").read_text())
    assert doc["layer_counts"] == [16, 4] and doc["embedder"] == "hash-384"
    assert set(doc["nodes"][0]) == {"index", "layer", "text", "children", "element_ids", "title"}
    assert doc["nodes"][0]["title"] == "Record 0 (astronomy)"
    assert np.load(lctx.workdir / "embeddings.npy").shape == (20, 384)
    out = format_tree(lctx.workdir)
    assert "layer 0: 16 nodes" in out and "layer 1: 4 nodes" in out and "raptor:L1:N16" in out


def test_config_is_typed():
    with pytest.raises(ValidationError):
        RAPTOR({"top_k": 10, "unknown": 1})
    assert RAPTOR().config.retrieve_max_tokens == 3500 and RAPTOR().config.chunk_tokens == 100


def test_clustering_guards_without_umap():
    params = ClusterParams()
    assert cluster_nodes(np.zeros((0, 4)), [], params) == []
    assert cluster_nodes(np.ones((1, 4)), [10], params) == [[0]]
    assert cluster_nodes(np.eye(2, 4), [5000, 5000], params) == [[0, 1]]  # over the cap, but < 3 points


# -- task-time options (Table 2, Figure 5b) ------------------------------------------------------------


def _options_tree(tmp_path: Path, monkeypatch):
    """24 one-chunk leaves summarised in threes: layers [24, 8]; summary 24 + k covers leaves 3k..3k+2."""
    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(3))
    scripted.set_script(summary_script())
    _, stats, lctx, tctx, _ = learn(tmp_path, make_source(24))
    assert stats["layer_counts"] == [24, 8]
    return lctx.workdir, tctx


def _ask(method: RAPTOR, folder: Path, ctx: Context, task: Task) -> Answer:
    return asyncio.run(method.answer(task, method.load(folder, ctx), ctx))


def _nodes_as_evidence(tree: Tree, keys: list[str]) -> list[Evidence]:
    by_key = {n.key: n for n in tree.nodes}
    return [Evidence(element_id=k, title=by_key[k].title, text=by_key[k].text) for k in keys]


def test_matched_budget_reads_further_down_the_node_ranking(tmp_path, monkeypatch):
    folder, ctx = _options_tree(tmp_path, monkeypatch)
    task = Task(id="q", source_id="toy", question="Record 5 about sailing: mainsail and tiller?")
    native = _ask(RAPTOR({"top_k": 3}), folder, ctx, task)
    assert len(native.evidence_ids) == 3

    def matched(target: int, task: Task = task) -> Answer:
        path = tmp_path / f"targets-{target}.json"
        path.write_text(json.dumps({"targets": {context_key("toy", 0, "q"): target}}))
        return _ask(RAPTOR({"top_k": 3, "match_context_file": str(path)}), folder, ctx, task)

    everything = matched(10**6)  # past both native caps: every node of every layer, in rank order
    assert len(everything.evidence_ids) == 32 and everything.evidence_ids[:3] == native.evidence_ids
    target = native.context_tokens + 150
    wide = matched(target)
    n = len(wide.evidence_ids)
    assert n > 3 and wide.evidence_ids == everything.evidence_ids[:n]
    assert native.context_tokens < wide.context_tokens <= target
    tree = Tree.load(folder)
    one_more = _nodes_as_evidence(tree, everything.evidence_ids[:n + 1])
    assert prompt_tokens(ctx, task, one_more) > target  # it stopped just under the target
    assert wide.metadata["matched_target_tokens"] == target
    assert matched(1).evidence_ids == native.evidence_ids  # never below what it natively returns
    lost = matched(target, task.model_copy(update={"id": "other"}))
    assert lost.failed and lost.failure_reason.startswith("match_context") and not lost.evidence_ids


def test_excluding_gold_removes_gold_leaves_and_the_summaries_above_them(tmp_path, monkeypatch):
    folder, ctx = _options_tree(tmp_path, monkeypatch)
    tree = Tree.load(folder)
    assert covering(tree, {"e005"}) == {5, 24 + 1}  # the leaf and the summary of leaves 3..5
    task = Task(id="q", source_id="toy", question="Record 5 about sailing: mainsail and tiller?",
                metadata={"gold_element_ids": ["e005"]})
    native = _ask(RAPTOR(), folder, ctx, task)
    assert "e005" in native.metadata["source_element_ids"]  # the gold leaf is retrieved natively
    removed = _ask(RAPTOR({"exclude_gold": True}), folder, ctx, task)
    assert len(removed.evidence_ids) == len(native.evidence_ids)
    assert "e005" not in removed.metadata["source_element_ids"]
    assert not {"raptor:L0:N5", "raptor:L1:N25"} & set(removed.evidence_ids)
    assert removed.metadata["excluded_nodes"] == 2
    unlabelled = _ask(RAPTOR({"exclude_gold": True}), folder, ctx, task.model_copy(update={"metadata": {}}))
    assert unlabelled.failed and unlabelled.failure_reason.startswith("exclude_gold")


def test_task_time_options_at_their_defaults_leave_the_dumped_config_unchanged():
    """The artifact key hashes the dumped config: an option left off must not change earlier keys."""
    dumped = RAPTOR().config.model_dump()
    assert "exclude_gold" not in dumped and "match_context_file" not in dumped
    assert RAPTOR({"exclude_gold": True}).config.model_dump()["exclude_gold"] is True


# -- real clustering (UMAP + GMM) -----------------------------------------------------------------


@pytest.mark.slow
def test_real_tree_is_reproducible_and_layered(tmp_path):
    scripted.set_script(summary_script())
    src = make_source(30)
    _, stats_a, ctx_a, _, _ = learn(tmp_path, src, tag="a")
    _, _, ctx_b, _, _ = learn(tmp_path, src, tag="b")
    assert stats_a["layer_counts"][0] == 30 and len(stats_a["layer_counts"]) >= 2
    assert stats_a["layer_counts"][1] >= 2 and stats_a["failed_summaries"] == 0
    for name in ("tree.json", "embeddings.npy"):
        assert (ctx_a.workdir / name).read_bytes() == (ctx_b.workdir / name).read_bytes()
    tree = Tree.load(ctx_a.workdir)
    leaves = {i for n in tree.layer(1) for i in n.children}
    assert leaves == set(range(30))  # soft clustering covers every leaf (no node is dropped)


@pytest.mark.slow
def test_real_clustering_small_inputs_and_recluster_guard():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 32))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    params = ClusterParams()
    for n in (1, 2, 3, 4, 5, 12):
        clusters = cluster_nodes(x[:n], [10] * n, params)
        assert sorted({i for c in clusters for i in c}) == list(range(n))
        assert clusters == cluster_nodes(x[:n], [10] * n, params)  # seeded: same input, same clusters
    # every node far over the token cap: re-clustering must terminate and still cover every node
    clusters = cluster_nodes(x, [5000] * 40, params)
    assert sorted({i for c in clusters for i in c}) == list(range(40))


@pytest.mark.slow
def test_real_clustering_in_worker_processes_gives_the_same_clusters():
    """A large layer's local steps and re-clusterings run in a process pool; the clusters must not change."""
    from dataclasses import replace

    rng = np.random.default_rng(1)
    x = (rng.normal(size=(90, 32)) + rng.integers(0, 3, size=(90, 1)) * 2.0).astype(np.float32)
    tokens = [400] * 90  # over the cap after the first pass: re-clustering runs in the workers too
    serial = cluster_nodes(x, tokens, ClusterParams(workers=1))
    pooled = cluster_nodes(x, tokens, replace(ClusterParams(), workers=2, parallel_min_points=10))
    assert pooled == serial
    assert sorted({i for c in serial for i in c}) == list(range(90))
    # one pool for a tree's layers: a second, smaller layer on the warm workers, same clusters
    params = replace(ClusterParams(), workers=2, parallel_min_points=10)
    with worker_pool(params, 90) as mapper:
        assert mapper is not None
        assert cluster_nodes(x, tokens, params, mapper) == serial
        assert cluster_nodes(x[:40], tokens[:40], params, mapper) == cluster_nodes(x[:40], tokens[:40], ClusterParams(workers=1))


def test_worker_pool_only_for_a_source_worth_it():
    with worker_pool(ClusterParams(workers=2, parallel_min_points=100), 99) as mapper:
        assert mapper is None
    with worker_pool(ClusterParams(workers=1, parallel_min_points=1), 10_000) as mapper:
        assert mapper is None


def test_largest_first_hands_out_big_tasks_first_and_keeps_the_order():
    handed: list[int] = []

    def recording_map(fn, *its):
        for args in zip(*its):
            handed.append(args[0])
            yield fn(*args)

    out = largest_first(recording_map, lambda a, b: a * 10 + b, [2, 9, 1, 5], [2, 9, 1, 5], [0, 1, 2, 3])
    assert out == [20, 91, 12, 53]  # the given order
    assert handed == [9, 5, 2, 1]  # largest first


def test_one_thread_reaches_the_openmp_runtime_that_k_means_loads():
    """A thread limit reaches only runtimes already loaded: scikit-learn's OpenMP must be among them,
    or a second OpenMP thread spins beside every k-means start (3.4x slower BIC sweeps side by side).
    In a fresh interpreter, where nothing has loaded scikit-learn yet."""
    import subprocess
    import sys

    code = (
        "import json, numpy as np\n"
        "from methods.raptor.clustering import one_thread\n"
        "import numba\n"
        "with one_thread():\n"
        "    assert numba.get_num_threads() == 1\n"
        "    from sklearn.cluster import KMeans\n"
        "    from threadpoolctl import threadpool_info\n"
        "    KMeans(n_clusters=2, n_init=1, random_state=0).fit(np.arange(20.0).reshape(10, 2))\n"
        "    print(json.dumps(threadpool_info()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(lib["user_api"] == "openmp" for lib in info), info
    assert all(lib["num_threads"] == 1 for lib in info), info


def test_umap_spectral_start_is_reproducible_on_a_regular_component():
    """Identical points (duplicated code) form a complete, regular graph component; there UMAP's
    spectral start (ARPACK from an all-ones vector) restarts from ARPACK's own unseeded generator
    unless ``seeded_arpack_restarts`` seeds it (lmcinnes/umap issue 1277)."""
    import scipy.sparse as sp
    from umap.spectral import spectral_layout

    from sourcebench.methods.raptor.clustering import seeded_arpack_restarts

    rng = np.random.default_rng(0)
    complete = np.ones((21, 21)) - np.eye(21)  # 21 identical points, 10 neighbours each and more
    ring = np.roll(np.eye(30), 1, axis=1) + np.roll(np.eye(30), -1, axis=1)  # regular too
    other = rng.random((40, 40)) * (rng.random((40, 40)) < 0.2)
    other = np.maximum(other, other.T) + np.diag(np.ones(39), 1) + np.diag(np.ones(39), -1)  # connected
    np.fill_diagonal(other, 0)
    graph = sp.coo_matrix(sp.block_diag([complete, ring, other]))
    data = rng.normal(size=(91, 8))

    def start() -> np.ndarray:
        return spectral_layout(data, graph, 10, np.random.RandomState(224))

    with seeded_arpack_restarts(224):
        runs = [start() for _ in range(4)]
    assert all(np.array_equal(runs[0], r) for r in runs[1:])


def test_visible_summaries_stay_within_100_tokens_on_the_reasoning_backend(tmp_path, monkeypatch, api_env):
    """On a reasoning backend the cap sent is 100 + the reasoning allowance, so the reply is cut here:
    every summary node is at most 100 tokens of the embedding model's tokenizer (cl100k_base for
    text-embedding-3-large), and the cuts are recorded."""
    from sourcebench.harness.embeddings import get_embedder

    monkeypatch.setattr(tree_mod, "cluster_nodes", fixed_groups(3))
    source = make_source(12)
    emb = get_embedder("openai/text-embedding-3-large", None)
    spec = ModelSpec(name="openai-api/testapi/gpt-oss-120b", max_tokens=512, reasoning_effort="medium",
                     reasoning_tokens=4000)
    llm = LLM(spec, CallCache(tmp_path / "calls.sqlite"), UsageLedger())
    workdir = tmp_path / "artifact"
    workdir.mkdir()
    lctx = LearnContext(llm=llm.bind("raptor", "learn"), workdir=workdir, source=source, benchmark=ToyBench(),
                        embedder=emb, store=ArtifactStore(tmp_path / "store"))
    stats = asyncio.run(RAPTOR().learn(source, [], lctx))
    tree = Tree.load(workdir)
    summaries = [n for n in tree.nodes if n.layer > 0]
    counter = emb.limits.counter
    assert summaries and stats["failed_summaries"] == 0
    assert max(counter.count(n.text) for n in summaries) <= 100
    cuts = stats["summary_cuts"]
    assert cuts == tree.metadata["summary_cuts"] and cuts["tokenizer"] == counter.name
    assert cuts["summaries_cut"] >= 1 and cuts["tokens_cut"] > 0  # the backend wrote more than 100
    sent = [c for c in api_env.stats()["calls"] if c["endpoint"] != "embeddings"]
    assert sent and all(c["reasoning_tokens"] > 0 and c["cap"] > 100 for c in sent)  # the cap alone did not bound it
    assert max(c["visible_tokens"] for c in sent) > 100
