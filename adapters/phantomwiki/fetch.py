"""PhantomWiki: a fresh universe from the official generator, in the generator's own venv.

PhantomWiki is meant to be generated anew (a universe no model has seen), so "fetching" it runs
``pw-generate`` of PyPI ``phantom-wiki`` (pinned version), which needs Python >= 3.12 and
SWI-Prolog: both are checked first, with one line naming what is missing and how to install it.
The generator lives in ``DATA/phantomwiki/venv`` (like AppWorld's, see ``adapters.fetch.venv``);
the universe is written to a scratch folder and renamed to ``DATA/phantomwiki/<name>`` when
complete. Sizes follow the generator's v1 recipe (``data/generate-v1.sh`` of
kilian-group/phantom-wiki): a universe of N people is N/50 family trees of at most 50 people (one
tree of N below 50), tree depth and question depth 20. A re-run keeps a universe whose files match
the manifest's record of the same command.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sourcebench.adapters.fetch import FetchReport, Log, inside, safe_component
from sourcebench.adapters.fetch.download import matches, sha256_of
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.adapters.fetch.venv import (
    ensure_venv,
    find_python,
    installed_version,
    python_version,
    run_logged,
    venv_python,
)
from sourcebench.harness.errors import ConfigError, DataError

PACKAGE, VERSION = "phantom-wiki", "1.0.3"
MIN_PYTHON = (3, 12)
TREE_SIZE = 50  # generate-v1.sh's max_tree_size
OUTPUTS = ("articles.json", "questions.json", "facts.pl")
OPTIONS = {
    "seed": "generator seed (default 1)",
    "size": "universe size in people (default 50; above 50, a multiple of 50)",
    "depth": "question depth and family-tree depth (default 20)",
    "questions_per_type": "questions per template (default 10, the generator's)",
    "name": "folder name of the universe (default depth_D_size_N_seed_S, as the official datasets)",
    "python": "interpreter >= 3.12 for the generator's venv (default: this one if new enough, else python3.N on PATH)",
}


def _int(settings: dict[str, str], key: str, default: int) -> int:
    try:
        v = int(settings.get(key, default))
    except ValueError:
        raise ConfigError(f"data fetch phantomwiki: {key}={settings[key]!r} is not an integer") from None
    if v < (0 if key == "seed" else 1):
        raise ConfigError(f"data fetch phantomwiki: {key}={v} is out of range")
    return v


def generator_args(settings: dict[str, str]) -> tuple[str, list[str]]:
    """(folder name, pw-generate arguments other than the output folder) for these settings."""
    seed, size, depth = _int(settings, "seed", 1), _int(settings, "size", TREE_SIZE), _int(settings, "depth", 20)
    if size > TREE_SIZE and size % TREE_SIZE:
        raise ConfigError(f"data fetch phantomwiki: size={size}: above {TREE_SIZE} people, a multiple of {TREE_SIZE} "
                          f"(the universe is {TREE_SIZE}-person family trees)")
    trees, tree_size = (size // TREE_SIZE, TREE_SIZE) if size > TREE_SIZE else (1, size)
    args = ["--seed", str(seed), "--question-depth", str(depth), "--num-family-trees", str(trees),
            "--max-family-tree-size", str(tree_size), "--max-family-tree-depth", str(depth),
            "--article-format", "json", "--question-format", "json"]
    if "questions_per_type" in settings:
        args += ["--num-questions-per-type", str(_int(settings, "questions_per_type", 10))]
    name = settings.get("name") or f"depth_{depth}_size_{size}_seed_{seed}"
    return safe_component("phantomwiki", "name", name), args


def prerequisites(settings: dict[str, str], need_python: bool = True) -> str | None:
    """The interpreter to make the venv with (None when ``need_python`` is false); a DataError naming
    everything missing and how to install it."""
    python, tried = find_python(MIN_PYTHON, settings.get("python")) if need_python else (None, [])
    swipl = shutil.which("swipl")
    missing = []
    if need_python and python is None:
        missing.append(f"Python >= {'.'.join(map(str, MIN_PYTHON))} (tried {', '.join(tried) or 'nothing'}; install "
                       "one, e.g. `uv python install 3.12` or `apt-get install python3.12`, and pass --python PATH)")
    if swipl is None:
        missing.append("SWI-Prolog (`swipl` is not on PATH; install it, e.g. `apt-get install swi-prolog-nox` or "
                       "`brew install swi-prolog`)")
    if missing:
        raise DataError(f"phantomwiki: the official generator ({PACKAGE} {VERSION}) needs {' and '.join(missing)}")
    return python


def fetch(dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    folder = Path(dest) / "phantomwiki"
    name, args = generator_args(settings)
    out = folder / name
    report = FetchReport("phantomwiki", folder)
    manifest = Manifest(folder, "phantomwiki", log)
    rec = manifest.get(name) or {}
    files = rec.get("files") or {}
    if rec.get("args") == args and rec.get("version") == VERSION and files and \
            all(matches(out / f, r.get("sha256"), r.get("size")) for f, r in files.items()):
        log(f"kept {out} (verified: the same generator command made it)")
        report.kept.append(name)
        return report
    if out.exists():
        why = ("its files changed since this command generated it" if rec.get("args") == args else
               f"this command ({PACKAGE} {VERSION} {' '.join(args)}) did not make it")
        raise DataError(f"{out}: exists but {why}; move it away (or pass --opt name=OTHER) and run again")
    venv = folder / "venv"
    have = python_version(str(venv_python(venv))) if venv_python(venv).is_file() else None
    if have is not None and have < MIN_PYTHON:
        raise DataError(f"{venv}: its Python is {'.'.join(map(str, have))}, the generator needs >= "
                        f"{'.'.join(map(str, MIN_PYTHON))}; delete the folder and run again (with --python PATH)")
    base = prerequisites(settings, need_python=have is None)
    python = ensure_venv(venv, base, log)
    if installed_version(python, PACKAGE) != VERSION:
        run_logged([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", f"{PACKAGE}=={VERSION}"],
                   None, log)
        report.done.append(f"venv ({PACKAGE} {VERSION})")
    scratch = inside(folder / ".partial", folder / ".partial" / name)
    inside(folder, out)
    shutil.rmtree(scratch, ignore_errors=True)  # a generation that was interrupted starts over
    scratch.parent.mkdir(parents=True, exist_ok=True)
    run_logged([str(python.parent / "pw-generate"), "--output-dir", str(scratch), *args], None, log)
    files = {f: {"size": (scratch / f).stat().st_size, "sha256": sha256_of(scratch / f)} for f in OUTPUTS
             if (scratch / f).is_file()}
    _check_outputs(scratch)
    scratch.rename(out)
    shutil.rmtree(folder / ".partial", ignore_errors=True)
    manifest.record(name, generator=f"{PACKAGE}=={VERSION}", version=VERSION, args=args, files=files)
    log(f"generated {out}")
    report.done.append(name)
    return report


def _check_outputs(scratch: Path) -> None:
    """The generator exited 0: make sure it wrote what the loader reads."""
    for f in ("articles.json", "questions.json"):
        path = scratch / f
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"pw-generate wrote no {f} in {scratch}") from None
        except ValueError as e:
            raise DataError(f"{path}: the generator's output is not valid JSON ({e})") from None
        if not isinstance(data, list) or not data:
            raise DataError(f"{path}: the generator's output is not a non-empty JSON list")
