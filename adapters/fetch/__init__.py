"""``sourcebench data fetch``: get a benchmark's real data onto this machine, resumably and checked.

The shared part: each benchmark's fetcher is the ``fetch`` module of its own folder
(``adapters/<benchmark>/fetch.py``: ``fetch(dest, settings, log) -> FetchReport`` and ``OPTIONS``), built
on the helpers here: ``download`` (a resumable HTTP download checked against a size and sha256),
``manifest`` (``fetch-manifest.json`` in every benchmark's folder, recording what each step produced, so
a re-run skips the steps whose files still verify and redoes the rest) and ``venv`` (a separate virtual
environment for a generator or an installer). ``FetchedData`` is what a built-in benchmark mixes in so
that ``Benchmark.fetch`` calls its fetcher; ``COMMANDS`` says, for ``sourcebench data``, which command
gets each benchmark's data.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sourcebench.harness.errors import ConfigError, DataError

Log = Callable[[str], None]

# benchmark -> its fetcher: the ``fetch.py`` of its folder (``fetch`` and ``OPTIONS``), found there so
# that a benchmark's folder is the one place that says it has one
FETCHERS = {p.parent.name: f"sourcebench.adapters.{p.parent.name}.fetch"
            for p in sorted(Path(__file__).resolve().parent.parent.glob("*/fetch.py"))}
# the command that gets each built-in benchmark's data (AppWorld has its own installer)
COMMANDS = {**{b: f"sourcebench data fetch {b}" for b in FETCHERS}, "appworld": "sourcebench appworld-setup"}
DEFAULT_DEST = Path("data")


@dataclass
class FetchReport:
    """What one ``fetch`` did: the benchmark's folder, and the steps done now or kept as verified."""

    benchmark: str
    folder: Path
    done: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{len(self.done)} step(s) done now"] + ([f"{len(self.kept)} verified and kept"] if self.kept else [])
        return f"{self.benchmark}: ready in {self.folder} ({', '.join(parts)})"


# a setting that becomes a file or folder name: one path component of these characters, not "." or ".."
_SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def safe_component(benchmark: str, key: str, value: str) -> str:
    """``value`` if it is a single safe path component; a ConfigError naming the setting otherwise
    (``name=../../swe_qa`` once made a fetch delete another benchmark's data)."""
    if not _SAFE_COMPONENT.match(value) or value in (".", "..") or ".." in value:
        raise ConfigError(f"data fetch {benchmark}: --opt {key}={value!r}: expected one folder or file name "
                          "(letters, digits, '.', '_', '-'; no '/', '..' or absolute path)")
    return value


def inside(root: Path, path: Path) -> Path:
    """``path`` if it resolves inside ``root`` (checked before every write or removal a fetch makes)."""
    real_root, real = Path(os.path.realpath(root)), Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise DataError(f"{path}: outside {root}; refusing to write or remove it")
    return path


def command_for(benchmark: str) -> str:
    """The command that gets a benchmark's data, '' when there is none."""
    return COMMANDS.get(benchmark, "")


def check_settings(benchmark: str, settings: dict[str, str], options: dict[str, str]) -> None:
    unknown = sorted(set(settings) - set(options))
    if unknown:
        known = ", ".join(f"{k} ({v})" for k, v in options.items()) or "none"
        raise ConfigError(f"data fetch {benchmark}: unknown setting(s) {', '.join(unknown)}; known: {known}")


def run_fetch(benchmark: str, dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    """Fetch a built-in benchmark's data into ``dest/<benchmark folder>``."""
    if benchmark not in FETCHERS:
        other = COMMANDS.get(benchmark)
        if other:
            raise ConfigError(f"data fetch {benchmark}: its data comes with `{other}`")
        raise ConfigError(f"data fetch {benchmark}: no fetcher for this benchmark (fetchable: {', '.join(FETCHERS)})")
    module = importlib.import_module(FETCHERS[benchmark])
    check_settings(benchmark, settings, module.OPTIONS)
    return module.fetch(Path(dest), settings, log)


class FetchedData:
    """What a built-in benchmark mixes in (before ``Benchmark``) so that ``sourcebench data fetch``
    runs its module here and ``sourcebench data`` names the command."""

    name: str

    def fetch_command(self) -> str:
        return command_for(self.name)

    def fetch(self, dest: Path, settings: dict[str, str] | None = None, log: Log = print) -> FetchReport:
        return run_fetch(self.name, Path(dest), dict(settings or {}), log)
