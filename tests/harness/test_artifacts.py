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
