"""Predicted against measured wall time: one real run against the API-like backend at a fixed latency.

Starts the OpenAI-compatible test server (``tests/backends/api_server.py``) in its own process with
every reply delayed by ``--latency`` seconds, runs ``sourcebench run`` on it (a fresh folder, so
every call is live; the harness's hash embedder, so only model calls wait), then
``sourcebench estimate`` with the same arguments, ``--latency`` and ``--compare`` the finished run,
and prints calls and wall time, estimated against measured:

    python benchmarks/walltime_check.py --out /tmp/wall --latency 8 --max-connections 32 -- \\
        --benchmark swe_qa --sources flask --opt flask=flask-3.1.1 --data-dir ../shared/data \\
        --methods sourcelearn,hybrid_rag --seeds 1 --limit 4

The measured wall time is the span of the run's model calls (``harness/walltime.py``
``measured_wall``: first to last reply in the run's call cache); the learning wall time the span of
its artifact builds. The estimate's rates are the shipped ones unless ``--calibration`` is passed
through (after ``--``, as an estimate argument it is not given to ``run``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.learn_throughput_bench import MODEL, Server

ESTIMATE_ONLY = ("--calibration",)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="a new folder for the run")
    ap.add_argument("--latency", type=float, default=8.0, help="seconds the server waits before each reply")
    ap.add_argument("--max-connections", type=int, default=32)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then the run's arguments (benchmark, methods, ...)")
    a = ap.parse_args()
    args = [x for x in a.args if x != "--"]
    run_args, est_args, i = [], [], 0
    while i < len(args):
        if args[i] in ESTIMATE_ONLY:
            est_args += args[i:i + 2]
            i += 2
        else:
            run_args.append(args[i])
            i += 1
    if a.out.exists():
        raise SystemExit(f"{a.out}: exists; give a new folder (every call must be live)")
    common = [*run_args, "--model", MODEL, "--reasoning-effort", "medium", "--judge-reasoning-effort", "medium",
              "--max-connections", str(a.max_connections)]
    cli = [sys.executable, "-m", "sourcebench.harness.cli"]
    server = Server(a.latency)
    try:
        env = {**os.environ, **server.env()}
        t0 = time.time()
        subprocess.run([*cli, "run", *common, "--embedder", "hash", "--out", str(a.out), "--allow-degraded",
                        "--no-report"], check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        elapsed = time.time() - t0
    finally:
        server.close()
    out = subprocess.run([*cli, "estimate", *common, *est_args, "--latency", str(a.latency), "--compare",
                          str(a.out), "--json"], check=True, cwd=ROOT, capture_output=True, text=True).stdout
    rep = json.loads(out)
    wall, calls = rep["wall_time"], rep["compare"]["totals"]["calls"]
    print(f"run: {' '.join(run_args)}; latency {a.latency:g} s, C = {a.max_connections}")
    print(f"process wall (start, preflight, data loading included): {elapsed:.0f} s")
    print(f"calls: estimated {calls[0]:.0f}, measured (live) {calls[1]:.0f} ({_pct(calls[0], calls[1])})")
    for r in rep["compare"]["rows"]:
        print(f"  {r['method']:<14} {r['phase']:<12} estimated {r['calls_estimated']:8.0f}  "
              f"measured {r['calls_measured']:8.0f}  ({_pct(r['calls_estimated'], r['calls_measured'])})")
    for what, key in (("learning", "learn_s"), ("model calls, all phases", "s")):
        x, m = wall.get(f"predicted_{key}"), wall.get(f"measured_{key}")
        if x is not None and m is not None:
            print(f"wall time, {what}: predicted {x:.0f} s, measured {m:.0f} s ({_pct(x, m)})")


def _pct(x: float, m: float) -> str:
    return "n/a" if not m else f"{100 * (x - m) / m:+.0f} %"


if __name__ == "__main__":
    main()
