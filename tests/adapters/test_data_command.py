"""`sourcebench data`: the state of every benchmark, where it was looked for and how to get it."""

import json
from pathlib import Path

from sourcebench.adapters import availability
from sourcebench.harness.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIX = {"phantomwiki", "apibench", "swe_qa", "multidoc2dial", "narrativeqa", "appworld"}


def report(capsys, *args: str) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["data", "--json", *args]) == 0
    return {r["benchmark"]: r for r in json.loads(capsys.readouterr().out)}


def test_fixture_folder_states(capsys, monkeypatch):
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "huggingface.co cannot be resolved")
    rows = report(capsys, "--data-dir", str(FIXTURES))
    assert SIX <= set(rows)
    assert rows["multidoc2dial"]["state"] == "present" and "dmv: 2 documents" in rows["multidoc2dial"]["detail"]
    assert rows["narrativeqa"]["state"] == "present" and "2 of 12 requested stories" in rows["narrativeqa"]["detail"]
    assert rows["appworld"]["state"] == "present" and "tasks: train 3, test_normal 3" in rows["appworld"]["detail"]
    missing = rows["phantomwiki"]
    assert missing["state"] == "missing" and missing["how_to_get"]
    assert missing["looked_in"] == [str(FIXTURES / "phantomwiki"), str(FIXTURES)]


def test_empty_folder_says_where_it_looked_and_how_to_get_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "huggingface.co cannot be resolved")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    rows = report(capsys, "--data-dir", str(tmp_path))
    assert {rows[b]["state"] for b in SIX} == {"missing"}
    md2d = rows["multidoc2dial"]
    assert "not available offline (huggingface.co cannot be resolved)" in md2d["detail"]
    assert md2d["looked_in"][-1] == "huggingface:IBM/multidoc2dial@refs/convert/parquet"
    assert "appworld-setup" in rows["appworld"]["how_to_get"]
    # every benchmark names the command that gets its data
    assert {b: rows[b]["get_with"] for b in SIX} == {
        **{b: f"sourcebench data fetch {b}" for b in SIX - {"appworld"}}, "appworld": "sourcebench appworld-setup"}
    # the text form prints the same, one benchmark per block
    capsys.readouterr()
    assert main(["data", "--data-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "narrativeqa     MISSING" in text and "looked in: " in text and "how to get it: " in text
    assert "get it with: sourcebench data fetch multidoc2dial" in text and "get it with: sourcebench appworld-setup" in text


def test_this_machine(capsys):
    """The real state here: whatever it is, every benchmark is reported with a known state."""
    rows = report(capsys)
    assert SIX <= set(rows)
    for r in rows.values():
        assert r["state"] in availability.STATES, r
        if r["state"] != "present":
            assert r["how_to_get"] and r["looked_in"], r


def test_bare_clone_has_phantomwiki_bundled(capsys, monkeypatch, tmp_path):
    """No data folder anywhere (a bare clone): PhantomWiki is present, from the universe the package ships."""
    import sourcebench.adapters.phantomwiki.benchmark as pw

    monkeypatch.setattr(pw, "default_data_dirs", lambda: [tmp_path / "data", tmp_path / "shared" / "data"])
    row = report(capsys)["phantomwiki"]
    assert row["state"] == "present" and row["location"] == str(pw.BUNDLED), row
    assert row["detail"].startswith("bundled with the package") and "seed1_people25_depth20" in row["detail"]
    capsys.readouterr()
    assert main(["data"]) == 0
    text = capsys.readouterr().out
    assert f"phantomwiki     PRESENT  {pw.BUNDLED}" in text and "bundled with the package" in text
