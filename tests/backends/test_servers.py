"""What the servers users run answer, and what the model layer makes of it (the API-like backend
playing OpenAI's API, vLLM, llama.cpp's server and llama-cpp-python's server).

An error, refusal or cut-off is a failure with its reason, never an answer, and never cached; the
window is discovered and recorded; schema bounds reach the server; a server without ``json_schema``
stops the run in the preflight with one line.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from sourcebench.harness.errors import ModelUnavailableError
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.providers.discovery import ORIGIN_MODELS, ORIGIN_PROPS, discover_context_window
from tests.backends import tokens
from tests.backends.api_server import REFUSE_MARKER

PLAIN = "openai-api/testapi/llama-3-8b-instruct"  # not of a reasoning family: no allowance
LONG = "Tell me about this passage. " + "The quick brown fox jumps over the lazy dog. " * 40  # ~400 tokens


def run(coro):
    return asyncio.run(coro)


def make(tmp_path: Path, name: str = PLAIN, **kw) -> LLM:
    return LLM(ModelSpec(name=name, max_retries=1, **kw), CallCache(tmp_path / "c.sqlite"), UsageLedger())


def chat_calls(api) -> list[dict]:
    return [c for c in api.stats()["calls"] if c["endpoint"] == "chat.completions"]


@pytest.mark.parametrize("style", ["openai", "vllm", "llamacpp"])
def test_a_context_error_is_a_failure_never_cached_and_a_larger_window_asks_again(api_env, tmp_path, style):
    api_env.context_window, api_env.context_style = 256, style
    llm = make(tmp_path)
    res = run(llm.generate(LONG, method="m", phase="answer", max_tokens=32))
    assert res.failed and res.text == "" and res.error.startswith("context_overflow:"), res.error
    assert llm.ledger.calls("live") == 0 and llm.ledger.calls("failed") == 1
    assert llm.ledger.failures[0]["error"].startswith("context_overflow:")
    api_env.context_window = 8192  # the same request on a larger window: asked again, answered
    again = run(make(tmp_path).generate(LONG, method="m", phase="answer", max_tokens=32))
    assert not again.failed and not again.cached and again.text


def test_an_error_cached_by_an_older_version_is_not_replayed(api_env, tmp_path):
    llm = make(tmp_path)
    msgs = [{"role": "user", "content": "hi"}]
    key = llm.cache_key(msgs, 32, 0.0, None)
    llm.cache.put(key, {"text": "This model's maximum context length is 2048 tokens.", "input_tokens": 0,
                        "output_tokens": 9, "stop_reason": "model_length"})
    res = run(llm.generate(msgs, method="m", phase="answer", max_tokens=32))
    assert not res.cached and not res.failed and "maximum context length" not in res.text


def test_a_refusal_is_a_failure(api_env, tmp_path):
    llm = make(tmp_path)
    res = run(llm.generate(f"Say something. {REFUSE_MARKER}", method="m", phase="answer", max_tokens=32))
    assert res.failed and res.error.startswith("refused:") and "content_filter" in res.error
    assert llm.cache.get(llm.cache_key([{"role": "user", "content": f"Say something. {REFUSE_MARKER}"}], 32, 0.0,
                                       None)) is None


class Answer(BaseModel):
    answer: list[str] = Field(max_length=4, description="the answers")
    note: str = Field(max_length=40)


def test_a_cap_the_server_clamps_to_the_window_is_the_window_not_the_cap(api_env, tmp_path):
    """llama.cpp's server lowers a cap that passes the window: the reply is cut early; no doubling retry."""
    prompt = LONG + " Reply in JSON."
    api_env.context_window, api_env.context_style = tokens.count(prompt) + 4 + 6, "llamacpp"  # 6 tokens of room
    llm = make(tmp_path)
    res = run(llm.structured(prompt, Answer, method="m", phase="answer", max_tokens=300))
    assert res.failed and res.error.startswith("context_overflow:") and "cut after" in res.error, res.error
    calls = chat_calls(api_env)
    assert len(calls) == 1 and calls[0]["cap"] < 300  # one request, not one with twice the cap


def test_the_window_is_discovered_from_vllm_and_llama_cpp(api_env):
    assert discover_context_window(PLAIN, api_env.url) is None  # OpenAI's listing says nothing
    api_env.context_window, api_env.advertise_window = 2048, True
    assert discover_context_window("openai-api/testapi/gpt-oss-120b", api_env.url) == (2048, ORIGIN_MODELS)
    api_env.advertise_window, api_env.context_style, api_env.context_window = False, "llamacpp", 4096
    assert discover_context_window(PLAIN, api_env.url) == (4096, ORIGIN_PROPS)


def test_a_known_window_prechecks_a_prompt_over_it_at_the_methods_budget_ratio(api_env, tmp_path):
    """A prompt over the window at chars / 4 (the ratio methods budget with) is refused without a call;
    one that fits at chars / 4 is sent, and the server's own overflow error decides (a failure then)."""
    llm = make(tmp_path, context_window=2048, context_window_origin="--context-window")
    prompt = "x = foo(bar[1], baz)\n" * 420  # 8,820 characters: ~2,205 tokens at chars / 4
    res = run(llm.generate(prompt, method="m", phase="answer", max_tokens=64))
    assert res.failed and "2,048-token context window, --context-window" in res.error
    assert chat_calls(api_env) == []  # no call spent
    fits = "x = foo(bar[1], baz)\n" * 300  # 6,300 characters: ~1,575 at chars / 4
    run(llm.generate(fits, method="m", phase="answer", max_tokens=64))
    assert len(chat_calls(api_env)) == 1


def test_a_reasoning_allowance_fits_the_window():
    spec = ModelSpec(name="openai-api/llamacpp/Qwen3-0.6B", context_window=8192)
    assert spec.wanted_reasoning_allowance() == 25_000 and spec.reasoning_allowance() == 4096
    assert spec.output_cap(16) == 4112
    assert ModelSpec(name="openai-api/llamacpp/Qwen3-0.6B").output_cap(16) == 25_016  # no window: as asked


def test_the_cap_sent_leaves_the_prompt_room_in_the_window(api_env, tmp_path):
    """vLLM refuses prompt + max_tokens over max_model_len: a reasoning cap is fitted per prompt."""
    api_env.context_window, api_env.context_style = 2048, "vllm"
    llm = make(tmp_path, name="openai-api/testapi/gpt-oss-120b", context_window=2048)
    res = run(llm.generate(LONG, method="m", phase="answer", max_tokens=64))
    assert not res.failed or res.error.startswith("output_cap:"), res.error
    assert api_env.rejections() == [] and chat_calls(api_env)
    assert all(c["cap"] + c["prompt_tokens"] <= 2048 for c in chat_calls(api_env))


@pytest.mark.parametrize("style", ["vllm", "openai"])
def test_a_prompt_the_methods_fitted_is_not_lost_to_a_cap_the_server_rejects(api_env, tmp_path, style):
    """Dense code makes 2.3 characters a cl100k token: a prompt of ~890 tokens at chars / 4 (what methods
    budget) is sent, and the allowance fitted at chars / 3 passes vLLM's window with the prompt's real
    1,534 tokens; the server's rejection names the prompt's count and the call is asked again with the
    room that count leaves, so the reply is not lost to the cap."""
    api_env.context_window, api_env.context_style = 2048, style
    llm = make(tmp_path, name="openai-api/testapi/gpt-oss-120b", context_window=2048, reasoning_effort="low")
    prompt = "x = foo(bar[1], baz)\n" * 170  # 3,570 characters
    res = run(llm.generate(prompt, method="m", phase="answer", max_tokens=64))
    assert not res.error.startswith("context_overflow"), res.error
    calls, rejected = chat_calls(api_env), api_env.rejections()
    assert len(rejected) == 1 and len(calls) == 1  # one rejection, then one call within the window
    assert calls[0]["cap"] + calls[0]["prompt_tokens"] == 2048 and calls[0]["cap"] >= 64
    assert not res.failed and llm.ledger.failures == [] and llm.ledger.stage_health()[""]["failed"] == 0


def test_a_prompt_over_the_window_in_the_servers_tokens_fails_once_asked(api_env, tmp_path):
    """Under the window at chars / 4, over it in the server's tokens: sent (never refused), rejected, not
    asked again (no cap can help), a context_overflow failure naming the window."""
    api_env.context_window, api_env.context_style = 2048, "vllm"
    llm = make(tmp_path, name="openai-api/testapi/gpt-oss-120b", context_window=2048)
    prompt = "x = foo(bar[1], baz)\n" * 380  # 7,980 characters: 1,995 tokens at chars / 4, 3,424 served
    res = run(llm.generate(prompt, method="m", phase="answer", max_tokens=64))
    assert res.failed and res.error.startswith("context_overflow") and "2,048-token" in res.error, res.error
    assert len(api_env.rejections()) == 1 and chat_calls(api_env) == []
    assert len(llm.ledger.failures) == 1


def test_the_output_cap_hint_names_reasoning_only_where_there_is_some(api_env, tmp_path):
    res = run(make(tmp_path).structured("Reply in JSON.", Answer, method="m", phase="answer", max_tokens=2))
    assert res.failed and res.error.startswith("output_cap:")
    assert "--reasoning-tokens" not in res.error and "no reasoning tokens" in res.error


def test_schema_bounds_reach_the_server(api_env, tmp_path):
    res = run(make(tmp_path).structured("Reply in JSON.", Answer, method="m", phase="answer", max_tokens=200))
    assert not res.failed, res.error
    call = chat_calls(api_env)[-1]
    assert call["schema_bounds"] == 2  # maxItems and maxLength, which inspect drops


def test_a_missing_service_variable_is_named(monkeypatch, tmp_path):
    # a service no other test configures (inspect-ai keeps models it made, with their variables, per name)
    monkeypatch.delenv("UNSETSVC_BASE_URL", raising=False)
    monkeypatch.delenv("UNSETSVC_API_KEY", raising=False)
    with pytest.raises(ModelUnavailableError) as e:
        make(tmp_path, name="openai-api/unsetsvc/smollm2").inspect_model()
    assert "UNSETSVC_API_KEY" in str(e.value) and "UNSETSVC_BASE_URL" in str(e.value) and "\n" not in str(e.value)


def _cli(out: Path, *extra: str, methods: str = "no_source", model: str = PLAIN) -> int:
    from sourcebench.harness.cli import main

    return main(["run", "--benchmark", "phantomwiki", "--methods", methods, "--model", model,
                 "--embedder", "openai/text-embedding-3-large", "--seeds", "0", "--limit", "2", "--out", str(out),
                 *extra])


def test_a_server_without_json_schema_stops_the_run_in_one_line(api_env, tmp_path, capsys):
    api_env.json_schema = False
    code = _cli(tmp_path / "run", "--max-retries", "1")  # the probes retry as the run's calls do
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code != 0 and len(err) == 1, err
    err = err[0]
    assert "structured-output" in err and "500" in err and "json_schema" in err
    assert not (tmp_path / "run" / "results.jsonl").exists()
    schema_requests = [r for r in api_env.rejections() if r["status"] == 500]
    assert 1 <= len(schema_requests) <= 2  # 1 + --max-retries attempts (inspect's): no client retries multiplied in


def test_the_discovered_window_is_recorded_in_run_json(api_env, tmp_path):
    api_env.context_window, api_env.advertise_window = 32_768, True
    assert _cli(tmp_path / "run") == 0
    model = json.loads((tmp_path / "run" / "run.json").read_text())["model"]
    assert model["context_window"] == 32_768 and model["context_window_origin"] == ORIGIN_MODELS


def _overflow_then_larger(api, tmp_path: Path, bench: list[str], small: int) -> None:
    """At a small window the overflowing rows are failures naming it and the cell is degraded; the
    same run at a larger window (a new folder, the same call cache) calls the model again."""
    from sourcebench.harness.cli import main
    from sourcebench.harness.health import EXIT_DEGRADED

    def go(out: Path) -> int:
        return main(["run", *bench, "--methods", "hybrid_rag", "--model", "openai-api/testapi/gpt-oss-120b",
                     "--reasoning-effort", "medium", "--embedder", "openai/text-embedding-3-large", "--seeds", "0",
                     "--limit", "2", "--out", str(out), "--cache-dir", str(tmp_path / "cache")])

    api.context_window, api.advertise_window = small, True
    assert go(tmp_path / "small") == EXIT_DEGRADED
    rows = [json.loads(x) for x in (tmp_path / "small" / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["failed"] for r in rows)
    assert all(r["failure_reason"].startswith("context_overflow:") and f"{small:,}-token context window"
               in r["failure_reason"] for r in rows), [r["failure_reason"] for r in rows]
    api.reset()
    api.context_window, api.advertise_window = 32_768, True
    assert go(tmp_path / "large") == 0
    rows = [json.loads(x) for x in (tmp_path / "large" / "results.jsonl").read_text().splitlines()]
    assert rows and not any(r["failed"] for r in rows)
    assert [c for c in chat_calls(api) if c["schema"] is None or c["schema"]]  # answered live


@pytest.mark.slow
def test_apibench_at_a_2048_token_window_fails_the_rows_and_a_larger_window_calls_again(api_env, tmp_path):
    from tests.conftest import SHARED_DATA, need_data

    need_data("apibench")
    _overflow_then_larger(api_env, tmp_path, ["--benchmark", "apibench", "--sources", "torchhub",
                                              "--data-dir", str(SHARED_DATA)], 2048)


def test_phantomwiki_at_a_small_window_fails_the_rows_and_a_larger_window_calls_again(api_env, tmp_path):
    _overflow_then_larger(api_env, tmp_path, ["--benchmark", "phantomwiki"], 640)
