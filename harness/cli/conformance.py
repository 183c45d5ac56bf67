"""The checks every method must pass, shipped so that a method from another package can run them.

``sourcebench check-method NAME`` runs them on a registered method and prints one line per check;
in a test suite, ``assert_conforms(MyMethod, tmp_path)`` (or ``check_method(...)``, which returns
the problems instead of raising) does the same. Everything runs through the real runner on
TinyWiki (``sourcebench.adapters.tinywiki``, in memory) with the scripted model and the hash embedder, so the
checks need no data, no network and no model, and take seconds:

* identity: a ``Method`` subclass whose ``name`` is its registered name, a version, a typed config
  that rejects unknown settings, a JSON ``describe()``;
* run: learn and test on two split seeds; one scored row per test task and seed, none duplicated,
  no method error (a crash in ``answer`` is a scored failure, and a failure of this check);
* artifacts: frozen and content-addressed (they verify), one per split for a method that uses
  guidance, else one; no reference answer stored in any of them (TinyWiki's canary strings);
* resume: the same run again makes no model call and adds no row;
* hooks (``harness.method``): entries with unique ids, ``without`` removes exactly one entry and
  leaves the loaded state unchanged; ``artifact_stats`` and ``source_regions`` well-formed;
  ``cli_commands`` valid, with names the CLI does not already use;
* protocols: key-overlap, break-even, prequential and harmful-entry run on the run folder with the
  method next to a baseline, and report it.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import registry
from ..method import Method

BASELINE = "hybrid_rag"  # the method compared with in key-overlap and break-even
PROTOCOL_NAMES = ("key-overlap", "break-even", "prequential", "harmful")


@dataclass(frozen=True)
class Problem:
    """One failed check: which check, and what is wrong."""

    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


class Checks:
    """The problems found so far, grouped by check (a check with none passed)."""

    def __init__(self, report: Callable[[str, bool, str], None] | None = None):
        self.problems: list[Problem] = []
        self.report = report or (lambda check, ok, detail: None)

    def check(self, name: str, failures: list[str], detail: str = "") -> bool:
        self.problems += [Problem(name, f) for f in failures]
        self.report(name, not failures, "; ".join(failures) if failures else detail)
        return not failures


def _resolve(cls_or_name: type | str) -> tuple[str, Any]:
    if isinstance(cls_or_name, str):
        return cls_or_name, registry.get_method_class(cls_or_name)
    return str(getattr(cls_or_name, "name", "") or ""), cls_or_name


def check_method(cls_or_name: type | str, workdir: Path | None = None, *, protocols: bool = True,
                 report: Callable[[str, bool, str], None] | None = None) -> list[Problem]:
    """Run every check on a method (a class, or a registered name); return the problems (none: it conforms).

    ``workdir``: where the run folder goes (a temporary folder, removed after, when None).
    ``report(check, ok, detail)`` is called as each check finishes (the CLI prints it).
    """
    checks = Checks(report)
    try:
        name, cls = _resolve(cls_or_name)
    except Exception as e:  # noqa: BLE001 - an unloadable plugin is this check's finding
        checks.check("registered", [f"{type(e).__name__}: {e}"])
        return checks.problems
    if not _identity(checks, name, cls):
        return checks.problems
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="sourcebench-check-") as tmp:
            _checked_run(checks, name, cls, Path(tmp), protocols)
    else:
        _checked_run(checks, name, cls, Path(workdir), protocols)
    return checks.problems


def assert_conforms(cls_or_name: type | str, workdir: Path | None = None, *, protocols: bool = True) -> None:
    """``check_method`` for pytest: an AssertionError listing every problem."""
    problems = check_method(cls_or_name, workdir, protocols=protocols)
    assert not problems, "method does not conform:\n" + "\n".join(f"- {p}" for p in problems)


# -- identity ----------------------------------------------------------------------------------------


def _identity(checks: Checks, name: str, cls: Any) -> bool:
    """Identity and config; False when the method cannot even be built with its default config."""
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        return checks.check("identity", [f"{cls!r} is not a subclass of harness.method.Method"])
    bad = []
    if not name:
        bad.append("the class sets no name")
    elif cls.name != name:
        bad.append(f"registered as {name!r} but its name attribute is {cls.name!r}")
    if not cls.version:
        bad.append("no version")
    if not checks.check("identity", bad, f"{name} version {cls.version}"):
        return False
    try:
        json.dumps(cls().describe())
    except Exception as e:  # noqa: BLE001
        why = f"the default config does not build, or describe() is not JSON: {type(e).__name__}: {e}"
        return checks.check("config", [why])
    try:
        cls({"definitely_not_a_setting": 1})
        bad = ["an unknown setting is accepted (derive the config from MethodConfig: unknown keys are an error)"]
    except Exception:  # noqa: BLE001 - any rejection will do
        bad = []
    checks.check("config", bad, cls.Config.__name__)
    return True


# -- the run -------------------------------------------------------------------------------------------


def _checked_run(checks: Checks, name: str, cls: Any, workdir: Path, protocols: bool) -> None:
    from sourcebench.adapters.tinywiki import NAME as BENCH
    from sourcebench.adapters.tinywiki import TinyWiki

    with registry.registered(registry.METHOD_GROUP, {name: cls}), \
            registry.registered(registry.BENCHMARK_GROUP, {BENCH: TinyWiki}):
        out = workdir / "run"
        baseline = BASELINE if name != BASELINE else "no_source"
        methods = [name, baseline] if protocols else [name]
        again = _run(checks, out, methods)
        if again is None:
            return
        _rows_and_artifacts(checks, out, name, cls)
        redo = f"running the finished run again made {again['live_calls']} call(s), {again['rows_new']} new row(s)"
        checks.check("resume", [] if again["rows_new"] == 0 and again["live_calls"] == 0 else [redo],
                     "a finished run makes no call")
        _hooks(checks, out, name, cls)
        if protocols:
            _protocols(checks, out, name, baseline)


def _run(checks: Checks, out: Path, methods: list[str]) -> dict[str, Any] | None:
    """Run twice; the second run's summary (None when the run failed)."""
    from sourcebench.adapters.tinywiki import NAME as BENCH

    from ..runner import RunConfig, Runner

    cfg = RunConfig(benchmark=BENCH, methods=methods, model="scripted/extractive", out=out, seeds=[0, 1],
                    embedder="hash")
    try:
        Runner(cfg).run()
        return Runner(cfg).run()
    except Exception as e:  # noqa: BLE001 - the finding of this check
        checks.check("run", [f"the run failed: {type(e).__name__}: {e}"])
        return None


def _rows_and_artifacts(checks: Checks, out: Path, name: str, cls: Any) -> None:
    from sourcebench.adapters.tinywiki import CANARY
    from sourcebench.adapters.tinywiki import NAME as BENCH

    from ..artifacts import ArtifactStore
    from ..io import read_json, read_jsonl

    rows = [r for r in read_jsonl(out / "results.jsonl") if r["method"] == name]
    manifests = [read_json(p) for p in sorted((out / "splits" / BENCH / "people").glob("seed*.json"))]
    expected = sum(len(m["test_ids"]) for m in manifests)
    bad = []
    if len(rows) != expected:
        bad.append(f"{len(rows)} scored rows for {expected} test tasks over {len(manifests)} split seeds")
    if len({(r["seed"], r["task_id"]) for r in rows}) != len(rows):
        bad.append("a (seed, task) is scored twice")
    errors = [r["failure_reason"] for r in rows if str(r.get("failure_reason") or "").startswith("method error")]
    if errors:
        bad.append(f"{len(errors)} answer(s) raised: {errors[0]}")
    checks.check("run", bad, f"{len(rows)} rows on {len(manifests)} seeds")

    store = ArtifactStore(out / "artifacts")
    arts = sorted(p.parent for p in (out / "artifacts").glob(f"method_{name.replace('/', '_')}/*/artifact.json"))
    want = len(manifests) if cls.uses_guidance else 1
    bad = []
    if len(arts) != want:
        bad.append(f"{len(arts)} artifact(s), expected {want} ({'one per split' if cls.uses_guidance else 'one'})")
    bad += [f"{a}: does not verify (changed after it was frozen)" for a in arts if not store.verify(a)]
    checks.check("artifacts", bad, f"{len(arts)} frozen")
    leaked = [str(p.relative_to(out)) for p in sorted((out / "artifacts").rglob("*"))
              if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".txt", ".yaml", ".csv")
              and CANARY in p.read_text(errors="ignore")]
    checks.check("no references stored", [f"reference answers stored in {p}" for p in leaked[:3]])


# -- the optional hooks ------------------------------------------------------------------------------


def _hooks(checks: Checks, out: Path, name: str, cls: Any) -> None:
    from ..commands import commands_of

    method = cls()
    arts = sorted(p.parent for p in (out / "artifacts").glob(f"method_{name.replace('/', '_')}/*/artifact.json"))
    bad = []
    for a in arts:
        try:
            stats = cls.artifact_stats(a)
            json.dumps(stats)
            if stats is not None and not isinstance(stats, dict):
                bad.append(f"artifact_stats returned {type(stats).__name__}, not a dict or None")
        except Exception as e:  # noqa: BLE001
            bad.append(f"artifact_stats({a.name}): {type(e).__name__}: {e}")
    try:
        regions = cls.source_regions(out)
        if not isinstance(regions, dict) or not all(
                isinstance(m, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in m.items())
                for m in regions.values()):
            bad.append("source_regions must return {source id: {element id: region id}}")
    except Exception as e:  # noqa: BLE001
        bad.append(f"source_regions: {type(e).__name__}: {e}")
    checks.check("artifact hooks", bad)

    cmds, bad = commands_of(name, cls)
    bad += _command_problems(name, cmds)
    checks.check("commands", bad, ", ".join(c.name for c in cmds) or "none")

    if method.has_entries():
        checks.check("entries", _entry_problems(out, name, method), method.entry_kind)


def builtin_commands() -> set[str]:
    """The subcommands ``sourcebench`` defines itself or a package registers (which a method's command
    may not take)."""
    from ..registry import command_targets
    from .common import BUILTIN_COMMANDS

    return set(BUILTIN_COMMANDS) | set(command_targets())


def _command_problems(name: str, cmds: list[Any]) -> list[str]:
    import argparse

    from ..commands import method_commands

    _, clashes = method_commands(builtin_commands())
    bad = [p for p in clashes if p.startswith(f"method {name}:") or f"by method {name};" in p]
    for c in cmds:
        sub = argparse.ArgumentParser(prog="sourcebench").add_subparsers(dest="cmd")
        try:
            parser = c.add_parser(sub)
        except Exception as e:  # noqa: BLE001
            bad.append(f"command {c.name!r}: add_parser raised {type(e).__name__}: {e}")
            continue
        if not isinstance(parser, argparse.ArgumentParser):
            bad.append(f"command {c.name!r}: add_parser must return the parser it added")
        elif set(sub.choices) != {c.name}:
            bad.append(f"command {c.name!r}: add_parser added {', '.join(sub.choices) or 'nothing'} instead")
        if not callable(c.run):
            bad.append(f"command {c.name!r}: run is not callable")
    return bad


def _entry_problems(out: Path, name: str, method: Method) -> list[str]:
    from sourcebench.harness.protocols.entries import (
        entry_access,  # lazy: imported only when the protocols are checked
    )
    from sourcebench.harness.protocols.session import RunSession

    access = entry_access(method)
    assert access is not None
    session = RunSession(out, methods=[name])
    bad: list[str] = []
    for plan in session.plans():
        folder = session.run_artifact(session.methods[0], plan)
        if folder is None:
            return [f"no artifact for seed {plan.seed}"]
        try:
            state = session.load_state(session.methods[0], folder, plan)
            entries = access.entries(state)
        except Exception as e:  # noqa: BLE001
            return [f"entries(state): {type(e).__name__}: {e}"]
        ids = [e.id for e in entries]
        if len(set(ids)) != len(ids):
            bad.append(f"seed {plan.seed}: entry ids are not unique")
        for e in entries[:3]:
            try:
                reduced = access.without(state, e.id)
                left = [x.id for x in access.entries(reduced)]
                after = [x.id for x in access.entries(state)]
            except Exception as ex:  # noqa: BLE001
                bad.append(f"without(state, {e.id!r}): {type(ex).__name__}: {ex}")
                continue
            if e.id in left or sorted(left) != sorted(i for i in ids if i != e.id):
                bad.append(f"without(state, {e.id!r}) does not remove exactly that entry")
            if after != ids:
                bad.append(f"without(state, {e.id!r}) changed the state it was given")
    return bad


# -- protocols -----------------------------------------------------------------------------------------


def _protocols(checks: Checks, out: Path, name: str, baseline: str) -> None:
    from .protocol import compute  # lazy: imported only when the protocols are checked

    for proto in PROTOCOL_NAMES:
        try:
            res = compute(proto, out, methods=[name], baseline=baseline, settings={"max_entries": 3})
        except Exception as e:  # noqa: BLE001 - the finding of this check
            checks.check(f"protocol {proto}", [f"{type(e).__name__}: {e}"])
            continue
        checks.check(f"protocol {proto}", _protocol_problems(proto, res, name, baseline),
                     _protocol_detail(proto, res, name))


def _method_rows(proto: str, res: dict[str, Any]) -> list[dict[str, Any]]:
    if proto in ("prequential", "harmful"):
        return list(res.get("methods") or [])
    return [m for b in res.get("benchmarks") or [] for m in b.get("methods") or []]


def _protocol_problems(proto: str, res: dict[str, Any], name: str, baseline: str) -> list[str]:
    if proto in ("key-overlap", "break-even"):
        bad = [f"{b.get('benchmark')}: {b.get('status')} ({b.get('reason', '')})" for b in res.get("benchmarks") or []
               if b.get("status") != "ok"]
        if bad:
            return bad
    rows = [m for m in _method_rows(proto, res) if m.get("method") == name]
    if not rows:
        return [f"{name} is missing from the result"]
    row = rows[0]
    if proto == "break-even" and row.get("status") != "ok":
        return [f"status {row.get('status')}"]
    if proto == "harmful" and row.get("status") == "not learned":
        return ["no learned artifact found for the run's cells"]
    return []


def _protocol_detail(proto: str, res: dict[str, Any], name: str) -> str:
    row = next((m for m in _method_rows(proto, res) if m.get("method") == name), {})
    if proto == "harmful":
        return f"{row.get('status')}, {row.get('n_evaluated', 0)} entries evaluated"
    if proto == "prequential":
        return f"mode {row.get('mode')}"
    return "reported"


# -- sourcebench check-method --------------------------------------------------------------------------


def add_parser(subparsers: Any) -> Any:
    p = subparsers.add_parser(
        "check-method", help="run the conformance checks on a registered method (e.g. one from your package)",
        description="Learn and test METHOD on TinyWiki (in memory) with the scripted model and the hash embedder, "
        "then check its rows, artifacts, optional hooks and every protocol; exit 1 when a check fails. "
        "The same checks in a test suite: sourcebench.assert_conforms(MyMethod, tmp_path).")
    p.add_argument("method", help="registered method name (sourcebench list)")
    p.add_argument("--out", type=Path, help="keep the run folder here (default: a temporary folder, removed)")
    p.add_argument("--no-protocols", action="store_true", help="skip the four protocols (faster)")
    return p


def main(a: Any) -> int:
    import contextlib
    import io
    import sys

    real = sys.stdout

    def show(check: str, ok: bool, detail: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'}  {check}{': ' + detail if detail else ''}", file=real, flush=True)

    # the runs' own progress output (inspect's task summaries, protocol progress) is not the report
    with contextlib.redirect_stdout(io.StringIO()):
        problems = check_method(a.method, a.out, protocols=not a.no_protocols, report=show)
    print(f"{a.method}: {'conforms' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0
