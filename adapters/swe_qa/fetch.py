"""SWE-QA: the question files of the paper's six repositories, and those repositories at their pins.

Question files, the commit list and the licence come from SWE-QA-Bench at a pinned commit (sizes
and sha256 of that commit's files). Each source repository comes as one archive of its pinned commit
(GitHub's codeload tarball: no git needed), downloaded resumably to ``archives/`` and checked: the
commit id that ``git archive`` writes into the tarball's header must be the pin, and every member must
lie inside one top folder (tarfile's ``data`` filter on extraction refuses anything else). It is
unpacked into ``repos/<name>`` through a temporary folder, and the manifest records the commit and the
tree's content hash, by which the adapter recognises the pinned tree. ``--opt repos=flask,pytest``
gets only those, ``repos=none`` none. A clone already at the pin in ``repos/<name>`` is kept.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

from sourcebench.adapters.fetch import FetchReport, Log
from sourcebench.adapters.fetch.download import RemoteFile, fetch_file, fetch_files
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.harness.errors import ConfigError, DataError

from .tree import git_head, tree_sha256

REPO = "peng-weihan/SWE-QA-Bench"
COMMIT = "d7bf283d65f4bbdc86ead92fc130eee4986355f0"  # 2026-04-07
RAW = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/"

# name -> (repository URL, pinned commit). repo_commit.txt gives 7-digit shas; the full ones were read from
# the repositories (conan's could not be, so its abbreviation is the pin: GitHub resolves it, and the
# archive's commit id is checked to start with it).
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
CODELOAD = "https://codeload.github.com"
OPTIONS = {"repos": f"repository trees to get: all (default), none, or a comma-separated subset of {', '.join(REPOS)}"}


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


def archive_spec(name: str) -> RemoteFile:
    """The codeload tarball of ``name``'s pinned commit (its size and sha256 are not published: the
    manifest records them, and the commit id inside is what is checked)."""
    url, commit = REPOS[name]
    owner_repo = url.removeprefix("https://github.com/").removesuffix(".git")
    return RemoteFile(f"archives/{name}-{commit}.tar.gz", (f"{CODELOAD}/{owner_repo}/tar.gz/{commit}",),
                      checked_by="the commit id in the archive's pax header must be the pin")


def archive_commit(path: Path) -> str:
    """The commit id ``git archive`` wrote into the tarball's global header ('' when there is none)."""
    try:
        with tarfile.open(path) as tar:
            tar.next()  # reads the first header, which carries the global pax header's fields
            return str(tar.pax_headers.get("comment", "")).strip()
    except (tarfile.TarError, OSError, EOFError):
        return ""


def unpack(archive: Path, dest: Path, log: Log) -> None:
    """Extract ``archive`` (one top folder) to ``dest`` through a temporary sibling folder."""
    tmp = dest.with_name(f".{dest.name}.unpack")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            tops = {m.name.split("/", 1)[0] for m in tar.getmembers() if m.name not in ("", "pax_global_header")}
            if len(tops) != 1:
                raise DataError(f"{archive}: expected one top folder in the archive, found {len(tops)}")
            tar.extractall(tmp, filter="data")  # refuses absolute paths, '..' and links leaving the folder
    except (tarfile.TarError, OSError, EOFError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(f"{archive}: cannot be unpacked ({type(e).__name__}: {e}); delete it and run the same "
                        f"command again") from None
    if dest.exists():
        log(f"replacing {dest}, which no longer matches the tree unpacked there")
        shutil.rmtree(dest)
    os.replace(tmp / tops.pop(), dest)
    shutil.rmtree(tmp)


def fetch_tree(name: str, folder: Path, manifest: Manifest, log: Log) -> tuple[str, str]:
    """Make ``repos/<name>`` the pinned tree: (kept | unpacked, commit)."""
    _, commit = REPOS[name]
    dest, step = folder / "repos" / name, f"repos/{name}"
    rec = manifest.get(step) or {}
    if dest.exists():
        head = git_head(dest)
        if head.startswith(commit):
            return "kept", head
        if not rec.get("tree_sha256"):
            what = f"a clone at {head[:12]}" if head else "not a tree this command unpacked"
            raise DataError(f"{dest}: exists and is {what}, not the pinned commit {commit}; move it away and "
                            f"run the same command again")
        if str(rec.get("commit", "")).startswith(commit) and tree_sha256(dest) == rec["tree_sha256"]:
            return "kept", str(rec["commit"])
    spec = archive_spec(name)
    archive = folder / spec.path
    fetch_file(spec, folder, manifest, log)
    got = archive_commit(archive)
    if not got.startswith(commit) or len(got) != 40:
        archive.unlink(missing_ok=True)
        manifest.forget(spec.path)
        found = f"commit {got[:12]}" if got else "no commit id"
        raise DataError(f"{spec.path}: the archive holds {found}, not the pinned commit {commit}, so it was "
                        f"deleted; run the same command again")
    unpack(archive, dest, log)
    manifest.record(step, url=spec.urls[0], commit=got, archive=spec.path, tree_sha256=tree_sha256(dest))
    return "unpacked", got


def fetch(dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    folder = Path(dest) / "swe_qa"
    repos = selected_repos(settings.get("repos", "all"))
    report = FetchReport("swe_qa", folder)
    manifest = Manifest(folder, "swe_qa", log)
    fetch_files(remote_files(), folder, manifest, log, report)
    for name in repos:
        what, commit = fetch_tree(name, folder, manifest, log)
        step = f"repos/{name}"
        (report.kept if what == "kept" else report.done).append(step)
        log(f"{what} {folder / step} at {commit[:12]}")
    return report
