"""`sourcebench cache merge`: a union of cache folders that keeps what the destination has."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sourcebench.harness.cache_merge import merge_caches
from sourcebench.harness.cli import main
from sourcebench.harness.embeddings import EmbeddingCache
from sourcebench.harness.errors import ConfigError
from sourcebench.harness.llm import CallCache


def _reply(text: str) -> dict:
    """A cached reply as the model layer stores one."""
    return {"text": text, "input_tokens": 1, "output_tokens": 1}


def _cache(folder, calls: dict[str, str], vectors: dict[str, list[float]] | None = None):
    c = CallCache(folder / "llm_calls.sqlite")
    for k, v in calls.items():
        c.put(k, _reply(v))
    if vectors:
        EmbeddingCache(folder / "embeddings.sqlite").put_many("emb", list(vectors), np.array(list(vectors.values())))
    return folder


def test_merge_is_a_union_that_keeps_existing_entries(tmp_path):
    a = _cache(tmp_path / "a", {"k1": "one", "shared": "from a"}, {"t1": [1.0, 0.0]})
    b = _cache(tmp_path / "run_b" / "cache", {"k2": "two", "shared": "from b"}, {"t1": [9.0, 9.0], "t2": [0.0, 1.0]})
    dest = _cache(tmp_path / "dest", {"shared": "from dest"})
    counts = merge_caches([a, tmp_path / "run_b"], dest)  # a run folder means its cache/
    by = {(c.file, c.source.parent.name): (c.rows, c.added) for c in counts}
    assert by[("llm_calls.sqlite", "a")] == (2, 1)
    assert by[("llm_calls.sqlite", "cache")] == (2, 1)
    assert by[("embeddings.sqlite", "a")] == (1, 1)
    assert by[("embeddings.sqlite", "cache")] == (2, 1)
    merged = CallCache(dest / "llm_calls.sqlite")
    assert merged.get("k1") == _reply("one") and merged.get("k2") == _reply("two")
    assert merged.get("shared") == _reply("from dest")  # never overwritten
    vecs = EmbeddingCache(dest / "embeddings.sqlite").get_many("emb", ["t1", "t2"])
    assert vecs["t1"].tolist() == [1.0, 0.0] and vecs["t2"].tolist() == [0.0, 1.0]
    # the sources are untouched
    assert CallCache(b / "llm_calls.sqlite").get("shared") == _reply("from b")
    # merging again adds nothing
    assert all(c.added == 0 for c in merge_caches([a, b], dest))


def test_merge_refuses_what_is_not_a_cache(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a cache folder"):
        merge_caches([tmp_path / "empty"], tmp_path / "dest")
    with pytest.raises(ConfigError, match="no such folder"):
        merge_caches([tmp_path / "missing"], tmp_path / "dest")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "llm_calls.sqlite").write_text("not sqlite at all " * 100)
    with pytest.raises(ConfigError, match="not a SourceBench cache"):
        merge_caches([bad], tmp_path / "dest")
    a = _cache(tmp_path / "a", {"k": "v"})
    with pytest.raises(ConfigError, match="destination itself"):
        merge_caches([a], a)


def test_cli_merge_prints_counts_and_a_bad_source_is_one_line(tmp_path, capsys):
    a = _cache(tmp_path / "a", {"k1": "one"})
    assert main(["cache", "merge", str(a), "--into", str(tmp_path / "pool")]) == 0
    out = capsys.readouterr().out
    assert "1 entries, 1 new" in out and "--cache-dir" in out
    assert json.loads(json.dumps(CallCache(tmp_path / "pool" / "llm_calls.sqlite").get("k1"))) == _reply("one")
    assert main(["cache", "merge", str(tmp_path / "nope"), "--into", str(tmp_path / "pool")]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope" in err
