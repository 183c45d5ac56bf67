"""Every registered method passes the shipped conformance checks (``sourcebench.harness.cli.conformance``).

The checks themselves live in the package, so a method from another package runs the same ones with
``sourcebench check-method NAME`` or ``sourcebench.assert_conforms(MyMethod, tmp_path)``.
This file also checks that the checks catch what they claim to (a leaky, a crashing and a
mis-declared method each fail with the named problem).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sourcebench import assert_conforms, check_method
from sourcebench.harness.data import Answer, Task
from sourcebench.harness.method import Command, Context, LearnContext, Method
from sourcebench.harness.registry import method_names

SLOW = {"raptor"}  # UMAP's first fit compiles with numba (~12 s)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in method_names()])
def test_registered_method_conforms(name: str, tmp_path: Path):
    assert_conforms(name, tmp_path)


# -- the checks fail where they should ---------------------------------------------------------------


class Leaky(Method):
    """Stores the guidance references in its artifact (what the canary check must catch)."""

    name = "leaky"
    uses_guidance = True

    async def learn(self, source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        (ctx.workdir / "answers.json").write_text(json.dumps([t.reference for t in guidance]))
        return {}

    def load(self, artifact_dir: Path, ctx: Context) -> Any:
        return None

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        return await ctx.solve(task, [])


class Crashy(Leaky):
    """Learns nothing, and raises on every answer."""

    name = "crashy"
    uses_guidance = False

    async def learn(self, source, guidance, ctx) -> dict[str, Any]:
        return {}

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        raise RuntimeError("boom")


class BadHooks(Crashy):
    """Answers, but declares entries whose removal removes nothing, and a command without a parser."""

    name = "bad-hooks"

    async def answer(self, task: Task, state: Any, ctx: Context) -> Answer:
        return await ctx.solve(task, [])

    def entries(self, state: Any) -> list[tuple[str, str]]:
        return [("a", "x"), ("b", "y")]

    def without(self, state: Any, entry_id: str) -> Any:
        return state

    @classmethod
    def cli_commands(cls) -> list[Command]:
        return [Command("run", lambda sub: None, lambda a: 0)]


def _checks(problems) -> set[str]:
    return {p.check for p in problems}


def test_the_checks_catch_a_leak_a_crash_and_bad_hooks(tmp_path: Path):
    assert "no references stored" in _checks(check_method(Leaky, tmp_path / "l", protocols=False))
    crash = check_method(Crashy, tmp_path / "c", protocols=False)
    assert "run" in _checks(crash) and any("boom" in p.message for p in crash)
    bad = check_method(BadHooks, tmp_path / "b", protocols=False)
    msgs = [str(p) for p in bad]
    assert _checks(bad) == {"entries", "commands"}, msgs
    assert any("does not remove exactly that entry" in m for m in msgs)
    assert any("built-in sourcebench command" in m for m in msgs) and any("must return the parser" in m for m in msgs)
    with pytest.raises(AssertionError, match="no references stored"):
        assert_conforms(Leaky, tmp_path / "l2", protocols=False)
    assert "leaky" not in method_names()  # registered only while it was checked


def test_check_method_command(tmp_path: Path, capsys):
    from sourcebench.harness.cli import main

    assert main(["check-method", "no_source", "--out", str(tmp_path), "--no-protocols"]) == 0
    out = capsys.readouterr().out
    assert "ok    run: " in out and out.rstrip().endswith("no_source: conforms")
    assert main(["check-method", "no-such-method"]) == 1
    assert "FAIL  registered" in capsys.readouterr().out
