"""Frozen, content-addressed artifacts on disk.

An artifact's folder name is the hash of everything that determines it (method, version, config,
source fingerprint, guidance ids, backend settings, embedder): the same inputs find the same
artifact, so learning happens once. Its ``artifact.json`` records the inputs and a sha256 over the
files, checked on load so a frozen artifact that was modified is noticed, not silently used.

An artifact built while another was being built (a method's artifact using the shared retrieval
index, SourceLearn's M0 under its final model) is recorded in the outer one's ``uses``, so that
the runner checks the whole tree before a cell's test phase. Any artifact handed out again
(``get_or_build`` on a folder that exists) is checked once per process too. A check that fails is
one line naming the folder and saying how to rebuild it (remove the folder: an artifact whose
sub-artifact is gone is built again, and builds it), never a score.
"""

from __future__ import annotations

import asyncio
import contextvars
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
# the sub-artifacts handed out while a build runs (kind folder/key, relative to the store's root)
_USES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("artifact_uses", default=None)


def content_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            h.update(p.relative_to(folder).as_posix().encode())
            h.update(b"\0")
            try:
                h.update(p.read_bytes())
            except OSError as e:
                raise DataError(f"{p}: artifact file unreadable ({e.strerror or e}); remove {folder} to rebuild "
                                "it") from None
    return h.hexdigest()


_STAGING = re.compile(r"^\.[0-9a-f]{16}\.[a-z0-9_]+$")  # tempfile.mkdtemp(prefix=".<key>.")


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        # one build per key at a time in this process; asyncio locks belong to one event loop
        self._building: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Path, asyncio.Lock]] = (
            weakref.WeakKeyDictionary())
        # folders checked in this process, with their manifests (a frozen artifact does not change; a
        # method asks for its shared index once per task)
        self._verified: dict[Path, dict[str, Any]] = {}
        self.broken: list[str] = []  # the first line of every failed check, for the runner to stop on

    def key(self, kind: str, inputs: dict[str, Any]) -> str:
        return stable_hash(kind, json.dumps(inputs, sort_keys=True, default=str))[:16]

    def path(self, kind: str, inputs: dict[str, Any]) -> Path:
        return self.root / kind.replace("/", "_") / self.key(kind, inputs)

    def exists(self, kind: str, inputs: dict[str, Any]) -> bool:
        return (self.path(kind, inputs) / MANIFEST).exists()

    def manifest(self, folder: Path) -> dict[str, Any]:
        man = read_json(folder / MANIFEST)
        if not isinstance(man, dict):
            raise DataError(f"{folder / MANIFEST}: expected a JSON object, got {type(man).__name__}; remove "
                            f"{folder} to rebuild the artifact")
        return man

    def verify(self, folder: Path) -> dict[str, Any]:
        """The manifest of ``folder`` once its files hash to what was frozen; a DataError naming the
        folder (and recorded in ``broken``) otherwise."""
        folder = Path(folder)
        if folder in self._verified:
            return self._verified[folder]
        try:
            man = self.manifest(folder)
            if content_hash(folder) != man.get("content_sha256"):
                raise DataError(f"{folder}: artifact files changed since they were frozen (content hash mismatch); "
                                "remove the folder to rebuild it")
        except DataError as e:
            self.broken.append(str(e))
            raise
        self._verified[folder] = man
        return man

    def verify_tree(self, folder: Path) -> dict[str, Any]:
        """``verify`` the artifact and, recursively, every sub-artifact its manifest says it used."""
        man = self.verify(folder)
        for rel in man.get("uses") or []:
            sub = self.root / str(rel)
            if not (sub / MANIFEST).is_file():
                msg = (f"{sub}: artifact used by {folder} is missing; remove {folder} to rebuild both")
                self.broken.append(msg)
                raise DataError(msg)
            self.verify_tree(sub)
        return man

    def _used(self, folder: Path) -> Path:
        """Note ``folder`` as a sub-artifact of the build in progress (if any) and hand it out."""
        uses = _USES.get()
        if uses is not None:
            rel = folder.relative_to(self.root).as_posix()
            if rel not in uses:
                uses.append(rel)
        return folder

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
        if (final / MANIFEST).exists() and self._complete(final):
            return self._used(final)
        locks = self._building.setdefault(asyncio.get_running_loop(), {})
        async with locks.setdefault(final, asyncio.Lock()):  # concurrent cells share one build
            if (final / MANIFEST).exists() and self._complete(final):
                return self._used(final)
            return self._used(await self._build(kind, inputs, final, build))

    def _complete(self, folder: Path) -> bool:
        """Verified, and every sub-artifact it used is still there: one that was removed (to rebuild it)
        makes this artifact be built again too, which builds the sub-artifact anew (its calls cached)."""
        man = self.verify(folder)
        return all((self.root / str(rel) / MANIFEST).is_file() for rel in man.get("uses") or [])

    async def _build(self, kind: str, inputs: dict[str, Any], final: Path,
                     build: Callable[[Path], Awaitable[dict[str, Any] | None]]) -> Path:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}."))
        uses: list[str] = []
        token = _USES.set(uses)
        try:
            t0 = time.time()
            try:
                stats = await build(tmp) or {}
            finally:
                _USES.reset(token)
            man = {
                "kind": kind,
                "key": final.name,
                "inputs": inputs,
                "stats": stats,
                "build_seconds": round(time.time() - t0, 3),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "content_sha256": content_hash(tmp),
                **({"uses": uses} if uses else {}),
            }
            atomic_write_json(tmp / MANIFEST, man)
            if final.exists():  # a concurrent or crashed build left a folder without manifest
                shutil.rmtree(final)
            tmp.rename(final)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if e.filename:  # names its file: the CLI prints it as it is
                raise
            # numpy's "58368 requested and 5088 written", a bare "No space left on device": say where
            raise OSError(e.errno, f"cannot write the artifact ({e.strerror or e}); is the disk full?",
                          str(final.parent)) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._verified[final] = self.manifest(final)  # hashed as it was frozen
        return final
