"""SWE-QA: the question files of the paper's six repositories, and those repositories at their pins.

Question files, the commit list and the licence come from SWE-QA-Bench at a pinned commit (sizes
and sha256 of that commit's files). Each source repository is cloned into ``repos/<name>`` and
checked out at the commit ``repo_commit.txt`` pins (saved as ``repo_commits.txt``, the name the
adapter reads); ``--opt repos=flask,pytest`` clones only those, ``repos=none`` none (offline, an
sdist of a nearby release is the documented substitute: see ``adapters.swe_qa``).
"""

from __future__ import annotations

from pathlib import Path

from sourcebench.harness.errors import ConfigError

from . import FetchReport, Log
from .download import RemoteFile, fetch_files
from .git import clone_at
from .manifest import Manifest

REPO = "peng-weihan/SWE-QA-Bench"
COMMIT = "d7bf283d65f4bbdc86ead92fc130eee4986355f0"  # 2026-04-07
RAW = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/"

# name -> (clone URL, pinned commit). repo_commit.txt gives 7-digit shas; the full ones were read from
# the repositories (conan's could not be, so its abbreviation is the pin, checked against HEAD the same way).
REPOS: dict[str, tuple[str, str]] = {
    "streamlink": ("https://github.com/streamlink/streamlink.git", "ab1f36560005253ca6a290a614730bf18a29a7f9"),
    "sphinx": ("https://github.com/sphinx-doc/sphinx.git", "6c9e3209c4ebc81c7c09f6a30eeaa4651f32f461"),
    "xarray": ("https://github.com/pydata/xarray.git", "40119bf35c53fc222934894d842cfc07b2e264bf"),
    "pytest": ("https://github.com/pytest-dev/pytest.git", "5989efe3efec31a9d14f550d89903b6311dfc828"),
    "flask": ("https://github.com/pallets/flask.git", "85c5d93cbd049c4bd0679c36fd1ddcae8c37b642"),
    "conan": ("https://github.com/conan-io/conan.git", "52f43d9"),
}
# (path in SWE-QA-Bench, saved as, size, sha256)
FILES = (
    ("Benchmark/streamlink.jsonl", "streamlink.jsonl", 42591,
     "59914d844f35de5f627c782cb5db7d320ed44f101619f95b186151951fe4740b"),
    ("Benchmark/sphinx.jsonl", "sphinx.jsonl", 118653, "348b9a481eb87a2163fe2a881d954e99fce4eb0d29cafbe4cb9b7c5fd8128dca"),
    ("Benchmark/xarray.jsonl", "xarray.jsonl", 124113, "183d9bd44be4535fa53d86518e30b77665253675820cbe95c7f8f561823908ba"),
    ("Benchmark/pytest.jsonl", "pytest.jsonl", 116062, "cbb235270f2a4a223493621a172978a2349a6e998cefec66e97be324d1c23c80"),
    ("Benchmark/flask.jsonl", "flask.jsonl", 117842, "8e0ecf2163bcbb57282dac291c3801421ef4a7424a721159685945d7b836cb69"),
    ("Benchmark/conan.jsonl", "conan.jsonl", 269145, "5a5e1f9498312a858ef15a55272802c2ed8ac12c4caf3d1e6fe49210ffc24bac"),
    ("repo_commit.txt", "repo_commits.txt", 663, "ef14c0547110daf20e5d95bf67615c49464001557532a2cdc5b24956ebf1412c"),
    ("LICENSE", "LICENSE", 11344, "7adcc3e671ca3438b525c6ec94103161546e8b7dba13177b18e853b9f737600a"),
)
OPTIONS = {"repos": f"repositories to clone: all (default), none, or a comma-separated subset of {', '.join(REPOS)}"}


def remote_files() -> list[RemoteFile]:
    return [RemoteFile(name, (RAW + path,), sha, size) for path, name, size, sha in FILES]


def selected_repos(opt: str) -> list[str]:
    if opt in ("", "all"):
        return list(REPOS)
    if opt == "none":
        return []
    names = [x.strip() for x in opt.split(",") if x.strip()]
    unknown = [n for n in names if n not in REPOS]
    if unknown or not names:
        raise ConfigError(f"data fetch swe_qa: --opt repos={opt!r}: expected all, none or names from "
                          f"{', '.join(REPOS)}")
    return names


def fetch(dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    folder = Path(dest) / "swe_qa"
    repos = selected_repos(settings.get("repos", "all"))
    report = FetchReport("swe_qa", folder)
    manifest = Manifest(folder, "swe_qa", log)
    fetch_files(remote_files(), folder, manifest, log, report)
    for name in repos:
        url, commit = REPOS[name]
        what, head = clone_at(url, commit, folder / "repos" / name, log)
        step = f"repos/{name}"
        manifest.record(step, url=url, commit=head)
        (report.kept if what == "kept" else report.done).append(step)
        log(f"{what} {folder / step} at {head[:12]}")
    return report
