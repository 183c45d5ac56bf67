"""The AppWorld worker runs model-written code: it gets no secret of the user's environment, its own
scratch folder as home and working directory, CPU and memory limits, and is killed when a request
times out. A stand-in ``appworld`` module (``execute`` runs the code and returns what it printed)
replaces the real package, which needs its own venv and data."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from sourcebench.adapters.appworld.environment import EnvironmentFailure, WorkerEnvironment

STAND_IN = textwrap.dedent('''
    import contextlib, io

    class _Task:
        instruction = "say hello"
        supervisor = {"first_name": "Joan"}
        datetime = "2023-05-18"
        app_descriptions = {"venmo": "payments"}

    class AppWorld:
        def __init__(self, task_id, experiment_name):
            self.task = _Task()

        def execute(self, code):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(code, {})
            return buf.getvalue()

        def close(self):
            pass
''')


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> dict[str, str]:
    pkg = tmp_path / "stand_in" / "appworld"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(STAND_IN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-isolate-0123456789")
    monkeypatch.setenv("HF_TOKEN", "hf_isolate_0123456789")
    return {"PYTHONPATH": str(pkg.parent), "APPWORLD_ROOT": str(tmp_path / "root")}


def test_worker_sees_no_secret_runs_in_its_scratch_folder_with_limits(stand_in, tmp_path):
    code = ("import os, json, resource\n"
            "print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd(), 'home': os.path.expanduser('~'),\n"
            "  'cpu': resource.getrlimit(resource.RLIMIT_CPU)[0], 'mem': resource.getrlimit(resource.RLIMIT_AS)[0]}))")

    async def go():
        env = await WorkerEnvironment.open(Path(sys.executable), stand_in, "t1", "exp", timeout=60, cpu_seconds=120,
                                           memory_mb=2048)
        try:
            scratch = env.scratch
            seen = json.loads(await env.execute(code))
        finally:
            await env.close()
        return scratch, seen

    scratch, seen = asyncio.run(go())
    assert "OPENAI_API_KEY" not in seen["env"] and "HF_TOKEN" not in seen["env"]
    assert "sk-isolate" not in json.dumps(seen) and "hf_isolate" not in json.dumps(seen)
    assert set(seen["env"]) <= {"PATH", "LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", "PYTHONNOUSERSITE", "PYTHONPATH",
                                "APPWORLD_ROOT", "LC_CTYPE"} | {k for k in seen["env"] if k.startswith("LC_")}
    assert Path(seen["cwd"]).resolve() == Path(seen["home"]).resolve() == scratch.resolve()
    assert Path(seen["cwd"]).resolve() != Path.cwd().resolve()
    assert seen["cpu"] == 120 and seen["mem"] == 2048 * 2**20
    assert not scratch.exists()  # removed with the worker


def test_an_endless_loop_is_killed_when_execute_times_out(stand_in):
    async def go():
        env = await WorkerEnvironment.open(Path(sys.executable), stand_in, "t1", "exp", timeout=2)
        pid = env.proc.pid
        try:
            with pytest.raises(EnvironmentFailure, match="did not answer 'execute' within 2 s and was stopped"):
                await env.execute("while True:\n    pass")
            assert env.proc.returncode is not None  # dead, not burning CPU after the timeout
        finally:
            await env.close()
        return pid

    pid = asyncio.run(go())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_cpu_limit_stops_the_worker(stand_in):
    async def go():
        env = await WorkerEnvironment.open(Path(sys.executable), stand_in, "t1", "exp", timeout=30, cpu_seconds=1)
        try:
            with pytest.raises(EnvironmentFailure, match="exited during 'execute'"):
                await env.execute("while True:\n    pass")
        finally:
            await env.close()

    asyncio.run(go())
