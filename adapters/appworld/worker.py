"""The AppWorld side of the process boundary: runs inside the separate AppWorld virtual environment.

``appworld`` pins pydantic 1 (and old fastapi/httpx), which cannot share an environment with
inspect-ai, so SourceBench drives it from its own venv through this script. It imports nothing from
SourceBench. Protocol: one JSON object per line on stdin, one JSON reply per line on stdout
(``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``); everything else the package prints goes
to stderr. Requests: ``api_docs``, ``open {task_id, experiment_name}``, ``execute {code}``,
``task_completed``, ``evaluate``, ``close``.

The parent starts it isolated (``environment.WorkerEnvironment.start``: an allow-listed environment
without the user's keys, a scratch folder as home and working directory, CPU and memory limits, killed
when a request times out); what that does not cover is listed there.

Code that mentions the built-in documentation app (``api_docs``) is refused: documentation is
reachable only through the method's documentation channel, which the scaffold answers itself.
"""

from __future__ import annotations

import json
import re
import sys
import traceback
from typing import Any

DOCS_APP = "api_docs"
_DOCS_MENTION = re.compile(r"\bapi_docs\b")
REFUSAL = ("Execution refused: the api_docs app is not available in this environment. Look documentation up "
           "in a code block of its own that only calls apis.api_docs.* functions.")


def api_docs() -> dict[str, Any]:
    """Every app's public API specifications in the package's standard format, and the app blurbs."""
    import appworld
    from appworld.api_docs import prepare_api_docs
    from appworld.apps import APP_TO_DESCRIPTION, get_all_apps

    apps = get_all_apps(skip_admin=True)
    return {
        "appworld_version": appworld.__version__,
        "apps": {a: APP_TO_DESCRIPTION.get(a, "") for a in apps},
        "docs": {a: prepare_api_docs(a) for a in apps},
    }


class Session:
    """One task world at a time."""

    def __init__(self) -> None:
        self.world: Any = None

    def open(self, task_id: str, experiment_name: str) -> dict[str, Any]:
        from appworld import AppWorld

        self.close()
        self.world = AppWorld(task_id=task_id, experiment_name=experiment_name)
        task = self.world.task
        return {
            "instruction": task.instruction,
            "supervisor": dict(task.supervisor),
            "datetime": str(task.datetime),
            "app_descriptions": {k: v for k, v in task.app_descriptions.items() if k != DOCS_APP},
        }

    def _world(self) -> Any:
        if self.world is None:
            raise RuntimeError("no task is open (send 'open' first)")
        return self.world

    def execute(self, code: str) -> dict[str, Any]:
        if _DOCS_MENTION.search(code):
            return {"output": REFUSAL}
        return {"output": self._world().execute(code)}

    def task_completed(self) -> dict[str, Any]:
        return {"completed": bool(self._world().task_completed())}

    def evaluate(self) -> dict[str, Any]:
        tracker = self._world().evaluate()
        return tracker.to_dict(stats_only=False)

    def close(self) -> dict[str, Any]:
        if self.world is not None:
            try:
                self.world.close()
            finally:
                self.world = None
        return {}


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # the package's own prints must not corrupt the protocol
    session = Session()
    for line in sys.stdin:
        if not line.strip():
            continue
        op = None
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "api_docs":
                reply = api_docs()
            elif op == "open":
                reply = session.open(str(req["task_id"]), str(req["experiment_name"]))
            elif op == "execute":
                reply = session.execute(str(req["code"]))
            elif op == "task_completed":
                reply = session.task_completed()
            elif op == "evaluate":
                reply = session.evaluate()
            elif op == "close":
                reply = session.close()
            else:
                raise ValueError(f"unknown op {op!r}")
            msg = {"ok": True, **reply}
        except Exception as e:  # reported to the parent, which turns it into a scored failure or an error
            msg = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        out.write(json.dumps(msg, default=str) + "\n")
        out.flush()
        if op == "close":
            break
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
