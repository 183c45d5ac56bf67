"""Atomic writes (harness/io.py): whole files or none, with the mode a plainly written file gets."""

from __future__ import annotations

import os
import stat

import pytest

from sourcebench.harness.io import atomic_file, atomic_write_json, atomic_write_text


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_written_files_get_the_mode_open_would_give(tmp_path):
    """mkstemp makes 0600 files: a run folder's run.json, protocols and reports were readable by their
    owner only, unlike results.jsonl next to them (written with open)."""
    atomic_write_json(tmp_path / "run.json", {"a": 1})
    with (tmp_path / "plain.txt").open("w") as f:
        f.write("x")
    want = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert want == 0o666 & ~_umask()
    assert stat.S_IMODE((tmp_path / "run.json").stat().st_mode) == want


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "report.md"
    atomic_write_text(target, "old\n")
    with pytest.raises(RuntimeError), atomic_file(target) as f:
        f.write("half of the new")
        raise RuntimeError("crash while writing")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]
    with atomic_file(tmp_path / "data.bin", binary=True, fsync=False) as f:
        f.write(b"\x00\x01")
    assert (tmp_path / "data.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "report.md"]


def test_secrets_are_masked_in_atomic_text_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "sk-test-abcdefghijklmnopqrstuvwxyz")
    atomic_write_text(tmp_path / "x.json", '{"key": "sk-test-abcdefghijklmnopqrstuvwxyz"}')
    assert "abcdefghij" not in (tmp_path / "x.json").read_text()


def test_api_keys_are_masked_from_four_characters_other_names_from_sixteen(tmp_path, monkeypatch):
    from sourcebench.harness.io import append_jsonl, redact_secrets

    monkeypatch.setenv("OPENAI_API_KEY", "sk-XYZ7q9w")  # 10 characters
    monkeypatch.setenv("JUDGE_API_KEY", "k3y!")  # a <SERVICE>_API_KEY of 4
    monkeypatch.setenv("LOCAL_API_KEY", "EMPTY")  # a local server's placeholder: not a credential
    monkeypatch.setenv("NUM_API_KEY", "1234")  # would rewrite numbers in every JSON line
    monkeypatch.setenv("FEATURE_KEY", "default")  # not an API key and short: a flag
    text = "reply: sk-XYZ7q9w and k3y! in an EMPTY room, score 0.1234, the default"
    assert redact_secrets(text) == "reply: *** and *** in an EMPTY room, score 0.1234, the default"
    append_jsonl(tmp_path / "r.jsonl", [{"answer": "the key is sk-XYZ7q9w", "score": 0.1234, "ok": True}])
    row = (tmp_path / "r.jsonl").read_text()
    assert "sk-XYZ7q9w" not in row and json_loads(row) == {"answer": "the key is ***", "score": 0.1234, "ok": True}


def json_loads(text: str):
    import json

    return json.loads(text)


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path, monkeypatch):
    import errno

    from sourcebench.harness import io as hio

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hio.os, "write", full)
    with pytest.raises(OSError) as e:
        hio.append_jsonl(tmp_path / "results.jsonl", [{"a": 1}])
    assert e.value.filename == str(tmp_path / "results.jsonl") and e.value.errno == errno.ENOSPC
    monkeypatch.undo()

    class Full:
        def write(self, _):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as e, atomic_file(tmp_path / "run.json") as f:
        Full().write(f)
    assert e.value.filename == str(tmp_path / "run.json")
    assert not (tmp_path / "run.json").exists() and not list(tmp_path.glob(".run.json.*"))
