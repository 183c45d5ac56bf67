"""CLI argument handling that is more than argparse plumbing."""

from __future__ import annotations

import pytest

from sourcebench.harness.cli import build_parser
from sourcebench.harness.options import resolve_guidance_limit


@pytest.mark.parametrize(("limit", "given", "expected"), [
    (None, None, None),  # a full run learns from every guidance task
    (20, None, 9),       # --limit keeps the split's 30:70 ratio: ceil(3 * 20 / 7)
    (8, None, 4),
    (1, None, 1),        # never zero guidance tasks
    (20, 5, 5),          # an explicit --guidance-limit wins
    (20, "all", None),   # ... and 'all' lifts it
    (None, 7, 7),
])
def test_guidance_limit_follows_limit_unless_given(limit, given, expected):
    assert resolve_guidance_limit(limit, given) == expected


def test_guidance_limit_argument_accepts_all_and_rejects_zero(capsys):
    parser = build_parser()
    base = ["run", "--benchmark", "phantomwiki", "--methods", "awm", "--model", "scripted/extractive"]
    assert parser.parse_args([*base, "--guidance-limit", "ALL"]).guidance_limit == "all"
    assert parser.parse_args([*base, "--guidance-limit", "3"]).guidance_limit == 3
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--guidance-limit", "0"])
    assert "positive integer" in capsys.readouterr().err


def test_reasoning_effort_reaches_solver_and_judge_and_is_recorded(tmp_path, shared_data):
    """--reasoning-effort / --judge-reasoning-effort: passed to each role's calls, kept in run.json."""
    import json

    from sourcebench.harness.cli import main
    from sourcebench.harness.providers import scripted
    from tests.conftest import need_data

    need_data("swe_qa")
    flask = tmp_path / "flask"
    (flask / "src").mkdir(parents=True)
    (flask / "src" / "app.py").write_text("def create_app():\n    return 'app'\n")
    out = tmp_path / "run"
    scripted.CALLS.clear()
    rc = main(["run", "--benchmark", "swe_qa", "--sources", "flask", "--opt", f"flask={flask}", "--methods",
               "no_source", "--model", "scripted/extractive", "--judge-model", "scripted/judge", "--seeds", "0",
               "--limit", "1", "--embedder", "hash", "--out", str(out), "--no-report",
               "--reasoning-effort", "low", "--judge-reasoning-effort", "high"])
    assert rc == 0
    efforts = {(c["model"], c["reasoning_effort"]) for c in scripted.CALLS}
    assert efforts == {("extractive", "low"), ("judge", "high")}
    run = json.loads((out / "run.json").read_text())
    assert run["model"]["reasoning_effort"] == "low" and run["judge_model"]["reasoning_effort"] == "high"


def test_the_builtin_command_names_are_the_parsers():
    """``common.BUILTIN_COMMANDS`` (what conformance reserves) names exactly the parser's own commands
    and none that a package registers."""
    import argparse

    from sourcebench.harness.cli.common import BUILTIN_COMMANDS
    from sourcebench.harness.registry import command_targets

    parser = build_parser(with_method_commands=False)
    names = {n for a in parser._actions if isinstance(a, argparse._SubParsersAction) for n in a.choices}
    assert names == set(BUILTIN_COMMANDS) | set(command_targets())
    assert not set(BUILTIN_COMMANDS) & set(command_targets())
