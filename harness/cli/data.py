"""``sourcebench data``: where each benchmark's data is, and ``data fetch`` to get it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sourcebench.adapters.availability import candidate_dirs
from sourcebench.adapters.fetch import command_for

from ..options import key_values
from ..registry import benchmark_names, get_benchmark_class
from .common import FETCH_EPILOG, Parser


def add_parser(sub: Any) -> argparse.ArgumentParser:
    d = sub.add_parser("data", help="say, for each benchmark, whether its data is present, where it was looked "
                       "for and which command gets it; `data fetch BENCHMARK` gets it")
    d.add_argument("--data-dir", type=Path)
    d.add_argument("--json", action="store_true", help="print one JSON list instead of text")
    dsub = d.add_subparsers(dest="data_cmd", metavar="ACTION", parser_class=Parser)
    df = dsub.add_parser("fetch", help="download (PhantomWiki: generate) a benchmark's real data, resumably and "
                         "checked", formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Get a benchmark's data into DEST/<benchmark>: every download is checked "
                         "against its size and sha256 (recorded in DEST/<benchmark>/fetch-manifest.json), an "
                         "interrupted one resumes, and a re-run keeps what still verifies. Needs internet.",
                         epilog=FETCH_EPILOG)
    df.add_argument("benchmark", help="apibench, swe_qa, multidoc2dial, narrativeqa or phantomwiki")
    df.add_argument("--dest", type=Path, default=Path("data"), help="data folder (default ./data, where runs look "
                    "first)")
    df.add_argument("--opt", action="append", metavar="KEY=VALUE", help="fetch setting (repeatable), e.g. "
                    "repos=flask,pytest for swe_qa, size=500 for phantomwiki")
    df.add_argument("--seed", help="phantomwiki: the generator's seed (same as --opt seed=N)")
    df.add_argument("--allow-unpinned", action="store_true", help="accept a download whose sha256 is not pinned "
                    "(default: refused)")
    df.add_argument("--python", help="phantomwiki: interpreter >= 3.12 for the generator's venv (--opt python=PATH)")

    return d


def data_report(data_dir: Path | None = None) -> list[dict[str, Any]]:
    """Per registered benchmark: state (present | remote | missing | unavailable | error), where it was
    found or looked for, what was found, and how to get it. Nothing is downloaded."""
    out = []
    for n in benchmark_names():
        try:
            bench = get_benchmark_class(n)(data_dir=data_dir)
            st = bench.data_status()
        except Exception as e:  # a broken adapter must not hide the state of the others
            out.append({"benchmark": n, "state": "error", "location": "", "looked_in": [],
                        "detail": f"{type(e).__name__}: {e}", "how_to_get": "", "get_with": command_for(n)})
            continue
        state = getattr(st, "state", None) or ("present" if st.present else "missing")
        looked = getattr(st, "looked_in", None) or [str(c) for c in candidate_dirs(bench)]
        out.append({"benchmark": n, "state": state, "location": st.location, "looked_in": looked,
                    "detail": st.detail, "how_to_get": st.how_to_get, "get_with": bench.fetch_command()})
    return out


def fetch(a: argparse.Namespace) -> int:
    settings = key_values(a.opt, "--opt")
    for key in ("seed", "python"):
        if getattr(a, key) is not None:
            settings[key] = getattr(a, key)
    if a.allow_unpinned:  # read by adapters.fetch.download, which the fetch modules call
        import os

        os.environ["SOURCEBENCH_ALLOW_UNPINNED"] = "1"
    bench = get_benchmark_class(a.benchmark)(data_dir=a.dest)
    report = bench.fetch(a.dest, settings, log=print)
    print(report.summary())
    if a.dest.resolve() != (Path.cwd() / "data").resolve():
        print(f"runs find it with --data-dir {a.dest} (or SOURCEBENCH_DATA_DIR={a.dest})")
    return 0


def run(a: argparse.Namespace) -> int:
    if a.data_cmd == "fetch":
        return fetch(a)
    rows = data_report(a.data_dir)
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    pad = " " * 16
    for r in rows:
        print(f"{r['benchmark']:15s} {r['state'].upper()}" + (f"  {r['location']}" if r["location"] else ""))
        print(f"{pad}{r['detail']}")
        if r.get("get_with"):
            print(f"{pad}get it with: {r['get_with']}")
        if r["state"] != "present":
            if r["looked_in"]:
                print(f"{pad}looked in: {', '.join(r['looked_in'])}")
            if r["how_to_get"]:
                print(f"{pad}how to get it: {r['how_to_get']}")
    return 0
