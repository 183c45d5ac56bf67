"""Reply bounds and the reasoning allowance.

``scripted/...rsn<N>...`` reasons N tokens before every reply and counts them against the cap, as
OpenAI's reasoning models do; a cap smaller than that gives an empty reply cut by ``length``.
"""

import asyncio

from pydantic import BaseModel

from sourcebench.harness.health import build_health, learn_reasons
from sourcebench.harness.llm import (
    DEFAULT_REASONING_TOKENS,
    LLM,
    UNLIMITED,
    CallCache,
    ModelSpec,
    UsageLedger,
    reasoning_family,
)
from sourcebench.harness.providers import scripted


class Pick(BaseModel):
    name: str


def run(coro):
    return asyncio.run(coro)


def make(tmp_path, name: str, **kw) -> LLM:
    return LLM(ModelSpec(name=name, **kw), CallCache(tmp_path / "c.sqlite"), UsageLedger())


def test_reasoning_families_and_efforts():
    for name in ("openai-api/x/gpt-oss-120b", "openai/gpt-5-mini", "openai/o3", "openai/o4-mini",
                 "openai-api/deepseek/deepseek-reasoner", "openai-api/ds/DeepSeek-V4.1-Flash", "vllm/Qwen/QwQ-32B"):
        assert reasoning_family(name), name
    for name in ("openai/gpt-4o-mini", "openai/gpt-4.1-mini", "local/smollm2", "vllm/Qwen/Qwen2.5-7B-Instruct",
                 "openai/gpt-5-chat-latest", "scripted/unit"):
        assert not reasoning_family(name), name
    assert ModelSpec("openai/gpt-4o-mini").output_cap(128) == 128  # no reasoning: the bound itself
    assert ModelSpec("openai/gpt-4o-mini", reasoning_effort="medium").output_cap(128) == 128 + 25_000
    assert ModelSpec("openai/gpt-5-mini", reasoning_effort="none").output_cap(128) == 128
    assert ModelSpec("openai/gpt-5-mini").output_cap(128) == 128 + DEFAULT_REASONING_TOKENS["medium"]
    assert ModelSpec("openai/gpt-5-mini", reasoning_effort="high").output_cap(10) == 10 + 32_768
    assert ModelSpec("openai/gpt-5-mini", reasoning_tokens=300).output_cap(128) == 428
    assert ModelSpec("openai/gpt-5-mini", reasoning_tokens=UNLIMITED).output_cap(128) is None
    # settings (artifact keys, run.json) of a non-reasoning backend are unchanged
    assert "reasoning_tokens" not in ModelSpec("local/smollm2").settings()
    assert ModelSpec("openai/o3", reasoning_tokens=300).settings()["reasoning_tokens"] == 300


def test_small_cap_on_a_reasoning_backend_is_an_output_cap_failure_that_names_the_numbers(tmp_path):
    """The issue's case: a 128-token answer cap, 1,210 tokens of reasoning, no allowance."""
    llm = make(tmp_path, "scripted/rsn1210", reasons=True, reasoning_tokens=0)
    res = run(llm.structured("Who?", Pick, method="m", phase="answer", stage="answer", max_tokens=128))
    assert res.failed and res.error.startswith("output_cap:")
    assert "output cap 128 spent: 128 reasoning tokens, 0 visible" in res.error
    assert "retried with 256" in res.error and "invalid" not in res.error.lower()
    assert [c["max_tokens"] for c in scripted.CALLS] == [128, 256]  # one retry with twice the cap, no JSON retry
    assert llm.ledger.failures[0]["error"].startswith("output_cap")
    health = llm.ledger.stage_health()
    assert health["answer"] == {"requests": 1, "calls": 2, "failed": 1}


def test_the_allowance_makes_the_same_call_succeed_and_reasoning_is_counted_apart(tmp_path):
    llm = make(tmp_path, "scripted/rsn1210", reasons=True, reasoning_tokens=2000)
    scripted.set_script(lambda msgs, schema: '{"name": "Ada"}')
    res = run(llm.structured("Who?", Pick, method="m", phase="answer", stage="answer", max_tokens=128))
    assert not res.failed and res.value == Pick(name="Ada")
    assert scripted.CALLS[0]["max_tokens"] == 128 + 2000
    live = next(r for r in llm.ledger.snapshot() if r["status"] == "live")
    assert live["reasoning_tokens"] == 1210 and live["output_tokens"] == len('{"name": "Ada"}') // 4
    # re-run: served by the cache, reasoning tokens still counted apart, no model call
    llm2 = make(tmp_path, "scripted/rsn1210", reasons=True, reasoning_tokens=2000)
    again = run(llm2.structured("Who?", Pick, method="m", phase="answer", stage="answer", max_tokens=128))
    assert again.value == Pick(name="Ada") and len(scripted.CALLS) == 1
    cached = next(r for r in llm2.ledger.snapshot() if r["status"] == "cached")
    assert cached["reasoning_tokens"] == 1210


def test_a_retry_with_a_larger_cap_rescues_a_reply_cut_by_reasoning(tmp_path):
    llm = make(tmp_path, "scripted/rsn200", reasons=True, reasoning_tokens=100)
    scripted.set_script(lambda msgs, schema: "word " * 40)  # 50 visible tokens
    res = run(llm.generate("Summarise.", method="m", phase="learn", stage="summary", max_tokens=100))
    # first cap 200: all reasoning, nothing visible; second cap 400: 200 reasoning + the whole text
    assert not res.failed and res.text == "word " * 40
    assert [c["max_tokens"] for c in scripted.CALLS] == [200, 400]


def test_a_plain_reply_cut_by_its_own_bound_is_a_reply(tmp_path):
    """A non-reasoning backend's text cut at the stage's bound is what the bound asks for (RAPTOR's
    100-token summaries on a gpt-3.5-like model): kept, no retry."""
    llm = make(tmp_path, "scripted/unit")
    scripted.set_script(lambda msgs, schema: None)
    res = run(llm.generate("a b c", method="m", phase="learn", max_tokens=5))
    assert not res.failed and len(scripted.CALLS) == 1


def test_cut_json_is_retried_with_a_larger_cap_not_reported_as_invalid_json(tmp_path):
    """A structured reply the cap cut (finish reason length) is an output_cap failure after one retry
    with twice the cap, whatever the backend; the spec here does not reason (no allowance added)."""
    scripted.set_script(lambda msgs, schema: '{"name": "' + "x" * 400 + '"}')
    llm = make(tmp_path, "scripted/unit-rsn1")  # 1 reasoning token: the scripted API then honours the cap
    res = run(llm.structured("Who?", Pick, method="m", phase="learn", stage="s", max_tokens=20))
    assert res.failed and res.error.startswith("output_cap:") and "Invalid JSON" not in res.error
    assert [c["max_tokens"] for c in scripted.CALLS] == [20, 40]


def test_unlimited_sends_no_cap(tmp_path):
    llm = make(tmp_path, "scripted/rsn5000", reasons=True, reasoning_tokens=UNLIMITED)
    scripted.set_script(lambda msgs, schema: '{"name": "Ada"}')
    res = run(llm.structured("Who?", Pick, method="m", phase="answer", max_tokens=128))
    assert not res.failed and scripted.CALLS[0]["max_tokens"] is None


def test_build_health_marks_a_stage_over_the_failure_share(tmp_path):
    llm = make(tmp_path, "scripted/rsn1210", reasons=True, reasoning_tokens=0)
    for i in range(3):
        run(llm.structured(f"Who {i}?", Pick, method="m", phase="learn", stage="ground", max_tokens=50))
    health = build_health(llm.ledger.stage_health(), {"lost": {"RAPTOR summaries written": {"done": 9,
                                                                                             "attempted": 10}}})
    reasons = learn_reasons(health, 0.10)
    assert reasons == ["learning stage ground: 3 of 3 model requests failed (100 %)"]
    health["lost"]["RAPTOR summaries written"]["done"] = 5
    assert "RAPTOR summaries written: 5 of 10 (50 %)" in learn_reasons(health, 0.10)
