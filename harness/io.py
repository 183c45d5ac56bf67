"""File helpers: atomic writes and JSON/JSONL readers whose errors name the file and line."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .errors import DataError

# Input files larger than this are refused with a one-line error instead of exhausting memory.
MAX_INPUT_MB_ENV = "SOURCEBENCH_MAX_INPUT_MB"
DEFAULT_MAX_INPUT_MB = 1024
# Environment variables whose values are credentials: never written to any file the harness writes.
# Every credential is masked from 4 characters on (short keys are common, and a server may echo one
# into an error). Names that can only hold a credential (``OPENAI_API_KEY``, ``<SERVICE>_API_KEY``, ``*_SECRET``,
# ``*_PASSWORD``, ``*_ACCESS_TOKEN``, ...) are masked whatever the value; other ``*_KEY`` and ``*_TOKEN``
# names also name ordinary settings (``SORT_KEY=name``, ``FOO_KEY=default``, ``PAD_TOKEN=<pad>``), so a
# value of theirs under 16 characters that reads as a setting (a lower-case identifier such as
# ``default`` or ``gpt-4o``, or a bracketed special token) is left alone: masking it would rewrite
# ordinary words in every text.
_SECRET_NAME = re.compile(r"(API_KEY|APIKEY|_TOKEN|SECRET|PASSWORD|PASSWD|_KEY)$", re.IGNORECASE)
_CREDENTIAL_NAME = re.compile(r"(API_KEY|APIKEY|SECRET|SECRET_KEY|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE_KEY|"
                              r"ACCESS_TOKEN|AUTH_TOKEN|API_TOKEN|BEARER_TOKEN)$", re.IGNORECASE)
_MIN_SECRET_LEN = 4
_ANY_VALUE_LEN = 16  # from here on a value of any credential-like name is masked, whatever it reads as
_SETTING_VALUE = re.compile(r"^([a-z][a-z0-9]*([_.:/-][a-z0-9]+)*|[<\[][^\s]*[>\]])$")
# placeholder keys of local endpoints, and values that are JSON syntax or plain numbers: masking them
# would rewrite ordinary words and break the JSON lines the runner writes, and they guard nothing
_NOT_SECRET = re.compile(r"(?i)^(empty|none|null|true|false|dummy|test|local|unused|not-needed|no-key|"
                         r"[0-9.eE+-]+)$")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:\"']+:[^/\s@\"']+@")  # scheme://user:secret@host


_is_secret_name: dict[str, bool] = {}
_secrets_memo: tuple[object, list[str]] = ((), [])


def secret_values() -> list[str]:
    """Values of credential-like environment variables (longest first, so overlaps mask fully).

    Called for every row and log record, and the environment may change between calls (tests, a
    user's script): the answer is memoised on a snapshot of the raw environment, which costs a
    fraction of decoding and matching every variable again."""
    global _secrets_memo
    raw = getattr(os.environ, "_data", None)
    snap = tuple(raw.items()) if isinstance(raw, dict) else tuple(os.environ.items())
    if snap == _secrets_memo[0]:
        return list(_secrets_memo[1])
    vals = set()
    for k, v in os.environ.items():
        hit = _is_secret_name.get(k)
        if hit is None:
            hit = _is_secret_name[k] = bool(_SECRET_NAME.search(k))
        if hit and _credential(k, v):
            vals.add(v)
    out = sorted(vals, key=len, reverse=True)
    _secrets_memo = (snap, out)
    return list(out)


def _credential(name: str, value: str) -> bool:
    value = value.strip()
    if len(value) < _MIN_SECRET_LEN or _NOT_SECRET.match(value):
        return False
    return bool(_CREDENTIAL_NAME.search(name)) or len(value) >= _ANY_VALUE_LEN or not _SETTING_VALUE.match(value)


def redact_secrets(text: str, *, bearer: bool = False) -> str:
    """Mask the values of ``*_API_KEY``/``*_TOKEN``/... variables and passwords in URLs; with
    ``bearer`` also any ``Bearer <token>`` (for error messages, where a server may echo the
    request's header)."""
    for v in secret_values():
        if v in text:
            text = text.replace(v, "***")
    if "://" in text and "@" in text:
        text = _URL_USERINFO.sub(r"\1***@", text)
    return _BEARER.sub("Bearer ***", text) if bearer else text


# Credential shapes, for text that may hold a key no variable of this environment holds (a report made
# on another machine from a run folder whose error messages or commands echoed one): well-known key
# prefixes (OpenAI/Anthropic sk-, Hugging Face, GitHub, Slack, AWS, Google) and long random-looking
# strings mixing upper case, lower case and digits (hex hashes are spared).
_KEY_SHAPES = [
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:hf|ghp|gho|ghs|ghu|github_pat|xox[abpr])_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bAKIA[0-9A-Z]{12,}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"\b(?=[A-Za-z0-9_\-]*[A-Z])(?=[A-Za-z0-9_\-]*[a-z])(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{32,}"),
]
# "api_key=...", "--api-key ...", "Authorization: Bearer ...": keep the name, mask the value
_KEY_ASSIGN = re.compile(
    r"(?i)((?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|secret|password|passwd)[\"']?\s*[:= ]\s*"
    r"[\"']?|authorization[\"']?\s*:\s*(?:bearer\s+)?|\bbearer\s+)(?!\*\*\*)[^\s\"',;]+"
)


def redact_credentials(text: str) -> str:
    """``redact_secrets`` (with bearer tokens) plus anything shaped like a credential (``_KEY_SHAPES``,
    ``_KEY_ASSIGN``), for text meant to be shared (reports), where the key may be one this process's
    environment does not hold."""
    text = redact_secrets(_KEY_ASSIGN.sub(r"\1***", text), bearer=True)
    for pat in _KEY_SHAPES:
        text = pat.sub("***", text)
    return text


def _new_file_mode() -> int:
    """What ``open(path, "w")`` would give a new file: 0o666 less the process's umask (read once,
    at import: reading it means setting it, which is not thread-safe)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


_NEW_FILE_MODE = _new_file_mode()


@contextmanager
def atomic_file(path: Path, *, binary: bool = False, fsync: bool = True) -> Iterator[IO[Any]]:
    """A temp file next to ``path`` that replaces it when the block ends without an error and is
    removed when it raises, so a crash never leaves a half-written file. The file gets the mode a
    plainly written one would (mkstemp's is 0600: run folders and reports shared with a group or
    served as pages were readable by their owner only)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with named_os_errors(path):
            with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
                os.fchmod(f.fileno(), _NEW_FILE_MODE)
                yield f
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` atomically (:func:`atomic_file`), secrets masked."""
    with atomic_file(path) as f:
        f.write(redact_secrets(text))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def append_jsonl(path: Path, rows: list[dict[str, Any]], *, durable: bool = True) -> None:
    """Append whole lines with one ``write`` (secrets masked), then fsync unless ``durable=False``.

    One ``O_APPEND`` write per call keeps the lines of concurrent writers (the cells of a Ray run
    on one shared folder) from interleaving; a crash can only leave a torn final line, which
    readers skip (see ``read_jsonl``) and the runner cuts off before appending again. A killed
    process loses nothing written; the fsync guards against a power cut, at a few milliseconds
    per call, so counters that can be recounted skip it.
    """
    if not rows:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = redact_secrets("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)).encode()
    with named_os_errors(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def named_os_errors(path: Path) -> Iterator[None]:
    """An OSError without a file name (``os.write`` on a full disk: "No space left on device") gets
    ``path``, so the one-line error says which file could not be written."""
    try:
        yield
    except OSError as e:
        if e.filename:
            raise
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None


def read_text(path: Path) -> str:
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    if path.is_dir():
        raise DataError(f"{path}: is a directory, expected a file")
    if not path.is_file():
        raise DataError(f"{path}: not a regular file")
    limit_mb = float(os.environ.get(MAX_INPUT_MB_ENV) or DEFAULT_MAX_INPUT_MB)
    size = path.stat().st_size
    if size > limit_mb * 2**20:
        raise DataError(f"{path}: file is too large ({size / 2**20:.1f} MB, limit {limit_mb:g} MB; "
                        f"set {MAX_INPUT_MB_ENV} to raise it)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 text (byte {e.start})") from None


def read_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None


def iter_jsonl(path: Path, *, tolerate_torn_tail: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object). A malformed line is a DataError naming file and line.

    With ``tolerate_torn_tail`` a final line without newline that fails to parse is skipped: that is
    what an append interrupted by a crash leaves behind, and the row will be recomputed.
    """
    text = read_text(path)
    lines = text.split("\n")
    last = len(lines)
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if tolerate_torn_tail and i == last:
                return
            raise DataError(f"{path}:{i}: malformed JSON line ({e.msg})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        yield i, obj


def read_jsonl(path: Path, *, tolerate_torn_tail: bool = False) -> list[dict[str, Any]]:
    return [obj for _, obj in iter_jsonl(path, tolerate_torn_tail=tolerate_torn_tail)]


def require_fields(path: Path, line: int | None, obj: dict[str, Any], fields: list[str]) -> None:
    missing = [f for f in fields if f not in obj]
    if missing:
        where = f"{path}:{line}" if line else str(path)
        raise DataError(f"{where}: missing field(s) {', '.join(missing)}")
