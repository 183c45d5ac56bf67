"""A checked, resumable HTTP download of one file.

The bytes go to a stable partial name next to the target (``.NAME.part``), so an interrupted
download resumes with an HTTP Range request on the next run; only a file whose size and sha256
match is renamed onto the target (atomically, ``os.replace``), and one that does not match is
deleted with a one-line error. (``harness.io.atomic_file`` is not used for the bytes: its random
temporary name would make every interruption start over.)
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from sourcebench.harness.errors import ConfigError, DataError

from . import FetchReport, Log
from .manifest import Manifest

CHUNK = 1 << 16
TIMEOUT_S = 60.0
USER_AGENT = "sourcebench-data-fetch"
# a download without a pinned sha256 is refused unless the user asks for it (``data fetch
# --allow-unpinned``): its bytes could be anything the server sends today
ALLOW_UNPINNED_ENV = "SOURCEBENCH_ALLOW_UNPINNED"


def unpinned_allowed() -> bool:
    return os.environ.get(ALLOW_UNPINNED_ENV, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class RemoteFile:
    """A file to download: where it goes (relative to the benchmark folder), the addresses to try in
    order, and what it must be (None where not known in advance: the manifest records it then)."""

    path: str
    urls: tuple[str, ...]
    sha256: str | None = None
    size: int | None = None
    # where no sha256 can be pinned in advance, how the caller checks the content instead (e.g. the commit
    # id a git archive carries): such a download is checked, not refused as unpinned
    checked_by: str = ""


class _NetError(Exception):
    """The transfer did not complete (network, HTTP status): the partial file is kept for a resume."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def matches(path: Path, sha256: str | None, size: int | None) -> bool:
    """Whether ``path`` is a file of that size and sha256 (a None criterion is not checked)."""
    if not path.is_file() or (size is not None and path.stat().st_size != size):
        return False
    return sha256 is None or sha256_of(path) == sha256


def fetch_file(spec: RemoteFile, folder: Path, manifest: Manifest, log: Log) -> bool:
    """Make ``folder/spec.path`` the checked file: True when downloaded now, False when an existing
    file verified (against the pinned sha256, else the one the manifest recorded) and was kept."""
    dest = folder / spec.path
    rec = manifest.get(spec.path) or {}
    want_sha = spec.sha256 or rec.get("sha256")
    want_size = spec.size if spec.size is not None else rec.get("size")
    if want_sha and matches(dest, want_sha, want_size):
        if rec.get("sha256") != want_sha:
            manifest.record(spec.path, url=rec.get("url", spec.urls[0]), size=dest.stat().st_size, sha256=want_sha)
        return False
    url, size, digest = download(spec, dest, log)
    manifest.record(spec.path, url=url, size=size, sha256=digest)
    return True


def download(spec: RemoteFile, dest: Path, log: Log, timeout: float = TIMEOUT_S) -> tuple[str, int, str]:
    """Download ``spec`` to ``dest`` through ``.NAME.part``; (url used, size, sha256) once it checks."""
    if spec.sha256 is None and not spec.checked_by and not unpinned_allowed():
        raise ConfigError(f"{spec.path}: no pinned sha256 for {spec.urls[0]}; refusing an unchecked download "
                          f"(pass --allow-unpinned, or set {ALLOW_UNPINNED_ENV}=1, to accept it)")
    if Path(spec.path).is_absolute() or ".." in Path(spec.path).parts:
        raise DataError(f"{spec.path}: a download's path must stay inside the benchmark's folder")
    part = dest.with_name(f".{dest.name}.part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    problems = []
    for url in spec.urls:
        try:
            _transfer(url, part, spec.size, log, timeout)
        except _NetError as e:
            problems.append(f"{url}: {e}")
            continue
        size, digest = part.stat().st_size, sha256_of(part)
        bad = _mismatch(spec, size, digest)
        if bad:
            part.unlink(missing_ok=True)
            problems.append(f"{url}: {bad}, so the download was deleted")
            continue
        os.replace(part, dest)
        return url, size, digest
    resume = " (the partial file is kept and resumed)" if part.exists() else ""
    raise DataError(f"{spec.path}: download failed: {'; '.join(problems)}; run the same command again{resume}")


def _mismatch(spec: RemoteFile, size: int, digest: str) -> str:
    if spec.size is not None and size != spec.size:
        return f"size mismatch ({size} bytes, expected {spec.size})"
    if spec.sha256 is not None and digest != spec.sha256:
        return f"checksum mismatch (sha256 {digest[:16]}..., expected {spec.sha256[:16]}...)"
    return ""


def _transfer(url: str, part: Path, size: int | None, log: Log, timeout: float) -> None:
    """Bring ``part`` up to the whole file, resuming from its current length where the server allows."""
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:
        part.unlink()
        have = 0
    if size is not None and have == size:
        return  # complete from an earlier run; the caller checks it
    headers = {"User-Agent": USER_AGENT, **({"Range": f"bytes={have}-"} if have else {})}
    try:
        resp = urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as e:
        if e.code == 416 and have:  # nothing past the bytes already here: the partial file is whole
            return
        raise _NetError(f"HTTP {e.code} {e.reason}") from None
    except (URLError, OSError, http.client.HTTPException) as e:
        raise _NetError(_reason(e)) from None
    with resp:
        if have and resp.status == 206 and _range_start(resp.headers.get("Content-Range")) == have:
            log(f"resuming {url} at byte {have}")
            mode = "ab"
        else:
            mode, have = "wb", 0
            log(f"downloading {url}" + (f" ({size / 2**20:.1f} MB)" if size else ""))
        length = resp.headers.get("Content-Length")
        expected = have + int(length) if length and length.isdigit() else None
        with open(part, mode) as f:
            try:
                while chunk := resp.read(CHUNK):
                    f.write(chunk)
            except (OSError, http.client.HTTPException) as e:
                raise _NetError(f"connection lost after {f.tell()} bytes ({_reason(e)})") from None
            finally:
                f.flush()
                os.fsync(f.fileno())
    got = part.stat().st_size
    if expected is not None and got < expected:
        raise _NetError(f"connection closed after {got} of {expected} bytes")


def _range_start(content_range: str | None) -> int | None:
    m = re.match(r"bytes (\d+)-", content_range or "")
    return int(m.group(1)) if m else None


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
    return f"{type(e).__name__}: {reason}"


def fetch_files(specs: list[RemoteFile], folder: Path, manifest: Manifest, log: Log,
                report: FetchReport) -> None:
    """``fetch_file`` for each spec, noting in ``report`` which were downloaded and which kept."""
    for spec in specs:
        if fetch_file(spec, folder, manifest, log):
            report.done.append(spec.path)
        else:
            log(f"kept {folder / spec.path} (verified)")
            report.kept.append(spec.path)
