"""A fake AppWorld task world for tests: the scaffold only uses the ``Environment`` protocol."""

from __future__ import annotations

from sourcebench.adapters.appworld.environment import Evaluation, TaskInfo

SUPERVISOR = {"first_name": "Joan", "last_name": "Rivera", "email": "joan.rivera@example.com"}


class FakeEnv:
    """An AppWorld-like task world: records code, completes on complete_task, evaluates with a rule."""

    def __init__(self, instruction: str = "Send $20 on Venmo to Ana.", output: str = "ok",
                 success=lambda executed: True):
        self.info = TaskInfo(instruction=instruction, supervisor=SUPERVISOR, datetime="2023-05-18 12:00:00",
                             app_descriptions={"supervisor": "the supervisor's details", "venmo": "payments",
                                               "spotify": "music"})
        self.output = output
        self.success = success
        self.executed: list[str] = []
        self.evaluations = 0
        self.closed = False

    async def execute(self, code: str) -> str:
        assert not self.closed
        self.executed.append(code)
        return self.output

    async def task_completed(self) -> bool:
        return any("complete_task" in c for c in self.executed)

    async def evaluate(self) -> Evaluation:
        self.evaluations += 1
        ok = bool(self.success(self.executed))
        return Evaluation(success=ok, num_tests=2, passes=[{"requirement": "a"}] + ([{"requirement": "b"}] if ok else []),
                          failures=[] if ok else [{"requirement": "b", "trace": "wrong"}], difficulty=1)

    async def close(self) -> None:
        self.closed = True
