"""``sourcebench appworld-setup``: install AppWorld for the appworld benchmark."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sourcebench.adapters.appworld.install import setup


def add_parser(sub: Any) -> argparse.ArgumentParser:
    aw = sub.add_parser("appworld-setup", help="install AppWorld into its own venv (PyPI once), unpack its apps "
                        "offline and prepare its API docs, for the appworld benchmark")
    aw.add_argument("--root", type=Path, default=Path("data") / "appworld",
                    help="AppWorld root (APPWORLD_ROOT), default ./data/appworld")
    aw.add_argument("--python", help="interpreter (>= 3.11) to create the venv with (default: this one)")

    return aw


def run(a: argparse.Namespace) -> int:
    inst = setup(a.root, a.python, log=print)
    docs = inst.read_docs()["docs"]
    n_all = sum(len(v) for v in docs.values())
    n_docs_app = len(docs.get("api_docs", []))
    print(f"AppWorld ready in {inst.root}: {n_all - n_docs_app} API specifications of {len(docs) - 1} apps, the "
          f"supervisor's included (plus {n_docs_app} of the api_docs app, which the agent does not get)")
    missing = inst.tasks_missing()
    if missing:
        print(f"tasks: {missing}; with internet access run: APPWORLD_ROOT={inst.root} {inst.python.parent}/appworld "
              "download data")
    return 0
