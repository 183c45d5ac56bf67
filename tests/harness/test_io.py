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
