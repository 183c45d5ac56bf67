"""The task environment as the agent scaffold sees it, and its real implementation over the worker.

``Environment`` is the package boundary: the scaffold only ever calls these four coroutines, so a
test can stand in a small fake, and the real one (``WorkerEnvironment``) forwards each call to
``worker.py`` running in the AppWorld virtual environment.

The worker runs model-written code (AppWorld's ``execute``), so it is started isolated:

- its environment is an allow-list (``PATH``, locale, time zone, and what the caller passes: the
  AppWorld root and cache), so no key or token of the user's environment reaches it;
- its home and working directory are a scratch folder of its own, removed when it closes;
- ``resource.setrlimit`` in the child caps its CPU time (``cpu_seconds``) and address space
  (``memory_mb``): past them the kernel stops it;
- an ``execute`` (any request) that does not answer within ``timeout`` kills it, so an endless loop
  stops burning CPU.

Not covered: it runs as the same user with the same file permissions, so it can read (AppWorld's own
guard allows ``os`` and read-only ``open``) whatever that user can read, e.g. files under the home
folder by absolute path, and it has the network access the machine has. A container or another user
is needed for that.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sourcebench.harness.errors import SourceBenchError

WORKER = Path(__file__).with_name("worker.py")
# variables the worker inherits (everything else of the user's environment is left out)
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT")
CPU_SECONDS = 3600  # CPU time of one worker (one task world) before the kernel stops it
MEMORY_MB = 16384  # address space of one worker


def worker_env(env: dict[str, str], scratch: Path) -> dict[str, str]:
    """The allow-listed environment of a worker: the few harmless variables of this process, the
    caller's (AppWorld's root and cache), and the scratch folder as home and temp folder."""
    base = {k: v for k, v in os.environ.items() if k in ENV_ALLOWED or k.startswith("LC_")}
    return {**base, **env, "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONNOUSERSITE": "1"}


def _limits(cpu_seconds: int, memory_mb: int):
    """The child's resource limits, set between fork and exec."""
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        mem = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    return apply


class EnvironmentFailure(SourceBenchError):
    """The AppWorld environment could not do what was asked (worker crashed, task failed to load)."""


@dataclass
class TaskInfo:
    """What the environment says about the task it opened."""

    instruction: str
    supervisor: dict[str, Any]
    datetime: str = ""
    app_descriptions: dict[str, str] = field(default_factory=dict)


@dataclass
class Evaluation:
    """AppWorld's own verdict on a task (its ``TestTracker``): ``success`` is task goal completion."""

    success: bool
    num_tests: int = 0
    passes: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    difficulty: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evaluation:
        return cls(success=bool(d["success"]), num_tests=int(d.get("num_tests") or 0),
                   passes=list(d.get("passes") or []), failures=list(d.get("failures") or []),
                   difficulty=d.get("difficulty"))

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "num_tests": self.num_tests, "pass_count": len(self.passes),
                "fail_count": len(self.failures), "difficulty": self.difficulty,
                "failures": [str(f.get("requirement", f))[:500] for f in self.failures]}


class Environment(Protocol):
    info: TaskInfo

    async def execute(self, code: str) -> str: ...

    async def task_completed(self) -> bool: ...

    async def evaluate(self) -> Evaluation: ...

    async def close(self) -> None: ...


class WorkerEnvironment:
    """One AppWorld task world in a worker process (``python worker.py`` of the AppWorld venv)."""

    def __init__(self, proc: asyncio.subprocess.Process, info: TaskInfo | None = None, timeout: float = 600.0,
                 scratch: Path | None = None):
        self.proc = proc
        self.info = info or TaskInfo(instruction="", supervisor={})
        self.timeout = timeout
        self.scratch = scratch

    @classmethod
    async def start(cls, python: Path, env: dict[str, str], timeout: float = 600.0, cpu_seconds: int = CPU_SECONDS,
                    memory_mb: int = MEMORY_MB) -> WorkerEnvironment:
        scratch = Path(tempfile.mkdtemp(prefix="sourcebench-appworld-"))
        try:
            proc = await asyncio.create_subprocess_exec(
                str(python), str(WORKER), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, env=worker_env(env, scratch), cwd=scratch, limit=2**26,
                preexec_fn=_limits(cpu_seconds, memory_mb), start_new_session=True)
        except OSError as e:
            shutil.rmtree(scratch, ignore_errors=True)
            raise EnvironmentFailure(f"cannot start the AppWorld worker with {python}: {e}") from None
        return cls(proc, timeout=timeout, scratch=scratch)

    @classmethod
    async def open(cls, python: Path, env: dict[str, str], task_id: str, experiment_name: str,
                   timeout: float = 600.0, **limits: int) -> WorkerEnvironment:
        self = await cls.start(python, env, timeout, **limits)
        try:
            reply = await self.call("open", task_id=task_id, experiment_name=experiment_name)
        except BaseException:
            await self.close()
            raise
        self.info = TaskInfo(instruction=reply["instruction"], supervisor=reply["supervisor"],
                             datetime=reply.get("datetime", ""), app_descriptions=reply.get("app_descriptions", {}))
        return self

    async def call(self, op: str, **kw: Any) -> dict[str, Any]:
        if self.proc.stdin is None or self.proc.stdout is None or self.proc.returncode is not None:
            raise EnvironmentFailure(f"the AppWorld worker is not running (exit code {self.proc.returncode})")
        self.proc.stdin.write((json.dumps({"op": op, **kw}) + "\n").encode())
        try:
            await self.proc.stdin.drain()
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=self.timeout)
        except TimeoutError:
            self._kill()  # an endless loop in the model's code must not keep burning CPU
            await self.proc.wait()
            raise EnvironmentFailure(f"the AppWorld worker did not answer '{op}' within {self.timeout:.0f} s "
                                     "and was stopped") from None
        except (BrokenPipeError, ConnectionResetError):
            line = b""
        if not line:
            raise EnvironmentFailure(f"the AppWorld worker exited during '{op}'")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise EnvironmentFailure(f"AppWorld '{op}' failed: {reply.get('error')}")
        return reply

    async def execute(self, code: str) -> str:
        return str((await self.call("execute", code=code))["output"])

    async def task_completed(self) -> bool:
        return bool((await self.call("task_completed"))["completed"])

    async def evaluate(self) -> Evaluation:
        return Evaluation.from_dict(await self.call("evaluate"))

    async def close(self) -> None:
        if self.proc.returncode is None:
            try:
                await asyncio.wait_for(self.call("close"), timeout=60)
            except (TimeoutError, EnvironmentFailure, OSError):
                pass
            if self.proc.returncode is None:
                self._kill()
        await self.proc.wait()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def _kill(self) -> None:
        """Kill the worker and anything it started (its own session)."""
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
