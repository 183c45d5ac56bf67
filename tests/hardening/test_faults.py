"""Fault injection: transient faults are retried with backoff, persistent ones become scored failures.

The model layer is exercised against the fault server through inspect's ``openai-api`` provider
(which itself wraps the OpenAI SDK): the SDK retries an HTTP error twice within about a second,
inspect retries the SDK's final error with exponential backoff starting at 3 s, and the harness
retries replies it cannot parse. ``max_retries`` bounds inspect's retries, after which the call
fails with its reason, the task is a scored failure, and the report counts it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest
from pydantic import BaseModel

from sourcebench.harness.cli import main
from sourcebench.harness.errors import ModelUnavailableError
from sourcebench.harness.health import EXIT_DEGRADED
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from tests.conftest import need_data
from tests.hardening.common import comparable, jsonl, pw_args, rows

INSPECT_FIRST_BACKOFF_S = 3.0  # wait_exponential_jitter(initial=3) in inspect_ai.model._retry


class Answers(BaseModel):
    answers: list[str]


def call(tmp_path, plan: str, schema=None, **spec):
    llm = LLM(ModelSpec(name=f"openai-api/fault/{plan}", **spec), CallCache(tmp_path / "c.sqlite"), UsageLedger())
    res = asyncio.run(llm.generate("Question: who is the mother of Aida Wang?", method="m", phase="answer",
                                   stage="answer", schema=schema))
    return llm, res


def only_request(server) -> tuple[list[float], list[str]]:
    st = server.stats()
    assert st["distinct"] == 1, st["fault_of"]
    (key,) = st["attempt_times"]
    return st["attempt_times"][key], st["fault_of"][key]


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.slow
def test_rate_limit_retried_by_inspect_with_backoff(tmp_path, fault_env):
    """One retry layer: the OpenAI client's own retries are off, inspect's back off exponentially."""
    llm, res = call(tmp_path, "e429x2", max_retries=2)
    assert not res.failed and res.text
    times, got = only_request(fault_env)
    assert got == ["e429"] * 2 + ["ok"]
    assert all(x >= INSPECT_FIRST_BACKOFF_S for x in gaps(times))
    assert {r["status"]: r["calls"] for r in llm.ledger.snapshot()} == {"live": 1}


@pytest.mark.slow
def test_hanging_attempt_is_abandoned_and_retried(tmp_path, fault_env):
    _, res = call(tmp_path, "hangx1", max_retries=2, attempt_timeout=1)
    assert not res.failed
    times, got = only_request(fault_env)
    assert got == ["hang", "ok"]
    assert gaps(times)[0] >= 1.0  # the attempt timeout, then the backoff


def test_unparsable_reply_is_retried_by_the_harness(tmp_path, fault_env):
    _, res = call(tmp_path, "badjsonx2", max_retries=2)
    assert not res.failed and res.text
    times, got = only_request(fault_env)
    assert got == ["badjson", "badjson", "ok"]
    assert gaps(times)[0] >= 1.0 and gaps(times)[1] >= 2.0  # 1 s, then 2 s


@pytest.mark.slow
@pytest.mark.parametrize("plan,kind", [("e500xall", "InternalServerError"), ("dropxall", "APIConnectionError"),
                                       ("truncxall", "APIConnectionError"), ("badjsonxall", "JSONDecodeError")])
def test_persistent_fault_is_a_failed_call_with_its_reason(tmp_path, fault_env, plan, kind):
    llm, res = call(tmp_path, plan, max_retries=1)
    assert res.failed and res.error.startswith(kind + ":"), res.error
    _, got = only_request(fault_env)
    assert len(got) == 2  # 1 + max_retries attempts (one retry layer), then it gives up
    assert [f["error"] for f in llm.ledger.failures] == [res.error]
    assert {r["status"]: r["calls"] for r in llm.ledger.snapshot()} == {"failed": 1}
    assert not CallCache(tmp_path / "c.sqlite").get(llm.cache_key(
        [{"role": "user", "content": "Question: who is the mother of Aida Wang?"}], 512, 0.0, None))


def test_schema_violation_gets_the_corrective_retry_then_fails(tmp_path, fault_env):
    llm = LLM(ModelSpec(name="openai-api/fault/badcontentxall", max_retries=0), None, UsageLedger())
    res = asyncio.run(llm.structured("Question: who?", Answers, method="m", phase="answer", stage="answer"))
    assert res.failed and res.attempts == 2 and res.error.startswith("invalid structured output after retry")
    assert fault_env.stats()["distinct"] == 2  # the retry shows the model its invalid reply


def test_refused_connection_stops_the_run_but_a_dropped_one_does_not(tmp_path, fault_env, monkeypatch):
    monkeypatch.setenv("DEAD_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("DEAD_API_KEY", "unused-key-000000000")
    llm = LLM(ModelSpec(name="openai-api/dead/m", max_retries=0), None, UsageLedger())
    with pytest.raises(ModelUnavailableError, match="127.0.0.1:9/v1 is unreachable"):
        asyncio.run(llm.generate("hi", method="m", phase="answer"))
    _, res = call(tmp_path, "dropxall", max_retries=0)
    assert res.failed and "RemoteProtocolError" in res.error


# -- whole runs -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_run_with_transient_faults_scores_exactly_like_a_clean_run(tmp_path, fault_env, capsys):
    need_data("phantomwiki")
    plan = "e429x1_e500x1_dropx1_truncx1_badjsonx1"  # five faults in a row before every success
    clean, faulty = tmp_path / "clean", tmp_path / "faulty"
    assert main(pw_args(clean, "openai-api/fault/ok", "hybrid_rag,no_source", 3, "0", "--no-report")) == 0
    fault_env.reset()
    assert main(pw_args(faulty, f"openai-api/fault/{plan}", "hybrid_rag,no_source", 3, "0", "--no-report")) == 0
    st = fault_env.stats()
    assert all(got == ["e429", "e500", "drop", "trunc", "badjson", "ok"] for got in st["fault_of"].values())
    assert st["distinct"] == 8  # the two probes (plain, structured) and 2 methods x 3 tasks
    drop = ("run_id", "model", "artifact")  # the artifact key includes the model name
    assert comparable(rows(faulty), drop) == comparable(rows(clean), drop)
    assert not jsonl(faulty / "failures.jsonl")
    assert not [u for u in jsonl(faulty / "usage.jsonl") if u["status"] == "failed"]


@pytest.mark.slow
def test_persistent_faults_are_scored_failures_in_results_failures_and_report(tmp_path, fault_env):
    need_data("phantomwiki")
    # distinct requests fall in five equal classes: HTTP 500, dropped connection, invalid body,
    # reply not matching the schema, and no fault; each fault is persistent (the first probe passes)
    plan = "pass1_e500xallp20_dropxallp40_badjsonxallp60_badcontentxallp80"
    out = tmp_path / "run"
    n = 12
    # most answers fail: the cell is degraded, so the run says so with exit code 4 (not 0)
    assert main(pw_args(out, f"openai-api/fault/{plan}", "no_source", n, "0", "--max-retries", "1")) == EXIT_DEGRADED
    r = rows(out)
    assert len(r) == n and len({x["task_id"] for x in r}) == n  # nothing dropped
    failed = [x for x in r if x["failed"]]
    assert failed and len(failed) < n
    assert all(x["score"] == 0.0 and x["failure_reason"] for x in failed)
    kinds = Counter(x["failure_reason"].split(":", 1)[0] for x in failed)
    assert set(kinds) <= {"InternalServerError", "APIConnectionError", "JSONDecodeError",
                          "invalid structured output after retry"}
    # every failed row is accounted for by a failed call with the same reason (the structured-output probe,
    # the second distinct request, may fall in a fault class: its failure is the probe's, no row's)
    fails = [f for f in jsonl(out / "failures.jsonl") if f.get("phase") != "probe"]
    assert Counter(f["error"] for f in fails) == Counter(x["failure_reason"][:300] for x in failed)
    usage_failed = sum(u["calls"] for u in jsonl(out / "usage.jsonl")
                       if u["status"] == "failed" and u.get("phase") != "probe")
    assert usage_failed == sum(1 for f in fails if not f["error"].startswith("invalid structured output"))
    # the report says how many calls failed and why
    md = (out / "report" / "leaderboard.md").read_text()
    assert "## Failures" in md
    for kind, count in kinds.items():
        assert f"| {kind[:60]} | {count} |" in md, (kind, count)
    assert "| no_source (baseline) | DEGRADED (" in md or "| no_source | DEGRADED (" in md
