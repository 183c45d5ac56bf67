"""Measure the cost rates ``sourcebench estimate`` ships (harness/cost_rates.json).

Runs every registered method against the API-like test backend (tests/backends/api_server.py, in this
process, on 127.0.0.1) at medium reasoning effort on one source of each kind the repository can load
offline: the bundled PhantomWiki universe (documents), APIBench TorchHub (API records, when
../shared/data is there) and a code tree (``--code-tree DIR``, e.g. the flask sdist, with SWE-QA's
questions), then writes the measured calls and tokens per element, guidance task and test task.

    python benchmarks/calibrate_costs.py --out runs/calibration [--code-tree flask-3.1.1] [--write]
    python benchmarks/calibrate_costs.py --out runs/cal-sl --methods sourcelearn --kinds code \
        --code-tree flask-3.1.1 --write   # re-measure one method on one kind, keep the other rates

Without ``--write`` it prints the rates; with it, it rewrites harness/cost_rates.json (with
``--methods`` or ``--kinds``, only the measured methods' rates of the measured kinds are replaced). The test
backend's replies are shorter and its reasoning more regular than a real model's: the rates give the
shape of a run (how many calls each method makes per unit of work, how large its prompts are), and a
user who wants prices for their own model calibrates on a small run of it (``--calibration``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sourcebench.harness.estimate import RATES_FILE, dump_rates, measure  # noqa: E402
from sourcebench.harness.registry import method_names  # noqa: E402
from tests.backends.api_server import ApiServer  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def _run(out: Path, bench: list[str], limit: int, methods: list[str]) -> None:
    cmd = [sys.executable, "-m", "sourcebench.harness.cli", "run", *bench, "--methods", ",".join(methods),
           "--model", "openai-api/testapi/gpt-oss-120b", "--reasoning-effort", "medium",
           "--judge-reasoning-effort", "medium", "--embedder", "openai/text-embedding-3-large",
           "--seeds", "0", "--limit", str(limit), "--out", str(out), "--allow-degraded"]
    t0 = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    print(f"{' '.join(bench)}: {time.time() - t0:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="folder for the calibration run folders")
    ap.add_argument("--code-tree", type=Path, help="a repository tree for the code kind (flask's, with SWE-QA)")
    ap.add_argument("--limit", type=int, default=6, help="test tasks per source (default 6)")
    ap.add_argument("--methods", help="comma-separated methods to measure (default: every registered one)")
    ap.add_argument("--kinds", default="documents,api_docs,code", help="source kinds to measure: documents "
                    "(PhantomWiki), api_docs (TorchHub), code (SWE-QA flask, needs --code-tree); default all")
    ap.add_argument("--write", action="store_true", help="rewrite harness/cost_rates.json")
    a = ap.parse_args()
    methods = [m.strip() for m in a.methods.split(",") if m.strip()] if a.methods else method_names()
    kinds = {k.strip() for k in a.kinds.split(",") if k.strip()}
    folders = []
    with ApiServer() as api:
        os.environ.update(api.env())
        runs = [(a.out / "phantomwiki", ["--benchmark", "phantomwiki"])] if "documents" in kinds else []
        if (SHARED / "apibench").is_dir() and "api_docs" in kinds:
            runs.append((a.out / "torchhub", ["--benchmark", "apibench", "--sources", "torchhub",
                                              "--data-dir", str(SHARED)]))
        if a.code_tree and (SHARED / "swe_qa").is_dir() and "code" in kinds:
            runs.append((a.out / "flask", ["--benchmark", "swe_qa", "--sources", "flask", "--opt",
                                           f"flask={a.code_tree}", "--data-dir", str(SHARED)]))
        if not runs:
            raise SystemExit("nothing to measure: no source of the --kinds given could be loaded here")
        for out, bench in runs:
            _run(out, bench, a.limit, methods)
            folders.append(out)
    rates = measure(folders)
    from sourcebench.harness.provenance import git_commit

    meta = {"measured_on": [p.name for p in folders], "backend": "tests/backends/api_server.py, gpt-oss-120b, "
            "medium effort, text-embedding-3-large", "limit": a.limit, "seeds": [0], "git_commit": git_commit(),
            "code_tree": a.code_tree.name if a.code_tree else None,
            "date": time.strftime("%Y-%m-%d")}
    if a.methods or kinds != {"documents", "api_docs", "code"}:
        rates, meta = _merge(rates, meta, methods, kinds)
    text = dump_rates(rates, meta)
    if a.write:
        RATES_FILE.write_text(text + "\n", encoding="utf-8")
        print(f"wrote {RATES_FILE}")
    else:
        print(text)


def _merge(new: dict, meta: dict, methods: list[str], kinds: set[str]) -> tuple[dict, dict]:
    """The shipped rates with the measured methods' rates of the measured kinds replaced; the shipped
    meta keeps what it said and lists this re-measurement under ``updates``."""
    import json

    from sourcebench.harness.estimate import load_rates

    rates = load_rates()
    for m in methods:
        kept = {k: r for k, r in rates.get(m, {}).items() if k.split(":", 1)[0] not in kinds}
        rates[m] = {**kept, **new.get(m, {})}
    old = json.loads(RATES_FILE.read_text(encoding="utf-8")).get("meta", {}) if RATES_FILE.is_file() else {}
    old.setdefault("updates", []).append({**meta, "methods": methods, "kinds": sorted(kinds)})
    return rates, old


if __name__ == "__main__":
    main()
