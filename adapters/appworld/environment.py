"""The task environment as the agent scaffold sees it, and its real implementation over the worker.

``Environment`` is the package boundary: the scaffold only ever calls these four coroutines, so a
test can stand in a small fake, and the real one (``WorkerEnvironment``) forwards each call to
``worker.py`` running in the AppWorld virtual environment.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sourcebench.harness.errors import SourceBenchError

WORKER = Path(__file__).with_name("worker.py")


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

    def __init__(self, proc: asyncio.subprocess.Process, info: TaskInfo | None = None, timeout: float = 600.0):
        self.proc = proc
        self.info = info or TaskInfo(instruction="", supervisor={})
        self.timeout = timeout

    @classmethod
    async def start(cls, python: Path, env: dict[str, str], timeout: float = 600.0) -> WorkerEnvironment:
        try:
            proc = await asyncio.create_subprocess_exec(
                str(python), str(WORKER), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, env={**os.environ, **env}, limit=2**26)
        except OSError as e:
            raise EnvironmentFailure(f"cannot start the AppWorld worker with {python}: {e}") from None
        return cls(proc, timeout=timeout)

    @classmethod
    async def open(cls, python: Path, env: dict[str, str], task_id: str, experiment_name: str,
                   timeout: float = 600.0) -> WorkerEnvironment:
        self = await cls.start(python, env, timeout)
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
            raise EnvironmentFailure(f"the AppWorld worker did not answer '{op}' within {self.timeout:.0f} s") from None
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
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass
            await self.proc.wait()
