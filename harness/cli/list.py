"""``sourcebench list``: the registered methods and benchmarks."""

from __future__ import annotations

import argparse
from typing import Any

from .common import console


def add_parser(sub: Any) -> argparse.ArgumentParser:
    return sub.add_parser("list", help="list registered methods and benchmarks")



def run(a: argparse.Namespace) -> int:
    from rich.table import Table

    from ..registry import benchmark_names, get_benchmark_class, get_method_class, method_names

    con = console()
    t = Table(title="methods")
    t.add_column("name")
    t.add_column("version")
    t.add_column("learns from guidance")
    t.add_column("description")
    for n in method_names():
        try:
            c = get_method_class(n)
            t.add_row(n, c.version, "yes" if c.uses_guidance else "no", c.description or (c.__doc__ or "").strip().split("\n")[0])
        except Exception as e:  # a broken third-party plugin must not hide the others
            t.add_row(n, "?", "?", f"[red]cannot load: {e}[/]")
    con.print(t)
    b = Table(title="benchmarks")
    b.add_column("name")
    b.add_column("version")
    b.add_column("scoring")
    b.add_column("options")
    for n in benchmark_names():
        try:
            c = get_benchmark_class(n)
            b.add_row(n, c.version, c.scorer_name, ", ".join(c.known_options) if len(c.known_options) < 5 else "per-source paths")
        except Exception as e:
            b.add_row(n, "?", "?", f"[red]cannot load: {e}[/]")
    con.print(b)
    return 0
