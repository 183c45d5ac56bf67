"""Where benchmark data comes from (local folders, the Hugging Face Hub) and how its state is reported.

MultiDoc2Dial and NarrativeQA fall back to the Hub when their local folders come up empty. Offline,
``datasets`` retries for half a minute before failing, so the Hub is first probed with one name
lookup and connection (skipped when ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` ask for the local
cache only); every failure becomes a ``DataError`` that says what to download and that
``--data-dir`` takes local files. ``Availability`` is the richer status ``sourcebench data`` prints.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sourcebench.harness.benchmark import DataStatus, default_data_dirs
from sourcebench.harness.errors import DataError

HUB_HOST = "huggingface.co"

# present: a run can use it now; remote: not on disk, but the Hub is reachable and a run downloads it;
# missing: neither; unavailable: cannot be evaluated here at all (e.g. AppWorld without its task data)
STATES = ("present", "remote", "missing", "unavailable")


@dataclass
class Availability(DataStatus):
    """A ``DataStatus`` that also says which of ``STATES`` holds and every place that was looked in."""

    state: str = "missing"
    looked_in: list[str] = field(default_factory=list)


def offline_mode() -> bool:
    """Whether the user asked the Hugging Face libraries to use their cache only."""
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> str:
    """'' when huggingface.co resolves and accepts a connection, else the reason it does not."""
    try:
        infos = socket.getaddrinfo(HUB_HOST, 443, type=socket.SOCK_STREAM)
    except OSError as e:
        return f"{HUB_HOST} cannot be resolved ({e.strerror or e})"
    try:
        with socket.create_connection(infos[0][4][:2], timeout=timeout):
            return ""
    except OSError as e:
        return f"{HUB_HOST} does not accept connections ({e.strerror or e})"


def parquet_url(repo: str, revision: str, path: str) -> str:
    """An ``hf://`` path into a dataset repo at a revision (branch names such as refs/convert/parquet
    must be URL-encoded there)."""
    return f"hf://datasets/{repo}@{quote(revision, safe='')}/{path}"


def iter_rows(what: str, how_to_get: str, load: Callable[[], Any]) -> Iterator[dict[str, Any]]:
    """Rows of a ``datasets`` object built by ``load()``, with every failure turned into a DataError.

    ``what`` names the dataset and revision in messages; ``how_to_get`` says which files to download
    and where to put them.
    """
    if not offline_mode():
        why = hub_reachable()
        if why:
            raise DataError(f"{what}: not available offline: {why}; {how_to_get}, or pass --data-dir")
    try:
        import datasets  # noqa: F401  (the import alone can fail in a broken environment)

        ds = load()
        yield from ds
    except DataError:
        raise
    except Exception as e:  # datasets raises many types (ConnectionError, FileNotFoundError, HfHubHTTPError ...)
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
        raise DataError(f"{what}: could not be loaded from the Hugging Face Hub ({type(e).__name__}: {msg}); "
                        f"{how_to_get}, or pass --data-dir") from None


def candidate_dirs(bench: Any) -> list[Path]:
    """The folders ``Benchmark.data_root`` tries, in order (for messages and ``sourcebench data``)."""
    if bench._data_dir is not None:
        return [bench._data_dir / bench.subdir, bench._data_dir]
    return [d / bench.subdir for d in default_data_dirs()]


def hub_status(what: str) -> tuple[str, str]:
    """(state, detail) of a Hub dataset that is not on disk, without downloading anything."""
    if offline_mode():
        return "missing", f"{what}: Hugging Face offline mode is set, so only its local cache could serve it"
    why = hub_reachable()
    if why:
        return "missing", f"{what}: not available offline ({why})"
    return "remote", f"{what}: not on disk; the Hub is reachable and a run downloads it"
