"""AppWorld: everyday tasks an agent completes by writing code against the APIs of simulated apps.

Source: the API specifications produced offline by the package's own API-docs preparation, one
element per API, the built-in documentation app removed (the agent cannot call it; documentation
reaches it only through the method's documentation channel). Tasks: the official splits, train
(guidance) and test-normal (test), grouped by scenario. Answering drives the ReAct code agent
(``agent.py``) in AppWorld's own environment, and scoring is AppWorld's own evaluation: a task
counts when its whole test suite passes (task goal completion, TGC); ``scenario_goal_completion``
gives SGC from result rows.

Without the task data (``appworld download data`` needs the internet) the source still loads and
``load_tasks`` raises ``BenchmarkUnavailable``: the run and the report say "unavailable" with the
reason and no score is produced. What still departs from the official setting, and why, is listed in
``AppWorld.deviations`` (recorded in run.json and the leaderboard's caption).
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar

from sourcebench.adapters.fetch import FetchedData
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Evidence, Score, Source, Split, Task, stable_hash
from sourcebench.harness.errors import BenchmarkUnavailable, ConfigError, DataError
from sourcebench.harness.method import ContextLookup
from sourcebench.harness.splits import official_split

from ..availability import Availability, candidate_dirs
from .agent import MAX_STEPS, ReActAgent
from .channel import ChannelReply, DocumentationChannel
from .environment import Environment, EnvironmentFailure, WorkerEnvironment
from .install import APPWORLD_VERSION, DOCS_FILE, Installation
from .specs import docs_source

SOURCE_ID = "appworld"
GUIDANCE_SET = "train"
TEST_SETS = ("test_normal", "test_challenge", "dev")


def scenario_of(task_id: str) -> str:
    return task_id.split(":")[0].split("_")[0]


def scenario_goal_completion(rows: list[dict[str, Any]]) -> float | None:
    """SGC: the share of scenarios all of whose tasks passed (rows of one method and seed)."""
    by: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by[scenario_of(str(r["task_id"]))].append(bool(r.get("correct")) and not r.get("failed"))
    return sum(all(v) for v in by.values()) / len(by) if by else None


class AppWorld(FetchedData, Benchmark):
    name = "appworld"
    interactive = True  # the agent looks documentation up through the method (channel.py)
    version = "2-A"  # 2: the official ReAct prompt, demonstration and history rule
    subdir = "appworld"
    scorer_name = "appworld_tgc"
    answer_instructions = "Complete the task by operating the apps."
    known_options: ClassVar[dict[str, str]] = {
        "root": "AppWorld root (APPWORLD_ROOT; default DATA/appworld, made by `sourcebench appworld-setup`)",
        "python": "Python of an environment where appworld is installed (default ROOT/venv/bin/python)",
        "test_set": "official test set: test_normal (default, the paper's), test_challenge or dev",
        "max_steps": f"agent steps per task (default {MAX_STEPS})",
        "initial_docs": "show the method's context for the task instruction in the first prompt: yes (default) or no",
    }
    deviations: ClassVar[list[str]] = [
        ("documentation: the agent's apis.api_docs calls are answered by the method under test (its evidence and "
         "notes for the lookup, in its own format, not the docs app's JSON), because the benchmark compares how "
         "methods provide documentation; the docs app is removed from the world, show_app_descriptions lists the "
         "task's apps, and one sentence after the official key instructions asks for documentation-only code "
         "blocks with literal arguments (a mixed block is refused, not run)"),
        ("initial context: the method's context for the task instruction is shown before the supervisor line of "
         "the last prompt message, so a method that models the source can give it up front (--opt "
         "initial_docs=no leaves it out)"),
        ("observations are cut at 20,000 characters ([REST NOT SHOWN FOR BREVITY]) before the official history "
         "rule applies, so one huge output cannot fill the context window"),
        ("context window: when even the officially trimmed conversation overflows the model's window, its oldest "
         "exchanges are dropped; a first prompt that does not fit is a scored failure (the official agent assumes "
         "a window that holds it)"),
        ("a reply with no code block gets an observation asking for one instead of running empty code; generation "
         "uses the run's model settings, not the official stop sequence and 400-token reply cap (only the first "
         "code block of a reply is run and kept, as the official agent does)"),
    ]

    def __init__(self, data_dir: Path | None = None, options: dict[str, str] | None = None):
        super().__init__(data_dir, options)
        self._source: Source | None = None

    def how_to_get(self) -> str:
        return ("run `sourcebench appworld-setup` (PyPI once: a separate venv with appworld=="
                f"{APPWORLD_VERSION} in DATA/appworld, apps unpacked offline, API docs prepared); the tasks "
                "need internet access: `APPWORLD_ROOT=DATA/appworld DATA/appworld/venv/bin/appworld download data`")

    # -- installation ------------------------------------------------------------------------------
    def installation(self) -> Installation:
        python = self.options.get("python") or os.environ.get("SOURCEBENCH_APPWORLD_PYTHON")
        if self.options.get("root"):
            return Installation.at(Path(self.options["root"]), python)
        if os.environ.get("APPWORLD_ROOT"):
            return Installation.at(Path(os.environ["APPWORLD_ROOT"]), python)
        cands = candidate_dirs(self)
        for d in cands:
            if (d / DOCS_FILE).is_file() or (d / "venv").is_dir():
                return Installation.at(d, python)
        return Installation.at(cands[0], python)

    def _int_option(self, key: str, default: int) -> int:
        try:
            v = int(self.options.get(key, default))
        except ValueError:
            raise ConfigError(f"appworld: --opt {key}={self.options[key]!r} is not an integer") from None
        if v <= 0:
            raise ConfigError(f"appworld: --opt {key} must be positive")
        return v

    def test_set(self) -> str:
        t = self.options.get("test_set", "test_normal")
        if t not in TEST_SETS:
            raise ConfigError(f"appworld: --opt test_set={t!r}: expected one of {', '.join(TEST_SETS)}")
        return t

    # -- data --------------------------------------------------------------------------------------
    def source_ids(self) -> list[str]:
        return [SOURCE_ID]

    def load_source(self, source_id: str) -> Source:
        if source_id != SOURCE_ID:
            raise DataError(f"appworld: unknown source '{source_id}' (the only one is '{SOURCE_ID}')")
        if self._source is None:
            inst = self.installation()
            if not inst.docs_file.is_file():
                if not inst.has_python():
                    raise DataError(f"appworld: not set up in {inst.root} (no {DOCS_FILE}, no {inst.python}); "
                                    f"{self.how_to_get()}")
                inst.prepare_docs()
            data = inst.read_docs()
            origin = f"{inst.docs_file} (appworld {data.get('appworld_version')}: api_docs.prepare_api_docs, standard format)"
            self._source = docs_source(data, origin, SOURCE_ID)
        return self._source

    def _dataset(self, inst: Installation, name: str) -> list[str]:
        path = inst.data_dir / "datasets" / f"{name}.txt"
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise BenchmarkUnavailable(f"appworld: unavailable: {path} not found") from None
        return [ln.strip().split(":")[0] for ln in lines if ln.strip()]

    def load_tasks(self, source_id: str) -> list[Task]:
        inst = self.installation()
        missing = inst.tasks_missing()
        if missing:
            raise BenchmarkUnavailable(
                f"appworld: unavailable: {missing}; the tasks come from `appworld download data`, which needs the "
                f"internet (run it with APPWORLD_ROOT={inst.root}, then re-run)")
        tasks = []
        for ds in (GUIDANCE_SET, self.test_set()):
            for tid in self._dataset(inst, ds):
                path = inst.data_dir / "tasks" / tid / "specs.json"
                try:
                    specs = json.loads(path.read_text(encoding="utf-8"))
                except FileNotFoundError:
                    raise DataError(f"{path}: file not found (task {tid} of {ds}.txt; re-run `appworld download data`)") from None
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
                if "instruction" not in specs:
                    raise DataError(f"{path}: missing field instruction")
                tasks.append(Task(id=tid, source_id=source_id, question=str(specs["instruction"]), reference=None,
                                  group=scenario_of(tid),
                                  metadata={"dataset": ds, "scenario": scenario_of(tid),
                                            "supervisor": specs.get("supervisor") or specs.get("main_user"),
                                            "datetime": specs.get("datetime")}))
        return tasks

    def make_splits(self, source: Source, tasks: list[Task], seeds: list[int]) -> list[Split]:
        """The official split, the same for every seed: one split, seed 0."""
        guidance = [t for t in tasks if t.metadata.get("dataset") == GUIDANCE_SET]
        test = [t for t in tasks if t.metadata.get("dataset") == self.test_set()]
        return [official_split(self.name, source.id, guidance, test, source_fingerprint=source.fingerprint)]

    def data_status(self) -> Availability:
        inst = self.installation()
        looked = [str(inst.root)]
        if not inst.docs_file.is_file():  # preparing the docs takes a minute: a status check does not do it
            what = (f"AppWorld is installed ({inst.python}) but its API docs are not prepared" if inst.has_python()
                    else f"AppWorld is not set up in {inst.root}")
            return Availability(self.name, False, "", what, self.how_to_get(), state="missing", looked_in=looked)
        try:
            src = self.load_source(SOURCE_ID)
        except DataError as e:
            return Availability(self.name, False, str(inst.root), str(e), self.how_to_get(), state="missing",
                                looked_in=looked)
        m = src.metadata
        source = (f"source present: {m['n_specs']} API specifications of {len(m['apps'])} apps, the supervisor's "
                  f"included (appworld "
                  f"{m['appworld_version']}; the docs app's {m['n_specs_with_docs_app'] - m['n_specs']} left out "
                  f"of {m['n_specs_with_docs_app']})")
        missing = inst.tasks_missing()
        if missing:
            return Availability(self.name, False, str(inst.root),
                                f"{source}; tasks unavailable: {missing} (`appworld download data` needs the internet)",
                                f"with internet access: APPWORLD_ROOT={inst.root} {inst.python.parent / 'appworld'} "
                                "download data", state="unavailable", looked_in=looked)
        counts = ", ".join(f"{d} {len(self._dataset(inst, d))}" for d in (GUIDANCE_SET, self.test_set()))
        return Availability(self.name, True, str(inst.root), f"{source}; tasks: {counts}", self.how_to_get(),
                            state="present", looked_in=looked)

    # -- answering: the agent scaffold --------------------------------------------------------------
    async def open_environment(self, task_id: str, experiment_name: str) -> Environment:
        """The task's world (replaced by a fake in tests: the scaffold only uses ``Environment``)."""
        inst = self.installation()
        if not inst.has_python():
            raise EnvironmentFailure(f"AppWorld's Python not found at {inst.python}; {self.how_to_get()}")
        return await WorkerEnvironment.open(inst.python, inst.env(), task_id, experiment_name)

    def experiment_name(self, llm: Any) -> str:
        method = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(getattr(llm, "method", "method")))
        settings = llm.spec.settings() if hasattr(llm, "spec") else {}
        return f"sourcebench-{method}-{stable_hash(settings)[:10]}"

    async def solve(self, task: Task, evidence: list[Evidence], notes: str, llm: Any, stage: str = "answer",
                    lookup: ContextLookup | None = None) -> Answer:
        """Run the agent on the task; the method's context answers its documentation lookups."""
        channel = DocumentationChannel(task, lookup, evidence, notes, method=str(getattr(llm, "method", "")) or
                                       "the method")
        show_initial = self.options.get("initial_docs", "yes").lower() not in ("no", "false", "0")
        context = ChannelReply(task.question, evidence, notes).render() if show_initial and (evidence or notes) else ""
        agent = ReActAgent(llm, channel, max_steps=self._int_option("max_steps", MAX_STEPS),
                           max_tokens=self.answer_max_tokens)
        try:
            env = await self.open_environment(task.id, self.experiment_name(llm))
        except EnvironmentFailure as e:
            return Answer(text="", failed=True, failure_reason=f"appworld environment: {e}")
        try:
            result = await agent.run(env, context)
        except EnvironmentFailure as e:
            return Answer(text="", failed=True, failure_reason=f"appworld environment: {e}",
                          metadata={"appworld": {"doc_lookups": channel.lookups}})
        finally:
            await env.close()
        looked_up = [i for lk in channel.lookups for i in lk["evidence_ids"]]
        return Answer(
            text=result.final_code, evidence_ids=list(dict.fromkeys([e.element_id for e in evidence] + looked_up)),
            context_tokens=result.prompt_tokens, failed=result.failed, failure_reason=result.failure_reason,
            metadata={"appworld": {
                "steps": len(result.steps), "completed": result.completed, "trimmed_exchanges": result.trimmed_exchanges,
                "blanked_observations": result.blanked_observations, "dropped_messages": result.dropped_messages,
                "evaluation": result.evaluation.to_dict() if result.evaluation else None,
                "doc_lookups": channel.lookups, "trajectory": [s.summary() for s in result.steps],
            }},
        )

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        if answer.failed:
            return Score(value=0.0, correct=False, judge=self.scorer_name, failed=True, failure_reason=answer.failure_reason)
        ev = (answer.metadata.get("appworld") or {}).get("evaluation")
        if not ev:
            return Score(value=0.0, correct=False, judge=self.scorer_name, failed=True,
                         failure_reason="appworld: no evaluation recorded for this answer")
        ok = bool(ev["success"])
        return Score(value=1.0 if ok else 0.0, correct=ok, judge=self.scorer_name,
                     details={"tgc": ok, "scenario": scenario_of(task.id), **{k: ev.get(k) for k in
                              ("num_tests", "pass_count", "fail_count", "difficulty", "failures")}})
