"""Retrieval benchmark: build time and query latency of HybridIndex on a synthetic source.

Builds a seeded synthetic source (default 50,000 elements spread over files, Zipf-distributed
vocabulary, 20-200 words each), indexes it, and times 200 queries through ``HybridIndex.search``.

    python benchmarks/retrieval_bench.py                    # hash-384 embedder
    python benchmarks/retrieval_bench.py --embedder local   # all-MiniLM-L6-v2 on CPU (slow build)
    python benchmarks/retrieval_bench.py --compare-rank-bm25
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sourcebench.harness.data import Element
from sourcebench.harness.embeddings import get_embedder
from sourcebench.harness.retrieval import HybridIndex, SparseBM25, bm25_text, dense_text, tokenize

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "shi", "pa", "de", "gri", "zen", "mor", "tal", "quin",
             "bel", "dor", "fa", "xi", "ul"]


def make_vocab(rng: np.random.Generator, n: int) -> list[str]:
    words: set[str] = set()
    while len(words) < n:
        k = int(rng.integers(1, 5))
        words.add("".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), k)))
    return sorted(words)


def make_source(n_elements: int, seed: int, vocab_size: int = 30_000, min_words: int = 20,
                max_words: int = 200) -> list[Element]:
    rng = np.random.default_rng(seed)
    vocab = np.array(make_vocab(rng, vocab_size), dtype=object)
    p = 1.0 / np.arange(1, vocab_size + 1) ** 1.07
    p /= p.sum()
    perm = rng.permutation(vocab_size)
    lengths = rng.integers(min_words, max_words + 1, n_elements)
    all_words = vocab[perm[rng.choice(vocab_size, size=int(lengths.sum()), p=p)]]
    elements = []
    pos = 0
    for i, L in enumerate(lengths.tolist()):
        words = all_words[pos : pos + L]
        pos += L
        f = i // 10
        title = " ".join(words[:3])
        elements.append(Element(id=f"file{f:05d}.md#s{i % 10}-{words[0]}", title=title, text=" ".join(words),
                                path=f"file{f:05d}.md"))
    return elements


def make_queries(elements: list[Element], n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed + 1)
    queries = []
    for i in rng.integers(0, len(elements), n).tolist():
        words = elements[i].text.split()
        k = int(rng.integers(3, 9))
        queries.append(" ".join(words[j] for j in rng.choice(len(words), min(k, len(words)), replace=False)))
    return queries


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedder", default="hash", help="hash | local | auto | openai/<model>")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--min-words", type=int, default=20)
    ap.add_argument("--max-words", type=int, default=200)
    ap.add_argument("--compare-rank-bm25", action="store_true", help="also time rank_bm25.BM25Okapi")
    ap.add_argument("--json", type=Path, help="write the numbers to this file")
    args = ap.parse_args()

    t = time.perf_counter()
    elements = make_source(args.elements, args.seed, min_words=args.min_words, max_words=args.max_words)
    queries = make_queries(elements, args.queries, args.seed)
    t_gen = time.perf_counter() - t
    n_chars = sum(len(e.text) for e in elements)
    print(f"synthetic source: {len(elements)} elements, {n_chars / 1e6:.1f}M chars, "
          f"{len({e.path for e in elements})} files (generated in {t_gen:.1f}s)")

    embedder = get_embedder(args.embedder, None)
    print(f"embedder: {embedder.name}")

    t = time.perf_counter()
    corpus = [tokenize(bm25_text(e)) for e in elements]
    t_tok = time.perf_counter() - t
    t = time.perf_counter()
    SparseBM25(corpus)
    t_bm25 = time.perf_counter() - t

    embedder.embed(["warm up"])  # model load is not embedding time
    t = time.perf_counter()
    emb = embedder.embed([dense_text(e) for e in elements])
    t_emb = time.perf_counter() - t

    t = time.perf_counter()
    index = HybridIndex(elements, embedder, embeddings=emb)
    t_index_given_emb = time.perf_counter() - t  # tokenise + BM25 + bookkeeping

    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        index.save(d)
        t_save = time.perf_counter() - t
        t = time.perf_counter()
        HybridIndex.load(d, elements, embedder)
        t_load = time.perf_counter() - t

    for q in queries[:5]:  # warm-up
        index.search(q, k=args.k)
    lat, lat_b, lat_d, lat_cap = [], [], [], []
    for q in queries:
        t = time.perf_counter()
        index.search(q, k=args.k)
        lat.append((time.perf_counter() - t) * 1000)
    for q in queries:
        t = time.perf_counter()
        index.bm25_top(q)
        lat_b.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        index.dense_top(q)
        lat_d.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        index.search(q, k=args.k, per_file_cap=3)
        lat_cap.append((time.perf_counter() - t) * 1000)

    res = {
        "elements": len(elements), "embedder": embedder.name, "queries": len(queries),
        "chars": n_chars, "tokenize_s": round(t_tok, 3), "bm25_build_s": round(t_bm25, 3),
        "embed_s": round(t_emb, 3),
        "index_build_given_embeddings_s": round(t_index_given_emb, 3),
        "save_s": round(t_save, 3), "load_s": round(t_load, 3),
        "search_ms_median": round(statistics.median(lat), 2), "search_ms_p95": round(pct(lat, 95), 2),
        "search_cap3_ms_median": round(statistics.median(lat_cap), 2),
        "bm25_top_ms_median": round(statistics.median(lat_b), 2),
        "dense_top_ms_median": round(statistics.median(lat_d), 2),
    }

    if args.compare_rank_bm25:
        from rank_bm25 import BM25Okapi

        t = time.perf_counter()
        ref = BM25Okapi(corpus)
        res["rank_bm25_build_s"] = round(time.perf_counter() - t, 3)
        ts = []
        for q in queries[:20]:
            t = time.perf_counter()
            ref.get_scores(tokenize(q))
            ts.append((time.perf_counter() - t) * 1000)
        res["rank_bm25_get_scores_ms_median"] = round(statistics.median(ts), 2)

    for k, v in res.items():
        print(f"{k:34s} {v}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
