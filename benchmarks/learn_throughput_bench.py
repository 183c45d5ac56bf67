"""Learning throughput against the API-like test backend at a fixed latency, per method and stage.

Starts the OpenAI-compatible test server (``tests/backends/api_server.py``) in its own process with
every reply delayed by ``--latency`` seconds, and runs each method's learning through the real runner
(``Runner``, as the CLI does; the test phase is skipped) on a real source: PhantomWiki (the bundled
universe, or the data folder's) and, when ``--swe-qa-flask DIR`` or the shared data has it, SWE-QA
flask. The model is ``openai-api/testapi/gpt-oss-120b`` at medium reasoning effort, embeddings are the
harness's hash embedder (no network, no latency: only model calls are timed). Every run starts with an
empty call cache, so every call is live.

For each method and each C in ``--connections`` (plus one run with unbounded connections, whose wall
time over the latency is the critical path: the longest chain of dependent calls) it prints, per
stage and for the whole learning phase:

* calls: live model calls;
* wall: seconds from the first call's start to the last call's end (stage: the same over its calls);
* in flight: calls x latency / wall, the mean number of calls in flight (the ceiling is C);
* path: the critical path in calls (wall with unbounded connections / latency).

Goals: for a whole run, in flight >= 80 % of min(C, calls / path) (the parallelism available);
for a single SourceLearn cell, wall <= 1.25 x path x latency when C is not the limit.

    python benchmarks/learn_throughput_bench.py --methods hipporag2 --connections 8,32 --limit 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "openai-api/testapi/gpt-oss-120b"
UNBOUNDED = 100_000


class Server:
    """The API-like test backend in a child process, every reply after ``latency`` seconds."""

    def __init__(self, latency: float):
        code = ("import asyncio, sys; from tests.backends.api_server import ApiServer; "
                f"asyncio.run(ApiServer(latency={latency!r}, lifetime=3600).serve(announce=True))")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("listening "):
            self.proc.kill()
            raise SystemExit(f"test server did not start: {line!r}")
        self.url = line.split(" ", 1)[1].strip()

    def env(self) -> dict[str, str]:
        from tests.backends.api_server import API_KEY, SERVICE

        return {f"{SERVICE.upper()}_BASE_URL": self.url, f"{SERVICE.upper()}_API_KEY": API_KEY}

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def learn_once(benchmark: str, method: str, connections: int, out: Path, seeds: list[int], limit: int,
               options: dict[str, str], data_dir: Path | None, sources: list[str] | None,
               method_configs: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Learn the cells of one method (no test phase); every live call's (stage, start, end)."""
    from sourcebench.harness import llm as llm_mod
    from sourcebench.harness.runner import RunConfig, Runner

    calls: list[tuple[str, float, float]] = []
    original = llm_mod.LLM._generate_retrying_malformed

    async def timed(self, model, msgs, config, max_retries):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        try:
            return await original(self, model, msgs, config, max_retries)
        finally:
            calls.append((stage_of.get(id(msgs), ""), t0, time.perf_counter()))

    stage_of: dict[int, str] = {}
    uncoalesced = llm_mod.LLM._call_uncoalesced if hasattr(llm_mod.LLM, "_call_uncoalesced") else None
    inner_name = "_call_uncoalesced" if uncoalesced else "_call_once"
    inner = getattr(llm_mod.LLM, inner_name)

    async def staged(self, msgs, cap, **kw):  # type: ignore[no-untyped-def]
        stage_of[id(msgs)] = kw.get("stage", "")
        return await inner(self, msgs, cap, **kw)

    async def no_test(self, cells, done):  # type: ignore[no-untyped-def]
        return None

    from sourcebench.harness.options import resolve_guidance_limit

    cfg = RunConfig(benchmark=benchmark, methods=[method], model=MODEL, out=out, seeds=seeds, limit=limit,
                    guidance_limit=resolve_guidance_limit(limit, None),  # as `run --limit N` does
                    options=options, data_dir=data_dir, sources=sources, embedder="hash", reasoning_effort="medium",
                    judge_reasoning_effort="medium", max_connections=connections, method_configs=method_configs or {})
    llm_mod.LLM._generate_retrying_malformed = timed  # type: ignore[method-assign]
    setattr(llm_mod.LLM, inner_name, staged)
    from sourcebench.harness import runner as runner_mod

    test_all = runner_mod.Runner.test
    runner_mod.Runner.test = no_test  # type: ignore[method-assign]
    try:
        Runner(cfg).run()
    finally:
        llm_mod.LLM._generate_retrying_malformed = original  # type: ignore[method-assign]
        setattr(llm_mod.LLM, inner_name, inner)
        runner_mod.Runner.test = test_all  # type: ignore[method-assign]
    calls = [c for c in calls if c[0] != ""]  # the preflight probe
    return {"calls": calls}


def summarise(calls: list[tuple[str, float, float]], latency: float) -> dict[str, dict[str, float]]:
    by: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for stage, a, b in calls:
        by[stage].append((a, b))
        by["(all)"].append((a, b))
    out = {}
    for stage, spans in by.items():
        wall = max(b for _, b in spans) - min(a for a, _ in spans)
        out[stage] = {"calls": len(spans), "wall": wall, "in_flight": len(spans) * latency / wall if wall else 0.0}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="hipporag2", help="comma-separated methods (default hipporag2)")
    ap.add_argument("--benchmark", default="phantomwiki", help="phantomwiki or swe_qa (flask)")
    ap.add_argument("--connections", default="8,32,64", help="values of C (default 8,32,64)")
    ap.add_argument("--latency", type=float, default=0.5, help="seconds per reply (default 0.5)")
    ap.add_argument("--seeds", default="0", help="split seeds (cells learned at once; default 0)")
    ap.add_argument("--limit", type=int, default=3, help="test tasks per source and seed (default 3)")
    ap.add_argument("--data-dir", type=Path, help="benchmark data folder (default: the bundled or shared data)")
    ap.add_argument("--sources", help="comma-separated source ids (default: all)")
    ap.add_argument("--no-path", action="store_true", help="skip the unbounded run (no critical path)")
    ap.add_argument("--method-config", action="append", metavar="METHOD.KEY=VALUE", help="as for `run`")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from sourcebench.harness.options import method_configs
    options = {"flask": str(a.data_dir / "swe_qa" / "flask")} if a.benchmark == "swe_qa" and a.data_dir else {}
    sources = a.sources.split(",") if a.sources else None
    server = Server(a.latency)
    os.environ.update(server.env())
    report: dict[str, Any] = {"latency": a.latency, "benchmark": a.benchmark, "methods": {}}
    try:
        for method in a.methods.split(","):
            runs: dict[str, Any] = {}
            cs = [int(c) for c in a.connections.split(",")] + ([] if a.no_path else [UNBOUNDED])
            for c in cs:
                with tempfile.TemporaryDirectory(prefix="ltb-") as tmp:
                    t0 = time.perf_counter()
                    res = learn_once(a.benchmark, method, c, Path(tmp) / "run", [int(s) for s in a.seeds.split(",")],
                                     a.limit, options, a.data_dir, sources, method_configs(a.method_config))
                    runs[str(c)] = {"stages": summarise(res["calls"], a.latency),
                                    "run_s": time.perf_counter() - t0}
            report["methods"][method] = runs
            _print(method, runs, a.latency)
    finally:
        server.close()
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))


def _print(method: str, runs: dict[str, Any], latency: float) -> None:
    path_run = runs.get(str(UNBOUNDED))
    print(f"\n{method} ({latency * 1000:.0f} ms a call)")
    print(f"{'C':>6} {'stage':<22} {'calls':>6} {'wall s':>8} {'in flight':>9} {'path':>6} {'goal':>6}")
    for c, run in runs.items():
        for stage, s in sorted(run["stages"].items(), key=lambda kv: (kv[0] != "(all)", kv[0])):
            p = path_run["stages"].get(stage) if path_run else None
            path = p["wall"] / latency if p else float("nan")
            avail = s["calls"] / path if p and path else float("nan")
            cap = min(int(c), avail) if p else float("nan")
            goal = s["in_flight"] / cap if p and cap else float("nan")
            label = "inf" if int(c) == UNBOUNDED else c
            print(f"{label:>6} {stage:<22} {s['calls']:>6} {s['wall']:>8.1f} {s['in_flight']:>9.1f} {path:>6.1f} "
                  f"{goal:>6.0%}")


if __name__ == "__main__":
    main()
