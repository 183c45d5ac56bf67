"""The runner's parts are used through their public seams only.

The run folder (harness/runfolder.py), the planner (harness/planner.py), the backend
(harness/backend.py) and the runner (harness/runner.py) keep their private names to themselves:
the executors, the inspect tasks, the protocols, the benchmarks and the tests call the runner's
public cell API (``preflight``, ``learn``, ``test``, ``flush_usage``, ``artifact_inputs``, ...).
"""

from __future__ import annotations

import ast
import subprocess
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from tests.conftest import ROOT

RUNNER_MODULES = ("harness/runner.py", "harness/runfolder.py", "harness/planner.py", "harness/backend.py")
# the private names the executors and the protocols once reached into
ALWAYS = {"_learn_all", "_test_all", "_preflight", "_flush_usage", "_artifact_inputs"}


def _private_names() -> set[str]:
    """Every private name the runner's modules define: module-level names, classes' methods and attributes."""
    names = set(ALWAYS)
    for rel in RUNNER_MODULES:
        path = ROOT / rel
        if not path.exists():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = node.name
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                name = node.attr
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                name = node.id
            else:
                continue
            if name.startswith("_") and not name.startswith("__"):
                names.add(name)
    return names


def _python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = {ROOT / p for p in listed.stdout.split()}
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "*.py"], cwd=ROOT,
                               capture_output=True, text=True, check=True)
    files |= {ROOT / p for p in untracked.stdout.split()}
    return sorted(f for f in files if f.exists())


def uses_of_runner_privates() -> list[str]:
    private = _private_names()
    own = {ROOT / m for m in RUNNER_MODULES}
    found = []
    for path in _python_files():
        if path in own:
            continue
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), str(rel))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private:
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue  # the module's own class's name, not the runner's
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in (
                    "runner", "runfolder", "planner", "backend"):
                found += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("_")]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) > 1
                  and isinstance(node.args[1], ast.Constant) and node.args[1].value in private):
                found.append(f"{rel}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_nothing_outside_the_runner_uses_its_private_names():
    assert uses_of_runner_privates() == []


def test_a_pending_cell_is_a_typed_frozen_cell(tmp_path):
    from sourcebench.harness.planner import Cell, Plan
    from sourcebench.harness.runner import RunConfig, Runner

    runner = Runner(RunConfig(benchmark="phantomwiki", methods=["no_source", "hybrid_rag"], model="scripted/extractive",
                              out=tmp_path / "run", seeds=[0, 1], limit=2, embedder="hash"))
    _, plans = runner.plan(write_manifests=False)
    pending = runner.planner.pending(runner.methods, plans, set())
    assert pending and all(isinstance(c, Cell) and isinstance(c.plan, Plan) for c in pending)
    assert [(c.method.name, c.seed) for c in pending][:2] == [("no_source", 0), ("no_source", 1)]
    cell = pending[0]
    with pytest.raises(FrozenInstanceError):
        cell.method = runner.methods[1]  # type: ignore[misc]
    done = {cell.key(runner.bench.name, t) for t in cell.tests}
    assert cell.todo(runner.bench.name, done) == []
    assert cell not in runner.planner.pending(runner.methods, plans, done)


def test_the_protocols_in_reports_build_no_runner_and_no_model_client():
    """Re-entering a run folder on its backend (``RunSession``: the runner, the call cache, the clients) is
    the core's (harness/protocols/); the protocols under reports/ get their calls from a session."""
    built = []
    for path in sorted((ROOT / "reports" / "protocols").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "Runner", "LLM", "ProtocolLLM", "ArtifactStore", "CallCache"):
                built.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(...)")
    assert built == []
    from sourcebench.harness.protocols.session import RunSession

    assert RunSession.__module__ == "sourcebench.harness.protocols.session"
