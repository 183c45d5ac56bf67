"""Frozen, content-addressed artifacts on disk.

An artifact's folder name is the hash of everything that determines it (method, version, config,
source fingerprint, guidance ids, backend settings, embedder): the same inputs find the same
artifact, so learning happens once. Its ``artifact.json`` records the inputs and a sha256 over the
files, checked on load so a frozen artifact that was modified is noticed, not silently used.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import tempfile
import time
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .data import stable_hash
from .errors import DataError
from .io import atomic_write_json, read_json

MANIFEST = "artifact.json"


def content_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            h.update(p.relative_to(folder).as_posix().encode())
            h.update(b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


_STAGING = re.compile(r"^\.[0-9a-f]{16}\.[a-z0-9_]+$")  # tempfile.mkdtemp(prefix=".<key>.")


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        # one build per key at a time in this process; asyncio locks belong to one event loop
        self._building: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
            weakref.WeakKeyDictionary())

    def key(self, kind: str, inputs: dict[str, Any]) -> str:
        return stable_hash(kind, json.dumps(inputs, sort_keys=True, default=str))[:16]

    def path(self, kind: str, inputs: dict[str, Any]) -> Path:
        return self.root / kind.replace("/", "_") / self.key(kind, inputs)

    def exists(self, kind: str, inputs: dict[str, Any]) -> bool:
        return (self.path(kind, inputs) / MANIFEST).exists()

    def manifest(self, folder: Path) -> dict[str, Any]:
        return read_json(folder / MANIFEST)

    def verify(self, folder: Path) -> dict[str, Any]:
        man = self.manifest(folder)
        if content_hash(folder) != man.get("content_sha256"):
            raise DataError(f"{folder}: artifact files changed since they were frozen (content hash mismatch)")
        return man

    def remove_staging(self) -> int:
        """Delete half-built folders (``.<key>.<random>``) that a killed run left next to the artifacts.

        Only safe while nothing is being built: the runner calls it under the folder's lock, before
        learning. Returns how many were removed.
        """
        n = 0
        for tmp in self.root.glob("*/.*.*"):
            if tmp.is_dir() and _STAGING.match(tmp.name):
                shutil.rmtree(tmp, ignore_errors=True)
                n += 1
        return n

    async def get_or_build(
        self,
        kind: str,
        inputs: dict[str, Any],
        build: Callable[[Path], Awaitable[dict[str, Any] | None]],
    ) -> Path:
        """Return the frozen folder for these inputs, building it (atomically) if absent."""
        final = self.path(kind, inputs)
        if (final / MANIFEST).exists():
            return final
        locks = self._building.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(final, asyncio.Lock()):  # concurrent cells share one build
            if (final / MANIFEST).exists():
                return final
            return await self._build(kind, inputs, final, build)

    async def _build(self, kind: str, inputs: dict[str, Any], final: Path,
                     build: Callable[[Path], Awaitable[dict[str, Any] | None]]) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        try:
            t0 = time.time()
            stats = await build(tmp) or {}
            man = {
                "kind": kind,
                "key": final.name,
                "inputs": inputs,
                "stats": stats,
                "build_seconds": round(time.time() - t0, 3),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "content_sha256": content_hash(tmp),
            }
            atomic_write_json(tmp / MANIFEST, man)
            if final.exists():  # a concurrent or crashed build left a folder without manifest
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final
