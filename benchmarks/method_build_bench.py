"""Method build benchmark: how long each method takes to learn its artifact on real PhantomWiki.

For one PhantomWiki source (default: the first instance under the data folder), builds each named
method's artifact with the scripted model and the hash embedder, each in its own empty artifact
store and call cache (so nothing is shared or cached between methods), and prints: build wall
seconds, model calls (live + cached + failed, from the usage ledger), model seconds (the ledger's
``seconds``: per-call latencies summed, so concurrent calls overlap and the sum can exceed the wall
time), model wall seconds (the union of the calls' time intervals) and harness overhead = wall -
model wall seconds (chunking, clustering, indexing, embedding, I/O).

    python benchmarks/method_build_bench.py
    python benchmarks/method_build_bench.py --methods raptor --repeat 2   # 2nd build: numba already compiled
    python benchmarks/method_build_bench.py --model scripted/extractive --embedder local

A method that fails to import (not written yet, a missing dependency) is skipped with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sourcebench.adapters.phantomwiki import PhantomWiki
from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.data import Answer, Source, Task
from sourcebench.harness.embeddings import Embedder, get_embedder
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import LearnContext, Method
from sourcebench.harness.registry import get_method_class
from sourcebench.harness.splits import grouped_split

DEFAULT_METHODS = "hybrid_rag,raptor,hipporag2,awm"


@dataclass
class BuildResult:
    method: str
    wall_s: float
    calls: int
    failed_calls: int
    model_s: float  # ledger seconds: summed call latencies
    model_wall_s: float  # union of call intervals
    stats: dict

    @property
    def overhead_s(self) -> float:
        return self.wall_s - self.model_wall_s


class IntervalLLM(LLM):
    """An LLM that also records each call's (start, end), to tell model time from harness time."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.intervals: list[tuple[float, float]] = []

    async def generate(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return await super().generate(*args, **kwargs)
        finally:
            self.intervals.append((t0, time.perf_counter()))


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of time intervals (overlapping concurrent calls count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def load_method(name: str) -> Method | None:
    try:
        return get_method_class(name)()
    except Exception as e:  # noqa: BLE001  (not written yet, missing dependency, bad entry point)
        print(f"skipping {name}: cannot load it ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        return None


async def build(method: Method, bench: PhantomWiki, source: Source, guidance: list[Task], split, model: str,
                embedder: Embedder, seed: int, verbose: bool) -> BuildResult:
    """One build in fresh temporary folders (artifact store, call cache, workdir) with a fresh ledger."""
    with tempfile.TemporaryDirectory(prefix=f"build-{method.name}-") as tmp:
        root = Path(tmp)
        ledger = UsageLedger()
        llm = IntervalLLM(ModelSpec(name=model), CallCache(root / "calls.sqlite"), ledger)

        async def judge(task: Task, answer: Answer):
            return await bench.score(task, answer, None)  # PhantomWiki scores by exact match / F1

        workdir = root / "artifact"
        workdir.mkdir()
        ctx = LearnContext(source=source, benchmark=bench, llm=llm.bind(method.name, "learn"), embedder=embedder,
                           store=ArtifactStore(root / "store"), seed=seed, split=split, judge=judge,
                           progress=(lambda msg: print(f"  [{method.name}] {msg}")) if verbose else (lambda msg: None),
                           workdir=workdir)
        t0 = time.perf_counter()
        stats = await method.learn(source, guidance if method.uses_guidance else [], ctx) or {}
        wall = time.perf_counter() - t0
    rows = ledger.snapshot()
    return BuildResult(
        method=method.name,
        wall_s=wall,
        calls=int(sum(r["calls"] for r in rows)),
        failed_calls=int(sum(r["calls"] for r in rows if r["status"] == "failed")),
        model_s=float(sum(r["seconds"] for r in rows)),
        model_wall_s=union_seconds(llm.intervals),
        stats={k: v for k, v in stats.items() if k != "usage"},
    )


def table(results: list[BuildResult]) -> str:
    head = (f"{'method':<12} {'build s':>9} {'calls':>7} {'failed':>7} {'model s':>9} {'model wall s':>13} "
            f"{'overhead s':>11}")
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.method:<12} {r.wall_s:>9.2f} {r.calls:>7d} {r.failed_calls:>7d} {r.model_s:>9.2f} "
                     f"{r.model_wall_s:>13.2f} {r.overhead_s:>11.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma-separated (default {DEFAULT_METHODS})")
    ap.add_argument("--source", default=None, help="PhantomWiki instance (default: the first one)")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--model", default="scripted/extractive")
    ap.add_argument("--embedder", default="hash")
    ap.add_argument("--seed", type=int, default=0, help="split seed (guidance tasks for guidance-using methods)")
    ap.add_argument("--repeat", type=int, default=1, help="builds per method (later ones show warm-process cost)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the methods' progress messages")
    args = ap.parse_args(argv)

    bench = PhantomWiki(data_dir=args.data_dir)
    source_id = args.source or bench.source_ids()[0]
    source = bench.load_source(source_id)
    tasks = bench.load_tasks(source_id)
    split = grouped_split(bench.name, source.id, tasks, args.seed, source_fingerprint=source.fingerprint)
    by_id = {t.id: t for t in tasks}
    guidance = [by_id[i] for i in split.guidance_ids]
    embedder = get_embedder(args.embedder)
    print(f"PhantomWiki source {source.id}: {len(source.elements)} elements, ~{source.n_chars // 4} tokens; "
          f"{len(guidance)} guidance tasks (seed {args.seed}); model {args.model}; embedder {embedder.name}")

    results: list[BuildResult] = []
    for name in [m.strip() for m in args.methods.split(",") if m.strip()]:
        method = load_method(name)
        if method is None:
            continue
        for i in range(args.repeat):
            try:
                r = asyncio.run(build(method, bench, source, guidance, split, args.model, embedder, args.seed,
                                      args.verbose))
            except Exception as e:  # noqa: BLE001  (report and go on with the other methods)
                print(f"{name}: build failed ({type(e).__name__}: {e})")
                break
            results.append(r)
            print(f"{name} build {i + 1}: {r.wall_s:.2f} s, stats {r.stats}")
    print()
    print(table(results))


if __name__ == "__main__":
    main()
