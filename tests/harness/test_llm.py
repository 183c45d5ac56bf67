import asyncio

from pydantic import BaseModel

from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.providers import scripted


class Pick(BaseModel):
    name: str
    count: int


def run(coro):
    return asyncio.run(coro)


def make(tmp_path, name="scripted/unit"):
    return LLM(ModelSpec(name=name), CallCache(tmp_path / "c.sqlite"), UsageLedger())


def test_cache_makes_second_call_free(tmp_path):
    llm = make(tmp_path)
    scripted.set_script(lambda msgs, schema: "hello")
    a = run(llm.generate("hi", method="m", phase="answer"))
    b = run(llm.generate("hi", method="m", phase="answer"))
    assert a.text == b.text == "hello" and not a.cached and b.cached
    assert len(scripted.CALLS) == 1
    rows = {r["status"]: r for r in llm.ledger.snapshot()}
    assert rows["live"]["calls"] == 1 and rows["cached"]["calls"] == 1
    assert rows["live"]["input_tokens"] > 0
    # a new process-level client on the same cache file is also served from cache
    llm2 = make(tmp_path)
    assert run(llm2.generate("hi", method="m", phase="answer")).cached


def test_structured_retry_then_success(tmp_path):
    llm = make(tmp_path)
    replies = iter(['{"name": "x"}', '{"name": "x", "count": 2}'])
    scripted.set_script(lambda msgs, schema: next(replies))
    res = run(llm.structured("pick", Pick, method="m", phase="learn"))
    assert not res.failed and res.value == Pick(name="x", count=2) and res.attempts == 2
    assert "not valid JSON" in scripted.CALLS[1]["messages"][-1]["content"]
    assert scripted.CALLS[0]["schema"]["properties"]["count"]["type"] == "integer"


def test_structured_reads_raw_newlines_inside_strings(tmp_path):
    """SmolLM2 under llama.cpp's schema grammar wrote a literal newline inside a JSON string; the
    meaning is plain, so it parses on the first attempt; a reply with a missing field still retries."""
    llm = make(tmp_path)
    scripted.set_script(lambda msgs, schema: '{"name": "two\nlines\n    ", "count": 3}')
    res = run(llm.structured("pick", Pick, method="m", phase="learn"))
    assert not res.failed and res.attempts == 1 and res.value == Pick(name="two\nlines\n    ", count=3)
    replies = iter(['{"name": "a\nb"}', '{"name": "a", "count": 1}'])
    scripted.set_script(lambda msgs, schema: next(replies))
    res = run(llm.structured("pick again", Pick, method="m", phase="learn"))
    assert not res.failed and res.attempts == 2 and "count" in scripted.CALLS[-1]["messages"][-1]["content"]


def test_structured_failure_is_recorded_not_raised(tmp_path):
    llm = make(tmp_path)
    scripted.set_script(lambda msgs, schema: "not json")
    res = run(llm.structured("pick", Pick, method="m", phase="learn", stage="construct"))
    assert res.failed and res.value is None and "after retry" in res.error
    assert llm.ledger.failures and llm.ledger.failures[0]["stage"] == "construct"


def test_provider_error_becomes_failed_call(tmp_path):
    llm = make(tmp_path, "scripted/fail")
    res = run(llm.generate("hi", method="m", phase="answer"))
    assert res.failed and "scripted failure" in res.error
    assert any(r["status"] == "failed" for r in llm.ledger.snapshot())


def test_context_overflow_is_a_failure_without_a_call(tmp_path):
    llm = LLM(ModelSpec(name="scripted/unit", context_window=100), None, UsageLedger())
    res = run(llm.generate("x" * 4000, method="m", phase="answer"))
    assert res.failed and res.error.startswith("context_overflow") and not scripted.CALLS


def test_cache_key_depends_on_settings(tmp_path):
    llm = make(tmp_path)
    k1 = llm.cache_key([{"role": "user", "content": "a"}], 10, 0.0, None)
    assert k1 != llm.cache_key([{"role": "user", "content": "a"}], 11, 0.0, None)
    assert k1 != llm.cache_key([{"role": "user", "content": "a"}], 10, 0.5, None)
    assert k1 != make(tmp_path, "scripted/other").cache_key([{"role": "user", "content": "a"}], 10, 0.0, None)


def test_ledger_drain_hands_over_each_count_once_and_snapshot_keeps_all():
    led = UsageLedger()
    led.add("m", "learn", "a", "live", 10, 2, 1.0)
    first, _ = led.drain()
    led.add("m", "learn", "a", "live", 5, 1, 1.0)
    led.add("m", "learn", "b", "cached", 3, 1, 0.0)
    second, _ = led.drain()
    assert [(r["stage"], r["calls"], r["input_tokens"]) for r in first] == [("a", 1, 10)]
    assert [(r["stage"], r["calls"], r["input_tokens"]) for r in second] == [("a", 1, 5), ("b", 1, 3)]
    assert led.drain() == ([], [])
    # a method diffs snapshots to cost its stages, whatever the runner drained meanwhile
    assert {(r["stage"], r["calls"]) for r in led.snapshot()} == {("a", 2), ("b", 1)}
    assert led.calls("live") == 2 and led.live_calls() == 2
