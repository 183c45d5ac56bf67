"""Repeated answers per task (``--epochs N``): each epoch answered with its own seed, scored and cached
under its own key; one row per task whose score is the epochs' mean; the within-task sd reported.

The scripted ``noisy`` model answers "I don't know." for about half of the (prompt, seed) pairs and the
right paint otherwise, so the epochs of one task differ the way a sampling backend's do, reproducibly.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.callscope import scope
from sourcebench.harness.cli import main
from sourcebench.harness.data import Answer, Element, Score, Source, Split, Task
from sourcebench.harness.errors import ConfigError, DataError
from sourcebench.harness.llm import LLM, ModelSpec, UsageLedger
from sourcebench.harness.providers import scripted
from sourcebench.harness.registry import register_benchmark
from sourcebench.harness.runner import RunConfig, Runner
from sourcebench.reports.leaderboard import write_report

PAINT = {"red": "crimson", "blue": "navy", "green": "olive", "white": "ivory"}
SOURCE = Source(id="boxes", kind="documents", description="coloured boxes", elements=[
    Element(id=f"{t}#about", title=f"{t} box", text=f"The {t} box is painted {c}.") for t, c in PAINT.items()])
TASKS = [Task(id=f"q{i:02d}", source_id="boxes", question=f"Which paint is on the {t} box (case {i})?",
              reference=c, group=f"g{i}") for i, (t, c) in enumerate(list(PAINT.items()) * 2)]


class EpochBoxes(Benchmark):
    """One source, every task a test task, exact match."""

    name = "epochboxes"
    scorer_name = "exact"

    def source_ids(self) -> list[str]:
        return ["boxes"]

    def load_source(self, source_id: str) -> Source:
        return SOURCE

    def load_tasks(self, source_id: str) -> list[Task]:
        return TASKS

    def make_splits(self, source, tasks, seeds):
        return [Split(benchmark=self.name, source_id=source.id, seed=s, guidance_ids=[], test_ids=[t.id for t in tasks],
                      mode="official", item_hashes={t.id: t.item_hash for t in tasks}) for s in seeds]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        ok = answer.text.strip().lower() == str(task.reference)
        return Score(value=float(ok), correct=ok, judge=self.scorer_name)


def reply(messages, schema):
    prompt = "\n".join(m["content"] for m in messages)
    return next((c for t, c in PAINT.items() if f"the {t} box (case" in prompt), None)  # None: default reply


@pytest.fixture(autouse=True)
def _bench():
    from sourcebench.harness import registry

    register_benchmark("epochboxes", EpochBoxes)
    scripted.reset()
    scripted.set_script(reply)
    yield
    scripted.reset()
    registry._EXTRA[registry.BENCHMARK_GROUP].pop("epochboxes", None)


def _rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip()]


def _cfg(out: Path, epochs: int, **kw) -> RunConfig:
    return RunConfig(benchmark="epochboxes", methods=["no_source"], model="scripted/noisy", out=out, seeds=[0],
                     embedder="hash", epochs=epochs, **kw)


def test_three_epochs_one_row_per_task_mean_score_and_a_free_rerun(tmp_path):
    out = tmp_path / "run"
    first = Runner(_cfg(out, 3)).run()
    rows = _rows(out)
    assert len(rows) == len(TASKS) and first["rows_new"] == len(TASKS)  # the unit stays the task
    answer_calls = [c for c in scripted.CALLS if "box (case" in c["messages"][-1]["content"]]
    usage = [json.loads(x) for x in (out / "usage.jsonl").read_text().splitlines() if x.strip()]
    answered = sum(u["calls"] for u in usage if u["phase"] == "answer" and u["status"] == "live")
    assert len(answer_calls) == answered == 3 * len(TASKS)  # (live_calls also counts the preflight probe)
    for r in rows:
        ep = r["epochs"]
        assert [e["epoch"] for e in ep] == [1, 2, 3]
        for e in ep:  # each epoch scored on its own answer
            assert e["answer"] in (r["reference"], "I don't know.") and e["score"] == float(e["answer"] == r["reference"])
            assert e["usage"]["answer"]["calls"] == 1
        assert r["score"] == pytest.approx(sum(e["score"] for e in ep) / 3)
        assert r["correct"] == (sum(e["score"] for e in ep) >= 2) and r["usage"]["answer"]["calls"] == 3
        # epoch k is asked with seed k - 1: three different samples of the same prompt
        seeds = sorted(c["seed"] for c in answer_calls if f"({r['question'].split('(')[1]}" in c["messages"][-1]["content"])
        assert seeds == [0, 1, 2]
    assert any(0 < r["score"] < 1 for r in rows), "the noisy model must make some epochs of a task differ"
    assert any(r["score"] == 1 for r in rows) or any(r["score"] == 0 for r in rows)
    # a finished run run again: every epoch's answer comes from its own cache entry, nothing is asked
    scripted.CALLS.clear()
    again = Runner(_cfg(out, 3)).run()
    assert again["live_calls"] == 0 and again["rows_new"] == 0 and _rows(out) == rows and not scripted.CALLS
    # the rows answered afresh from the cache (another folder, the same cache) are the same rows, with 0 live calls
    scripted.CALLS.clear()
    other = Runner(_cfg(tmp_path / "other", 3, cache_dir=out / "cache")).run()
    assert other["live_calls"] == 0 and not scripted.CALLS
    fresh = _rows(tmp_path / "other")
    key = lambda r: r["task_id"]
    assert [(r["task_id"], r["score"], [e["answer"] for e in r["epochs"]]) for r in sorted(fresh, key=key)] == \
        [(r["task_id"], r["score"], [e["answer"] for e in r["epochs"]]) for r in sorted(rows, key=key)]
    assert fresh and all(r["usage"] == old["usage"] for r, old in zip(sorted(fresh, key=key), sorted(rows, key=key)))
    # the leaderboard and its CSV show the within-task sd (mean over tasks of the sd of their epoch scores)
    paths = write_report(out)
    sds = [(sum((e["score"] - r["score"]) ** 2 for e in r["epochs"]) / 2) ** 0.5 for r in rows]
    expected = 100 * sum(sds) / len(sds)
    got = next(csv.DictReader(paths["csv"].read_text().splitlines()))
    assert got["epochs"] == "3" and float(got["within_task_sd_pct"]) == pytest.approx(expected, abs=1e-3)
    md = paths["md"].read_text()
    assert "within-task sd" in md and f"{expected:.1f}" in md


def test_one_epoch_is_todays_run(tmp_path):
    """--epochs 1 (the default) writes rows without epochs and sends the seed and cache keys of a run
    without the option (epoch 1 keys are unchanged)."""
    Runner(_cfg(tmp_path / "run", 1)).run()
    rows = _rows(tmp_path / "run")
    assert rows and all("epochs" not in r and r["score"] in (0.0, 1.0) for r in rows)
    assert {c["seed"] for c in scripted.CALLS} == {0}
    llm = LLM(ModelSpec(name="scripted/x", role="solver"), None, UsageLedger())
    msgs = [{"role": "user", "content": "q"}]
    base = llm.cache_key(msgs, 10, 0.5, None)
    with scope(epoch=1):
        assert llm.cache_key(msgs, 10, 0.5, None) == base
    with scope(epoch=2):
        assert llm.cache_key(msgs, 10, 0.5, None) != base
        judge = LLM(ModelSpec(name="scripted/x", role="judge"), None, UsageLedger())
        assert judge.cache_key(msgs, 10, 0.0, None) == judge.cache_key(msgs, 10, 0.0, None)
        assert judge._seed() == 0  # the judge scores every epoch alike


def test_epochs_need_a_temperature_above_zero(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"--epochs 3: needs --temperature above 0"):
        RunConfig(benchmark="epochboxes", methods=["no_source"], model="openai/gpt-4o-mini", out=tmp_path / "o",
                  epochs=3)
    RunConfig(benchmark="epochboxes", methods=["no_source"], model="openai/gpt-4o-mini", out=tmp_path / "o",
              epochs=3, temperature=0.7)  # a sampling run: allowed
    code = main(["run", "--benchmark", "epochboxes", "--methods", "no_source", "--model", "openai/gpt-4o-mini",
                 "--epochs", "2", "--out", str(tmp_path / "cli")])
    err = capsys.readouterr().err
    assert code != 0 and "--epochs 2: needs --temperature above 0" in err and "Traceback" not in err
    assert len([ln for ln in err.strip().splitlines() if ln.strip()]) == 1 and not (tmp_path / "cli").exists()


def test_a_folder_holds_one_number_of_epochs(tmp_path):
    out = tmp_path / "run"
    Runner(_cfg(out, 1)).run()
    with pytest.raises(DataError, match=r"holds rows answered with 1 epoch\(s\).*asks for 3: use another --out"):
        Runner(_cfg(out, 3)).run()


def test_a_failed_epoch_fails_the_task_and_names_the_epoch():
    from sourcebench.harness.inspect_tasks import merge_epochs

    def row(epoch, score, failed=False):
        return {"task_id": "q", "epoch": epoch, "score": 0.0 if failed else score, "correct": score == 1.0,
                "failed": failed, "failure_reason": "model call failed: 500" if failed else "", "answer": str(epoch),
                "usage": {"answer": {"calls": 1, "input_tokens": 10, "output_tokens": 2, "reasoning_tokens": 0,
                                     "failed_calls": int(failed)}}}

    ok = merge_epochs({1: row(1, 1.0), 2: row(2, 0.0), 3: row(3, 1.0)}, 3)
    assert (ok["score"], ok["correct"], ok["failed"], ok["answer"]) == (pytest.approx(2 / 3), True, False, "1")
    assert ok["usage"]["answer"]["calls"] == 3 and "epoch" not in ok
    bad = merge_epochs({1: row(1, 1.0), 2: row(2, 1.0, failed=True), 3: row(3, 1.0)}, 3)
    assert (bad["score"], bad["correct"], bad["failed"]) == (0.0, False, True)  # not the mean of the other two
    assert bad["failure_reason"] == "epoch 2 of 3: model call failed: 500"
    assert [e["failed"] for e in bad["epochs"]] == [False, True, False]
