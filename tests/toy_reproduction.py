"""The toy reproduction shared by the tests of ``sourcebench reproduce``: TownQA, a small in-memory
benchmark with labelled gold evidence, its experiment config (every table enabled, the scripted model)
and one end-to-end run of it.

The run drives the pipeline (tests/harness/test_reproduce_pipeline.py) and produces the output root
whose report the table tests read (tests/reports/test_reproduce.py, and through its golden fixture
tests/reports/test_tables.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from sourcebench.harness.benchmark import Benchmark, DataStatus
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.judges.exact_f1 import exact_f1

# Two small towns (sources) of three districts (folders, hence SourceLearn regions) with two people each;
# per person one document with a work and a friends section.
TOWNS = {
    "north": {"Ada": ("engineer", "Ben"), "Ben": ("teacher", "Ada"), "Cy": ("baker", "Dee"),
              "Dee": ("pilot", "Eve"), "Eve": ("nurse", "Fay"), "Fay": ("judge", "Cy")},
    "south": {"Gus": ("farmer", "Hal"), "Hal": ("tailor", "Ivy"), "Ivy": ("singer", "Jo"),
              "Jo": ("painter", "Ivy"), "Kai": ("sailor", "Lu"), "Lu": ("miner", "Gus")},
}


def district(name: str, town: str) -> str:
    return f"d{list(TOWNS[town]).index(name) // 2}"


class TownQA(Benchmark):
    """Questions about the people of two towns; gold documents and elements labelled, as MultiDoc2Dial."""

    name = "townqa"
    scorer_name = "exact_f1"
    answer_instructions = "Reply with the answer only."

    def data_status(self) -> DataStatus:
        return DataStatus(self.name, True, "memory", "2 sources", "")

    def source_ids(self) -> list[str]:
        return list(TOWNS)

    def load_source(self, source_id: str) -> Source:
        els = []
        for n, (job, friend) in TOWNS[source_id].items():
            path = f"{district(n, source_id)}/{n}.md"
            els.append(Element(id=f"{n}#work", title=f"{n} > Work", path=path, text=f"The occupation of {n} is {job}.",
                               metadata={"entity": n, "doc_id": n}))
            els.append(Element(id=f"{n}#friends", title=f"{n} > Friends", path=path,
                               text=f"The friend of {n} is {friend}.", metadata={"entity": n, "doc_id": n}))
        return Source(id=source_id, kind="documents", elements=els, origin="memory")

    def load_tasks(self, source_id: str) -> list[Task]:
        tasks = []
        town = TOWNS[source_id]
        for n, (job, friend) in town.items():
            two_hop = f"What is the occupation of the friend of {n}?"  # the extractive reader fails these
            for kind, q, ans, els in (("job", f"What is the occupation of {n}?", job, [f"{n}#work"]),
                                      ("friend", f"Who is the friend of {n}?", friend, [f"{n}#friends"]),
                                      ("hop", two_hop, town[friend][0], [f"{n}#friends", f"{friend}#work"])):
                docs = list(dict.fromkeys(e.split("#")[0] for e in els))
                tasks.append(Task(id=f"{kind}-{n}", source_id=source_id, question=q, reference=[ans], group=n,
                                  metadata={"gold_element_ids": els, "gold_doc_ids": docs}))
        return tasks

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        if answer.failed:
            return Score(value=0.0, correct=False, failed=True, failure_reason=answer.failure_reason, judge="exact_f1")
        m = exact_f1(answer.text, task.reference)
        return Score(value=m["f1"], correct=bool(m["em"]), details=m, judge="exact_f1")


TOY_CONFIG = """
name: toy
description: TownQA with the scripted model, every table enabled
output: {out}
seeds: [0, 1]
embedder: hash
backends:
  - {{id: scripted, label: Scripted, model: scripted/extractive}}
benchmarks:
  - {{id: townqa, label: TownQA, group: Document QA}}
  - {{id: absent, benchmark: no_such_benchmark, label: Absent, group: Document QA}}
tables:
  table1: {{methods: [hybrid_rag, no_source, sourcelearn]}}
  table2: {{counterparts: [hybrid_rag, raptor]}}
  table3: {{sample: 4}}
  table4: {{sample: 4}}
  table5: {{}}
  table6: {{cycles: [0, 1, 2]}}
  figure3: {{}}
  figure4: {{coverage_max_tasks: 2}}
  figure5: {{k: [8, 2, 0], gold_removal: [townqa]}}
"""


@contextlib.contextmanager
def townqa_registered() -> Iterator[type[TownQA]]:
    """TownQA registered as the benchmark ``townqa`` for the block (a test module's ``townqa`` fixture)."""
    from sourcebench.harness import registry

    registry.register_benchmark("townqa", TownQA)
    try:
        yield TownQA
    finally:
        registry._EXTRA[registry.BENCHMARK_GROUP].pop("townqa", None)


def run_reproduce(config: Path, *extra: str) -> int:
    from sourcebench.harness.cli import main

    return main(["reproduce", str(config), *extra])


_TOY: dict = {}  # the one toy reproduction of this process, shared by every module that asks for it
_HOLDERS: list = []  # its TemporaryDirectory: the folder goes when the process exits


def toy_reproduction() -> dict:
    """One reproduce run of TOY_CONFIG, then a second identical run (must be free), once per process
    (TownQA registered): the pipeline's tests (tests/harness/) and the report's (tests/reports/) read
    the same output root.

    Its own temporary folder rather than pytest's: a concurrent pytest session prunes old base temp
    folders, which must not pull the run folder away during the (minutes long) tests; removed when
    the process exits.
    """
    if not _TOY:
        _TOY.update(_run_toy())
    return _TOY


def _run_toy() -> dict:
    import tempfile

    from sourcebench.harness.providers import scripted

    scripted.reset()
    holder = tempfile.TemporaryDirectory(prefix="sourcebench-toy")
    _HOLDERS.append(holder)
    tmp = Path(holder.name)
    cfg_path = tmp / "toy.yaml"
    cfg_path.write_text(TOY_CONFIG.format(out=tmp / "out"))
    rc1 = run_reproduce(cfg_path)
    folder = tmp / "out" / "scripted" / "townqa"
    usage1 = (folder / "usage.jsonl").read_text()
    results1 = (folder / "results.jsonl").read_text()
    n_calls = len(scripted.CALLS)
    rc2 = run_reproduce(cfg_path)
    return {"root": tmp / "out", "folder": folder, "config": cfg_path, "rc": (rc1, rc2), "usage1": usage1,
            "results1": results1, "calls_second": len(scripted.CALLS) - n_calls}


def result_rows(folder: Path, method: str | None = None) -> list[dict]:
    rows = [json.loads(x) for x in (folder / "results.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if method is None or r["method"] == method]


def cell_status(root: Path) -> dict:
    return json.loads((root / "reproduce-toy.json").read_text())["cells"]


def minimal_config(**over) -> dict:
    d = {"name": "t", "output": "out", "backends": [{"id": "b", "model": "scripted/extractive"}],
         "benchmarks": [{"id": "phantomwiki"}], "tables": {"table1": {}}}
    d.update(over)
    return d
