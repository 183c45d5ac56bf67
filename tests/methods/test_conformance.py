"""The checks every registered method must pass, run through the real runner on a tiny benchmark.

A third-party method can reuse this file: register the method, then run these tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.base import Benchmark
from harness.data import Answer, Element, Score, Source, Task
from harness.registry import get_method_class, method_names, register_benchmark
from harness.runner import RunConfig, Runner
from judges.exact_f1 import exact_f1

PEOPLE = {
    "Ada": ("engineer", "chess", "Ben"), "Ben": ("teacher", "rowing", "Ada"), "Cy": ("baker", "chess", "Dee"),
    "Dee": ("pilot", "golf", "Cy"), "Eve": ("nurse", "chess", "Fay"), "Fay": ("judge", "golf", "Eve"),
}


class TinyWiki(Benchmark):
    """Six short articles and questions about them, in memory."""

    name = "tinywiki"
    scorer_name = "exact_f1"
    answer_instructions = "Reply with the answer only."

    def source_ids(self) -> list[str]:
        return ["people"]

    def load_source(self, source_id: str) -> Source:
        els = []
        for n, (job, hobby, friend) in PEOPLE.items():
            els.append(Element(id=f"{n}#attributes", title=f"{n} > Attributes", path=n,
                               text=f"## Attributes\nThe occupation of {n} is {job}.\nThe hobby of {n} is {hobby}.",
                               metadata={"entity": n}))
            els.append(Element(id=f"{n}#friends", title=f"{n} > Friends", path=n,
                               text=f"## Friends\nThe friend of {n} is {friend}.", metadata={"entity": n}))
        return Source(id=source_id, kind="documents", elements=els, origin="memory")

    def load_tasks(self, source_id: str) -> list[Task]:
        tasks = []
        for n, (job, hobby, friend) in PEOPLE.items():
            # each reference carries a canary string that appears nowhere in the source, so a method that
            # stores reference answers in its artifact is caught
            tasks.append(Task(id=f"job-{n}", source_id=source_id, question=f"What is the occupation of {n}?",
                              reference=[job, f"canary-job-{n.lower()}"], group=f"job-{n}"))
            tasks.append(Task(id=f"friend-{n}", source_id=source_id, question=f"Who is the friend of {n}?",
                              reference=[friend, f"canary-friend-{n.lower()}"], group=f"friend-{n}"))
        return tasks

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        if answer.failed:
            return Score(value=0.0, correct=False, failed=True, failure_reason=answer.failure_reason, judge="exact_f1")
        m = exact_f1(answer.text, task.reference)
        return Score(value=m["f1"], correct=bool(m["em"]), details=m, judge="exact_f1")


register_benchmark("tinywiki", TinyWiki)

SLOW = {"raptor"}  # UMAP's first fit compiles with numba (~12 s)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in method_names()])
def test_registered_method_conforms(name: str, tmp_path: Path):
    cls = get_method_class(name)
    # identity and typed config
    assert cls.name == name and cls.version
    method = cls()
    desc = method.describe()
    json.dumps(desc)
    with pytest.raises(Exception):
        cls({"definitely_not_a_setting": 1})
    out = tmp_path / "run"
    cfg = RunConfig(benchmark="tinywiki", methods=[name], model="scripted/extractive", out=out, seeds=[0, 1],
                    embedder="hash", write_report=False)
    s1 = Runner(cfg).run()
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    tests_per_seed = {json.loads(p.read_text())["seed"]: len(json.loads(p.read_text())["test_ids"])
                      for p in (out / "splits" / "tinywiki" / "people").glob("seed*.json")}
    # one scored row per test task and seed, no duplicates, no crash (method errors are scored failures)
    assert len(rows) == sum(tests_per_seed.values())
    assert len({(r["seed"], r["task_id"]) for r in rows}) == len(rows)
    errors = [r["failure_reason"] for r in rows if r["failure_reason"].startswith("method error")]
    assert not errors, errors[0]
    # frozen, content-addressed artifacts that verify
    from harness.artifacts import ArtifactStore

    store = ArtifactStore(out / "artifacts")
    arts = list((out / "artifacts").glob(f"method_{name}/*/artifact.json"))
    assert arts and all(store.verify(a.parent) for a in arts)
    assert len(arts) == (2 if cls.uses_guidance else 1)
    # no reference answer (guidance or test) is stored in any artifact
    stored = "".join(a.read_text(errors="ignore") for a in (out / "artifacts").rglob("*")
                     if a.is_file() and a.suffix in (".json", ".jsonl", ".md", ".txt"))
    assert "canary-" not in stored, "reference answers stored in an artifact"
    # re-running a finished run makes no model call
    s2 = Runner(cfg).run()
    assert s1["rows_new"] == len(rows) and s2["rows_new"] == 0 and s2["live_calls"] == 0
