"""Frozen artifacts: a killed build leaves a staging folder, which the next run removes."""

from __future__ import annotations

import asyncio

from sourcebench.harness.artifacts import MANIFEST, ArtifactStore


def test_staging_folders_of_killed_builds_are_removed(tmp_path):
    store = ArtifactStore(tmp_path / "artifacts")

    async def build(folder):
        (folder / "model.json").write_text("{}")
        return {"n": 1}

    done = asyncio.run(store.get_or_build("method/x", {"a": 1}, build))
    # what SIGKILL during two builds leaves behind: half-written folders next to the frozen one
    stale = [done.parent / f".{done.name}.k3x_9q2a", done.parent / ".0123456789abcdef.zz1"]
    for d in stale:
        d.mkdir()
        (d / "partial.json").write_text("{")
    other = done.parent / ".notes"  # not a staging name: left alone
    other.mkdir()

    assert store.remove_staging() == 2
    assert not any(d.exists() for d in stale) and other.exists()
    assert (done / MANIFEST).exists() and store.verify(done)["stats"] == {"n": 1}
    assert store.remove_staging() == 0


def test_sub_artifacts_are_recorded_and_verified_with_the_artifact_that_used_them(tmp_path):
    import pytest

    from sourcebench.harness.errors import DataError

    store = ArtifactStore(tmp_path / "artifacts")

    async def index(folder):
        (folder / "vectors.bin").write_bytes(bytes(range(200)))

    async def method(folder):
        shared = await store.get_or_build("hybrid_index", {"source": "s"}, index)
        (folder / "index.txt").write_text(shared.name)

    async def build_both():
        return await store.get_or_build("method/m", {"a": 1}, method)

    folder = asyncio.run(build_both())
    shared = store.path("hybrid_index", {"source": "s"})
    assert store.manifest(folder)["uses"] == [f"hybrid_index/{shared.name}"]
    assert "uses" not in store.manifest(shared)
    store.verify_tree(folder)

    # the shared index altered on disk (still a valid file): a fresh process's check names it
    (shared / "vectors.bin").write_bytes(bytes(reversed(range(200))))
    fresh = ArtifactStore(tmp_path / "artifacts")
    with pytest.raises(DataError, match=rf"{shared}: artifact files changed .* remove the folder to rebuild it"):
        fresh.verify_tree(folder)
    assert fresh.broken and str(shared) in fresh.broken[0]
    # handed out again (a method loading it while answering): the same check, not the altered files
    other = ArtifactStore(tmp_path / "artifacts")
    with pytest.raises(DataError, match="content hash mismatch"):
        asyncio.run(other.get_or_build("hybrid_index", {"source": "s"}, index))
    assert other.broken

    # removed, it is rebuilt (the same key) and the tree verifies again
    import shutil

    shutil.rmtree(shared)
    again = ArtifactStore(tmp_path / "artifacts")
    assert asyncio.run(again.get_or_build("hybrid_index", {"source": "s"}, index)) == shared
    again.verify_tree(folder)


def test_an_unreadable_artifact_file_is_one_line_naming_it(tmp_path):
    import os

    import pytest

    from sourcebench.harness.errors import DataError

    store = ArtifactStore(tmp_path / "artifacts")

    async def build(folder):
        (folder / "model.json").write_text("{}")

    done = asyncio.run(store.get_or_build("method/x", {"a": 1}, build))
    (done / "model.json").unlink()
    (done / "model.json").mkdir()  # the path is there but not a readable file
    (done / "model.json" / "x").write_text("")
    with pytest.raises(DataError, match="content hash mismatch"):
        ArtifactStore(tmp_path / "artifacts").verify(done)
    if os.geteuid() != 0:  # root reads anything
        (done / "model.json" / "x").chmod(0)
        with pytest.raises(DataError, match=r"model.json/x: artifact file unreadable"):
            ArtifactStore(tmp_path / "artifacts").verify(done)


def test_a_build_that_fills_the_disk_names_the_folder(tmp_path):
    import errno

    import pytest

    store = ArtifactStore(tmp_path / "artifacts")

    async def build(folder):
        raise OSError("58368 requested and 5088 written")  # numpy's message, without a path

    async def full(folder):
        raise OSError(errno.ENOSPC, "No space left on device")

    for b in (build, full):
        with pytest.raises(OSError) as e:
            asyncio.run(store.get_or_build("method/x", {"a": 1}, b))
        assert e.value.filename == str(tmp_path / "artifacts" / "method_x") and "is the disk full?" in str(e.value)
    assert not list((tmp_path / "artifacts" / "method_x").iterdir())
