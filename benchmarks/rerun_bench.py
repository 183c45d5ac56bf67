"""Re-running a finished run: model calls (must be zero) and wall time against the original.

Runs ``sourcebench run`` (as a user would, one process per command) against the fault server at a
fixed latency on a seeded PhantomWiki-format instance, then runs the very same command again.
Printed: the original's wall time, the re-run's wall time and its share of the original (goal
<= 5 %), the requests the server received during the re-run and the live calls the re-run counted
(both must be 0), and the re-run's wall time inside the process (without interpreter start-up and
imports).

    python benchmarks/rerun_bench.py                      # hybrid_rag,no_source, 1,000 tasks each
    python benchmarks/rerun_bench.py --tasks 200 --methods no_source
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from throughput_bench import ROOT, ServerProcess, make_instance


def live_calls(out: Path) -> int:
    rows = [json.loads(x) for x in (out / "usage.jsonl").read_text().splitlines() if x.strip()]
    return int(sum(r["calls"] for r in rows if r["status"] == "live"))


def cli(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "sourcebench.harness.cli", *args], capture_output=True, text=True, env=env,
                       cwd=ROOT)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"sourcebench failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return wall, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000, help="test tasks per method")
    ap.add_argument("--methods", default="hybrid_rag,no_source")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--keep", type=Path, help="keep the data and run folders here")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="sb-rerun-"))
    work.mkdir(parents=True, exist_ok=True)
    n_q = int(args.tasks / 0.7 / 0.95) + 50
    data = make_instance(work / "data", n_people=max(60, n_q // 10 + 1), n_questions=n_q, seed=0)
    out = work / "run"
    shutil.rmtree(out, ignore_errors=True)
    server = ServerProcess(args.latency)
    env = {**os.environ, "FAULT_BASE_URL": server.url, "FAULT_API_KEY": "rerun-bench-key-not-secret",
           "INSPECT_DISPLAY": "none"}
    argv = ["run", "--benchmark", "phantomwiki", "--methods", args.methods, "--model", "openai-api/fault/ok",
            "--seeds", "0", "--limit", str(args.tasks), "--embedder", "hash", "--data-dir", str(data), "--out",
            str(out), "--max-samples", str(args.concurrency), "--max-connections", str(args.concurrency)]
    try:
        original_s, _ = cli(argv, env)
        sent_original = server.stats()["requests"]
        calls_original = live_calls(out)
        rows = sum(1 for x in (out / "results.jsonl").read_text().splitlines() if x.strip())
        server.reset()
        rerun_s, stdout = cli(argv, env)
        sent_rerun = server.stats()["requests"]
        rerun_live = live_calls(out) - calls_original
        m = re.search(r"(\d+) live model call\(s\)", stdout)

        from sourcebench.harness.runner import RunConfig, Runner  # the same re-run, timed inside the process

        cfg = RunConfig(benchmark="phantomwiki", methods=args.methods.split(","), model="openai-api/fault/ok",
                        out=out, seeds=[0], limit=args.tasks, data_dir=data, embedder="hash",
                        max_samples=args.concurrency, max_connections=args.concurrency)
        os.environ.update(FAULT_BASE_URL=server.url, FAULT_API_KEY="rerun-bench-key-not-secret")
        t = time.perf_counter()
        summary = Runner(cfg).run()
        in_process_s = time.perf_counter() - t
    finally:
        server.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res = {
        "rows": rows, "methods": args.methods, "concurrency": args.concurrency, "latency_s": args.latency,
        "original_wall_s": round(original_s, 2), "original_live_calls": calls_original,
        "original_requests": sent_original,
        "rerun_wall_s": round(rerun_s, 2), "rerun_pct_of_original": round(100 * rerun_s / original_s, 2),
        "rerun_requests_to_server": sent_rerun, "rerun_live_calls_counted": rerun_live,
        "rerun_live_calls_printed": int(m.group(1)) if m else None,
        "rerun_in_process_s": round(in_process_s, 2), "rerun_in_process_live_calls": summary["live_calls"],
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }
    for k, v in res.items():
        print(f"{k:30s} {v}")
    ok = sent_rerun == 0 and rerun_live == 0 and summary["live_calls"] == 0
    print(f"zero model calls on re-run: {'yes' if ok else 'NO'}; re-run goal (<= 5% of original): "
          f"{'met' if res['rerun_pct_of_original'] <= 5 else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
