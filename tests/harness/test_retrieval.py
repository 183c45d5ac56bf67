"""Hybrid retrieval: tokenizer, BM25 equivalence with rank_bm25, RRF arithmetic, caps, scoping, persistence."""

from __future__ import annotations

import json
import random
import statistics
import time

import numpy as np
import pytest

from sourcebench.harness.data import Element
from sourcebench.harness.elements import split_file
from sourcebench.harness.embeddings import Embedder, HashEmbedder
from sourcebench.harness.errors import DataError
from sourcebench.harness.retrieval import (
    EXCERPT_CHARS,
    HybridIndex,
    SparseBM25,
    bm25_text,
    dense_text,
    index_text,
    per_file_cap_for,
    retrievable,
    tokenize,
)


class TableEmbedder(Embedder):
    """Dense vectors looked up by the text's last line (the query, or an element's excerpt)."""

    def __init__(self, table: dict[str, list[float]], name: str = "table-3"):
        self.table = table
        self.name = name
        self.batch_size = 64
        self.calls: list[str] = []

    @property
    def dim(self) -> int:
        return 3

    def _embed_batch(self, texts):
        self.calls.extend(texts)
        return np.array([self.table[t.split("\n")[-1].strip()] for t in texts], dtype=np.float32)


def unit(cos: float) -> list[float]:
    return [cos, float(np.sqrt(1 - cos * cos)), 0.0]


# Six elements; BM25 for "apple" ranks b (shorter) above a, nothing else matches.
# Dense cosines to the query [1, 0, 0]: c .9, a .8, d .6, b .1, e .05, f 0.
TEXTS = {"a": "apple banana", "b": "apple", "c": "cherry", "d": "durian", "e": "elder", "f": "fig"}
COS = {"a": 0.8, "b": 0.1, "c": 0.9, "d": 0.6, "e": 0.05, "f": 0.0}
PATHS = {"a": "x.py", "b": "x.py", "c": "x.py", "d": "y.py", "e": "", "f": ""}


def toy_index(order=("a", "b", "c", "d", "e", "f")) -> tuple[HybridIndex, TableEmbedder]:
    table = {TEXTS[k]: unit(COS[k]) for k in TEXTS}
    table["apple"] = unit(COS["b"])  # element b's text is also the query text below; see query()
    table["QUERY apple"] = [1.0, 0.0, 0.0]
    emb = TableEmbedder(table)
    elements = [Element(id=k, title="", text=TEXTS[k], path=PATHS[k]) for k in order]
    return HybridIndex(elements, emb), emb


Q = "QUERY apple"  # tokens: "query" (unknown) and "apple"


# -- tokenizer -----------------------------------------------------------------------------------


def test_tokenize():
    assert tokenize("Hello, World! a_b x1 I'm 42 GET /api/v2/users-list") == [
        "hello", "world", "x1", "42", "get", "api", "v2", "users", "list"]
    assert tokenize("Ünïcode Straße") == ["ünïcode", "straße"]
    assert tokenize("") == [] and tokenize("a b c !!") == []
    assert tokenize("snake_case CamelCase") == ["snake", "case", "camelcase"]


def test_per_file_cap_for():
    assert per_file_cap_for("code") == 3
    assert per_file_cap_for("documents") is None and per_file_cap_for("api_docs") is None


# -- BM25 equals rank_bm25 -------------------------------------------------------------------------


def _random_corpus(rng: random.Random, n_docs: int, vocab: int) -> list[list[str]]:
    words = [f"w{i}" for i in range(vocab)]
    weights = [1 / (i + 1) for i in range(vocab)]
    return [rng.choices(words, weights, k=rng.randint(0, 40)) for _ in range(n_docs)]


@pytest.mark.parametrize("n_docs,vocab", [(3, 4), (10, 6), (200, 300), (1500, 2000)])
def test_bm25_matches_rank_bm25(n_docs, vocab):
    rank_bm25 = pytest.importorskip("rank_bm25")
    rng = random.Random(n_docs)
    corpus = _random_corpus(rng, n_docs, vocab)
    if all(len(d) == 0 for d in corpus):
        corpus[0] = ["w0"]
    ref = rank_bm25.BM25Okapi(corpus)
    ours = SparseBM25(corpus)
    assert ours.average_idf == ref.average_idf and ours.avgdl == ref.avgdl
    for w, t in ours.vocab.items():
        assert ours.idf[t] == ref.idf[w]
    queries = [["w0"], ["w1", "w2", "w1"], ["nope"], [], [f"w{i}" for i in range(0, vocab, 3)],
               rng.choices([f"w{i}" for i in range(vocab)], k=6)]
    for q in queries:
        assert np.array_equal(ours.get_scores(q), ref.get_scores(q)), q  # bitwise equal


def test_bm25_epsilon_floor_applies():
    corpus = [["common", "x"], ["common", "y"], ["common", "z"], ["rare"]]
    ours = SparseBM25(corpus)
    t = ours.vocab["common"]
    assert ours.idf[t] == pytest.approx(0.25 * ours.average_idf)  # negative idf floored


def test_index_bm25_uses_title_and_text():
    els = [Element(id="1", title="Installation guide", text="pip install foo"),
           Element(id="2", title="Usage", text="call foo.run()"),
           Element(id="3", title="Other", text="nothing relevant")]
    idx = HybridIndex(els, HashEmbedder())
    assert [e.element_id for e in idx.bm25_top("installation")] == ["1"]
    assert [e.element_id for e in idx.bm25_top("foo")] == ["1", "2"] or [e.element_id for e in idx.bm25_top("foo")] == ["2", "1"]
    assert idx.bm25_top("zzz") == []
    assert bm25_text(els[0]) == "Installation guide pip install foo"


def test_index_text_is_name_and_excerpt():
    """BM25 and dense both see the name and the first 1,200 characters (official f"{name} {excerpt}")."""
    head = "alpha " * 200  # 1,200 characters
    e = Element(id="1", title="Widget.render", text=head + "zebra tail words")
    other = Element(id="2", title="Other", text="zebra once")
    assert len(head) == EXCERPT_CHARS
    assert index_text(e) == bm25_text(e) == dense_text(e) == "Widget.render " + head
    seen: list[str] = []

    class Recording(HashEmbedder):
        def _embed_batch(self, texts):
            seen.extend(texts)
            return super()._embed_batch(texts)

    idx = HybridIndex([e, other], Recording())
    assert seen == [index_text(e), index_text(other)]  # the dense model is given the same text
    assert [h.element_id for h in idx.bm25_top("zebra")] == ["2"]  # a term past the excerpt does not match
    assert [h.element_id for h in idx.bm25_top("render")] == ["1"]  # the name does


CODE = """import os

CONSTANT = 1


class Widget:
    size = 3

    def render(self):
        return os.sep


def helper():
    return CONSTANT
"""


def test_file_elements_not_retrievable_when_symbols_are(tmp_path):
    els = (split_file("pkg/widget.py", CODE) + split_file("pkg/consts.py", "A = 1\nB = 2\n")
           + split_file("pyproject.toml", "[project]\nname = 'w'\n") + split_file("README.md", "# Intro\n\nText.\n"))
    assert {e.id for e in els if e.kind == "file"} == {"pkg/widget.py", "pkg/consts.py", "pyproject.toml"}
    idx = HybridIndex(els, HashEmbedder())
    assert idx.ids == [e.id for e in retrievable(els)]
    assert "pkg/widget.py" not in idx.ids  # its classes and functions are retrievable instead
    assert {"pkg/widget.py#Widget", "pkg/widget.py#Widget.render", "pkg/widget.py#helper"} <= set(idx.ids)
    assert {"pkg/consts.py", "pyproject.toml", "README.md#intro"} <= set(idx.ids)  # files without symbols stay
    assert all(h.element_id != "pkg/widget.py" for h in idx.search("import os constant", k=20))
    # a file element that is not indexed stands for its file's indexed elements in restrict_to
    scoped = idx.search("widget render helper", k=20, restrict_to={"pkg/widget.py"})
    assert {h.element_id for h in scoped} == {"pkg/widget.py#Widget", "pkg/widget.py#Widget.render",
                                             "pkg/widget.py#helper"}
    idx.save(tmp_path)
    loaded = HybridIndex.load(tmp_path, els, HashEmbedder())  # loaded from all elements, as methods do
    assert loaded.ids == idx.ids and loaded.search("render") == idx.search("render")


# -- fusion ------------------------------------------------------------------------------------


def test_component_rankings():
    idx, _ = toy_index()
    assert [e.element_id for e in idx.bm25_top(Q)] == ["b", "a"]
    assert [e.element_id for e in idx.dense_top(Q)] == ["c", "a", "d", "b", "e", "f"]
    assert idx.dense_top(Q)[0].score == pytest.approx(0.9, abs=1e-6)


def test_rrf_hand_computed():
    idx, _ = toy_index()
    hits = idx.search(Q, k=8)
    # a: bm25 #2, dense #2 -> 2/62; b: #1, #4 -> 1/61 + 1/64; c: dense #1; d: #3; e: #5; f: #6.
    expected = [("a", 1 / 62 + 1 / 62), ("b", 1 / 61 + 1 / 64), ("c", 1 / 61), ("d", 1 / 63),
                ("e", 1 / 65), ("f", 1 / 66)]
    assert [(h.element_id, h.score) for h in hits] == [(i, pytest.approx(s, rel=1e-12)) for i, s in expected]
    assert [h.element_id for h in idx.search(Q, k=2)] == ["a", "b"]
    assert HybridIndex.rrf([[5, 7], [7]]) == {5: 1 / 61, 7: 1 / 62 + 1 / 61}


def test_rrf_ties_break_by_element_id():
    # candidates=2: bm25 [b, a], dense [c, a] -> a 2/62, then b and c tie at 1/61 -> id order.
    for order in [("a", "b", "c", "d", "e", "f"), ("f", "e", "d", "c", "b", "a")]:
        idx, _ = toy_index(order)
        hits = idx.search(Q, k=8, candidates=2)
        assert [h.element_id for h in hits] == ["a", "b", "c"]
        assert hits[1].score == hits[2].score


def test_equal_scores_break_by_id_in_components():
    els = [Element(id=i, title="same", text="identical words here") for i in ["z", "m", "a", "q"]]
    idx = HybridIndex(els, HashEmbedder())
    assert [e.element_id for e in idx.bm25_top("identical")] == ["a", "m", "q", "z"]
    assert [e.element_id for e in idx.dense_top("identical")] == ["a", "m", "q", "z"]
    assert [e.element_id for e in idx.search("identical")] == ["a", "m", "q", "z"]


def test_rank_is_full_fused_list_and_search_is_its_prefix():
    idx, _ = toy_index()
    ranking = idx.rank(Q)
    assert [h.element_id for h in ranking] == ["a", "b", "c", "d", "e", "f"]
    assert idx.search(Q, k=3) == ranking[:3]


def test_per_file_cap():
    idx, _ = toy_index()
    # a, b, c share x.py; e and f have no path (each its own group).
    assert [h.element_id for h in idx.search(Q, k=8, per_file_cap=2)] == ["a", "b", "d", "e", "f"]
    assert [h.element_id for h in idx.search(Q, k=8, per_file_cap=1)] == ["a", "d", "e", "f"]
    assert [h.element_id for h in idx.search(Q, k=3, per_file_cap=3)] == ["a", "b", "c"]


def test_restrict_to():
    idx, _ = toy_index()
    hits = idx.search(Q, k=8, restrict_to={"c", "d", "e", "unknown-id"})
    assert [(h.element_id, h.score) for h in hits] == [
        ("c", pytest.approx(1 / 61)), ("d", pytest.approx(1 / 62)), ("e", pytest.approx(1 / 63))]
    assert [h.element_id for h in idx.search(Q, restrict_to={"a", "f"})] == ["a", "f"]
    assert idx.search(Q, restrict_to=set()) == []
    assert [e.element_id for e in idx.bm25_top(Q, restrict_to={"a", "c"})] == ["a"]
    assert [e.element_id for e in idx.dense_top(Q, restrict_to={"f", "b"})] == ["b", "f"]


def test_restrict_to_takes_top_within_scope():
    # More matching elements than candidates: the scoped ranking must not be a filtered global top-k.
    els = [Element(id=f"e{i:03d}", title="", text="token " * (1 + i % 5) + f"n{i}") for i in range(100)]
    idx = HybridIndex(els, HashEmbedder())
    scope = {f"e{i:03d}" for i in range(90, 100)}
    hits = idx.search("token", k=8, candidates=5, restrict_to=scope)
    assert 5 <= len(hits) <= 8 and all(h.element_id in scope for h in hits)
    assert len(idx.bm25_top("token", k=5, restrict_to=scope)) == 5
    assert len(idx.dense_top("token", k=5, restrict_to=scope)) == 5


def test_evidence_excerpt_and_dense_text():
    long = "word " * 400
    e = Element(id="x", title="T", text=long)
    idx = HybridIndex([e], HashEmbedder())
    (hit,) = idx.search("word")
    assert hit.text == e.excerpt(1200) and len(hit.text) == 1204 and hit.title == "T"
    assert dense_text(e) == "T " + e.text[:1200]


def test_empty_index_and_empty_query():
    idx = HybridIndex([], HashEmbedder())
    assert idx.search("anything") == [] and len(idx) == 0
    idx2, _ = toy_index()
    idx2.embedder.table[""] = [0.0, 0.0, 0.0]
    assert idx2.search("") == []


def test_duplicate_ids_rejected():
    with pytest.raises(DataError):
        HybridIndex([Element(id="a", title="", text="x"), Element(id="a", title="", text="y")], HashEmbedder())


def test_determinism():
    els = [Element(id=f"doc{i}", title=f"title {i % 13}", text=f"text about {i % 7} and {i % 11} things",
                   path=f"f{i % 9}.py") for i in range(300)]
    runs = []
    for _ in range(2):
        idx = HybridIndex(list(els), HashEmbedder())
        runs.append([(h.element_id, h.score) for h in idx.search("text about 3 things", k=8, per_file_cap=3)])
    assert runs[0] == runs[1] and len(runs[0]) == 8


# -- persistence -------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    idx, emb = toy_index()
    idx.save(tmp_path / "idx")
    meta = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert meta["ids"] == idx.ids and meta["embedder"] == "table-3" and len(meta["fingerprints"]) == 6
    emb.calls.clear()
    loaded = HybridIndex.load(tmp_path / "idx", idx.elements, emb)
    assert emb.calls == []  # no re-embedding of elements
    assert np.array_equal(loaded.embeddings, idx.embeddings)
    assert loaded.search(Q, k=8) == idx.search(Q, k=8)
    assert emb.calls == [Q, Q]


def test_save_load_bm25_persisted_and_rebuilt(tmp_path, monkeypatch):
    els = [Element(id=f"d{i}", title=f"T{i}", text=f"alpha {i} beta {i * i} gamma") for i in range(60)]
    idx = HybridIndex(els, HashEmbedder())
    idx.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"index.json", "embeddings.npy", "bm25.npz", "bm25_vocab.json"}
    import sourcebench.harness.retrieval as R

    def no_tokenize(text):
        raise AssertionError("BM25 was rebuilt although its postings were saved")

    with monkeypatch.context() as m:
        m.setattr(R, "tokenize", no_tokenize)  # the BM25 build path tokenises every element
        loaded = HybridIndex.load(tmp_path, els, HashEmbedder())
    for q in (["alpha"], ["beta", "49", "gamma", "gamma"], ["zzz"]):
        assert np.array_equal(loaded.bm25.get_scores(q), idx.bm25.get_scores(q))
    assert loaded.bm25.vocab == idx.bm25.vocab
    (tmp_path / "bm25.npz").unlink()  # older artifact without postings: rebuilt from the elements
    rebuilt = HybridIndex.load(tmp_path, els, HashEmbedder())
    assert rebuilt.search("alpha 7 beta 49") == idx.search("alpha 7 beta 49")


def test_load_detects_changes(tmp_path):
    idx, emb = toy_index()
    idx.save(tmp_path)
    els = idx.elements
    changed = [els[0].model_copy(update={"text": "apple banana split", "fingerprint": ""}), *els[1:]]
    changed = [Element(**{**e.model_dump(), "fingerprint": ""}) for e in changed]
    with pytest.raises(DataError, match="changed"):
        HybridIndex.load(tmp_path, changed, emb)
    with pytest.raises(DataError, match="ids"):
        HybridIndex.load(tmp_path, els[:-1], emb)
    with pytest.raises(DataError, match="ids"):
        HybridIndex.load(tmp_path, list(reversed(els)), emb)
    with pytest.raises(DataError, match="embedder"):
        HybridIndex.load(tmp_path, els, TableEmbedder(emb.table, name="other-3"))
    retitled = [Element(**{**els[0].model_dump(), "title": "New"}), *els[1:]]
    with pytest.raises(DataError, match="titles"):
        HybridIndex.load(tmp_path, retitled, emb)
    with pytest.raises(DataError, match="missing"):
        HybridIndex.load(tmp_path / "nowhere", els, emb)


def test_save_load_hash_embedder(tmp_path):
    els = [Element(id=f"d{i}", title=f"T{i}", text=f"alpha {i} beta {i * i}") for i in range(50)]
    idx = HybridIndex(els, HashEmbedder())
    idx.save(tmp_path)
    loaded = HybridIndex.load(tmp_path, els, HashEmbedder())
    assert loaded.search("alpha 7 beta 49") == idx.search("alpha 7 beta 49")


# -- speed -------------------------------------------------------------------------------------


def test_query_latency_small_index():
    rng = random.Random(0)
    words = [f"term{i}" for i in range(3000)]
    els = [Element(id=f"e{i}", title=" ".join(rng.choices(words, k=3)),
                   text=" ".join(rng.choices(words, k=rng.randint(20, 120))), path=f"f{i // 10}.py")
           for i in range(5000)]
    idx = HybridIndex(els, HashEmbedder())
    lat = []
    for _ in range(30):
        q = " ".join(rng.choices(words, k=5))
        t = time.perf_counter()
        idx.search(q, k=8, per_file_cap=3)
        lat.append(time.perf_counter() - t)
    assert statistics.median(lat) < 0.05
