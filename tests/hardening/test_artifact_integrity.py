"""A shared sub-artifact (the retrieval index Hybrid RAG, AWM, RIKA, the KB curator and the template
method reuse) altered on disk stops the next run with one line naming it: no failed rows, no changed
score. Removing the folder rebuilds it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sourcebench.harness.cli import main
from tests.hardening.test_bad_input import pw_data, run


def _results(out: Path) -> bytes:
    return (out / "results.jsonl").read_bytes()


def test_an_altered_shared_index_stops_the_run_naming_it(tmp_path, capsys):
    out = tmp_path / "run"
    data = pw_data(tmp_path)
    args = run(out, data, "phantomwiki", "hybrid_rag")
    assert main(args) == 0
    before = _results(out)
    (index,) = [p for p in (out / "artifacts" / "hybrid_index").iterdir() if (p / "artifact.json").is_file()]
    (cell,) = [p for p in (out / "artifacts" / "method_hybrid_rag").iterdir() if (p / "artifact.json").is_file()]
    assert json.loads((cell / "artifact.json").read_text())["uses"] == [f"hybrid_index/{index.name}"]

    # the index's largest file altered (reordered bytes: still readable, wrong order)
    big = max((p for p in index.rglob("*") if p.is_file() and p.name != "artifact.json"), key=lambda p: p.stat().st_size)
    raw = big.read_bytes()
    big.write_bytes(raw[len(raw) // 2:] + raw[: len(raw) // 2])
    capsys.readouterr()
    more = [a if a != "2" else "4" for a in args]  # --limit 4: new tasks to answer with the altered index
    rc = main(more)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(index) in err and "remove the folder to rebuild it" in err
    assert _results(out) == before  # no failed rows saved, nothing rescored

    # truncated instead: the same
    big.write_bytes(raw[:10])
    assert main(more) == 2 and _results(out) == before

    # removed: rebuilt from the source, and the run goes on
    shutil.rmtree(index)
    assert main(more) == 0
    rows = [json.loads(line) for line in _results(out).splitlines()]
    assert len(rows) == 4 and not any(r["failed"] for r in rows)
    assert _results(out).startswith(before)
