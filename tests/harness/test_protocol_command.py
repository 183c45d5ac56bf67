"""``sourcebench protocol``: the model-calling protocols give exactly what they gave before their split into
the core's runner part (raw scores) and the reports' statistics (verdicts, rates, p-values).

``golden/protocols.json`` was recorded by the code before that split (``reports.protocols.compute`` at
commit 1c6321b) on the toy run of ``tests/protocol_toys.py``, by running ``SEQUENCE`` in order on a fresh
run folder, then ``sourcebench protocol all RUN`` and the report with every protocol. Every key it holds
must come back with the same value (new keys, e.g. the raw score lists, may be added), and the printed
tables and the report's protocol sections must be identical.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from sourcebench.harness.cli import main
from sourcebench.harness.providers import scripted
from sourcebench.reports.leaderboard import write_report
from tests.protocol_toys import make_toy_run, reply, toys_registered

GOLDEN = Path(__file__).parent / "golden" / "protocols.json"

ALL = None  # every method of the run
# (key, protocol, methods, settings), run in this order, each after removing the protocol's earlier file
SEQUENCE: list[tuple[str, str, list[str] | None, dict[str, Any]]] = [
    ("prequential_block2", "prequential", ALL, {"block_size": 2}),
    ("prequential_default", "prequential", ALL, {}),
    ("harmful_all_1", "harmful", ALL, {"max_entries": 0, "repeats": 1}),
    ("harmful_notes_3", "harmful", ["toy_notes", "toy_reported"], {"max_entries": 0, "repeats": 3}),
    ("harmful_sampled", "harmful", ["toy_notes"], {"max_entries": 1, "seed": 1}),
]


def compute_fn():
    from sourcebench.harness.cli.protocol import compute

    return compute


def record(run: Path) -> dict[str, Any]:
    """What the golden file holds, computed now on ``run``."""
    out: dict[str, Any] = {}
    scripted.set_script(reply)
    try:
        compute = compute_fn()
        for key, name, methods, settings in SEQUENCE:
            (run / "protocols" / f"{name}.json").unlink(missing_ok=True)
            out[key] = compute(name, run, methods=methods, settings=settings)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["protocol", "all", str(run)]) == 0
        out["cli_stdout"] = buf.getvalue().replace(str(run), "<RUN>")
        for n in ("prequential", "harmful"):
            out[f"cli_{n}_json"] = json.loads((run / "protocols" / f"{n}.json").read_text())
        md = write_report(run, out_dir=run.parent / "rep", protocols=["key-overlap", "break-even", "prequential",
                                                                      "harmful"])
        out["report_md"] = protocol_sections(md["md"].read_text()).replace(str(run), "<RUN>")
    finally:
        scripted.set_script(None)
    return out


def protocol_sections(md: str) -> str:
    """The report's protocol sections (the rest holds run ids, times and versions)."""
    parts = md.split("\n## ")
    return "\n## ".join(p for p in parts if p.startswith("Protocol"))


# An artifact folder's name hashes the code that built it (edited code never reuses an artifact), and the toy
# methods' code is every file of tests/ (their top-level package), this one included: the one field that
# changes with any edit of the tests, whatever the protocols compute.
CODE_HASHED = {"artifact"}


def old_keys_equal(old: Any, new: Any, where: str = "") -> list[str]:
    """Where ``new`` differs from ``old`` on the keys ``old`` has (extra keys in ``new`` are allowed)."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{where}: {type(new).__name__} instead of an object"]
        return [d for k in old if k not in CODE_HASHED
                for d in (old_keys_equal(old[k], new[k], f"{where}.{k}") if k in new else [f"{where}.{k}: missing"])]
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{where}: list of {len(new) if isinstance(new, list) else type(new).__name__}, was {len(old)}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in old_keys_equal(a, b, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {new!r}, was {old!r}"]


@pytest.mark.slow
def test_protocol_results_and_tables_are_the_ones_before_the_split(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    with toys_registered():
        new = json.loads(json.dumps(record(make_toy_run(tmp_path / "run"))))
    assert set(new) == set(golden)
    assert old_keys_equal(golden, new) == []
    assert all(a.get("artifact") or a["status"] != "ok" for k in ("harmful_all_1", "cli_harmful_json")
               for m in new[k]["methods"] for a in m.get("artifacts", []))
    assert new["cli_stdout"] == golden["cli_stdout"] and new["report_md"] == golden["report_md"]
