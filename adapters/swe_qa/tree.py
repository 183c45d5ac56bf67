"""Which SWE-QA source tree was loaded: the pinned commit, or a substitute (an sdist, another checkout).

The paper's source is each repository at its pinned commit. A tree is identified without git: a clone
by its HEAD (read from ``.git``), a tree that ``sourcebench data fetch swe_qa`` unpacked from the
commit's archive by the content hash the fetch manifest recorded for it. Anything else is "not the
pinned tree", named by its origin (an sdist's ``PKG-INFO`` name and version, else the folder) and its
content hash, so a report can mark every number computed on it.

The share of each release sdist's questions whose reference answers cite a file the sdist lacks was
measured offline with ``python -m sourcebench.adapters.swe_qa.tree QUESTIONS_DIR SDIST.tar.gz ...``
(the sdists from ``pip download --no-deps --no-binary :all: NAME==VERSION``) and ships as
``sdists.json`` beside this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

SDIST_COVERAGE = Path(__file__).with_name("sdists.json")

# A file path as reference answers cite it (``src/flask/app.py``, ``28:31:conan/tools/apple/apple.py``,
# ``blueprints.py``, ``doc/usage.rst``): a name with one of these extensions, optionally after folders.
# ``.json`` and other extensions that also end dotted module names (``flask.json``) are left out.
_CITED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|pyi|pyx|rst|md|txt|cfg|toml|ini|ya?ml|"
                    r"html|jinja|sh|bat|c|h|in))(?![\w/-])")


def git_head(tree: Path) -> str:
    """The full sha of HEAD of the clone at ``tree`` ('' when it is not a clone or HEAD is unreadable).

    Read from the files (``.git/HEAD``, the ref's file or ``packed-refs``; a worktree's ``.git`` file
    and ``commondir`` followed), so no git is needed to identify the tree."""
    dot = Path(tree) / ".git"
    try:
        if dot.is_file():
            line = dot.read_text(encoding="utf-8").strip()
            if not line.startswith("gitdir:"):
                return ""
            gitdir = (Path(tree) / line.removeprefix("gitdir:").strip()).resolve()
        elif dot.is_dir():
            gitdir = dot
        else:
            return ""
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head if re.fullmatch(r"[0-9a-f]{40}", head) else ""
        ref = head.removeprefix("ref:").strip()
        for base in (gitdir, common):
            if (base / ref).is_file():
                return (base / ref).read_text(encoding="utf-8").strip()
        packed = common / "packed-refs"
        if packed.is_file():
            for row in packed.read_text(encoding="utf-8").splitlines():
                parts = row.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        return ""
    return ""


def tree_sha256(tree: Path) -> str:
    """A content hash of a folder: sha256 over its files' relative paths and sha256 (links by their
    target), in path order, ``.git`` folders left out. The same tree gives the same hash anywhere."""
    root = Path(tree)
    entries: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                entries.append((rel, "link:" + os.readlink(full)))
            elif full.is_file():
                h = hashlib.sha256()
                with open(full, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                entries.append((rel, h.hexdigest()))
    total = hashlib.sha256()
    for rel, digest in sorted(entries):
        total.update(f"{rel}\0{digest}\n".encode())
    return total.hexdigest()


def sdist_name(tree: Path) -> tuple[str, str] | None:
    """(name, version) from an sdist's top-level ``PKG-INFO``; None when the tree has none."""
    path = Path(tree) / "PKG-INFO"
    if not path.is_file():
        return None
    fields: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            break  # the headers end at the first blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    if not fields.get("name") or not fields.get("version"):
        return None
    return fields["name"], fields["version"]


def identify(source_id: str, tree: Path, pinned_commit: str, fetched: dict[str, Any] | None) -> dict[str, Any]:
    """What ``tree`` is, for run.json: ``pinned`` (bool), ``pinned_commit``, ``commit`` (the tree's commit
    when known), ``kind`` (clone | commit archive | sdist | folder), ``label`` and ``content_sha256``.

    ``fetched`` is the fetch manifest's record of ``repos/<source_id>`` (commit and ``tree_sha256`` of
    the tree it unpacked), None when there is none."""
    content = tree_sha256(tree)
    head = git_head(tree)
    info: dict[str, Any] = {"pinned_commit": pinned_commit, "origin": str(tree), "content_sha256": content}
    if head:
        info.update(kind="clone", commit=head, label=f"a clone at {head[:12]}")
    elif fetched and fetched.get("tree_sha256") == content and fetched.get("commit"):
        info.update(kind="commit archive", commit=str(fetched["commit"]),
                    label=f"the archive of commit {str(fetched['commit'])[:12]}")
    elif (sd := sdist_name(tree)) is not None:
        info.update(kind="sdist", commit="", label=f"the {sd[0]} {sd[1]} sdist", sdist={"name": sd[0], "version": sd[1]})
    else:
        info.update(kind="folder", commit="", label=f"the folder {Path(tree).name}")
    info["pinned"] = bool(pinned_commit and info["commit"] and info["commit"].startswith(pinned_commit))
    if not info["pinned"]:
        pin = pinned_commit[:12] or "unknown"
        info["note"] = (f"swe_qa/{source_id}: not the pinned tree (commit {pin}): {info['label']} at {tree}, "
                        f"content sha256 {content[:16]}")
    return info


# -------------------------------------------------------------------------- sdist coverage


def cited_paths(answer: str) -> list[str]:
    """The file paths a reference answer cites, in order of first mention."""
    return list(dict.fromkeys(m.strip("./") for m in _CITED.findall(answer) if m.strip("./")))


def absent(cited: list[str], files: list[str]) -> list[str]:
    """The cited paths no file of the tree has (a path matches a file whose path ends with it, folder
    by folder: ``flask/app.py`` matches ``src/flask/app.py``, ``app.py`` any ``app.py``)."""
    suffixes: set[str] = set()
    for f in files:
        parts = PurePosixPath(f).parts
        suffixes.update("/".join(parts[i:]) for i in range(len(parts)))
    return [c for c in cited if c not in suffixes]


def sdist_files(archive: Path) -> list[str]:
    """The file paths of an sdist archive below its top folder."""
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    return sorted(n.split("/", 1)[1] for n in names if "/" in n)


def coverage(answers: list[str], files: list[str]) -> dict[str, Any]:
    """How many questions' reference answers cite a repository path (one with a folder, e.g.
    ``conans/server/rest/api_v2.py``), cite one absent from ``files``, cite only absent ones; and the
    absent paths with how many answers cite each. A bare file name (``conanfile.py``, ``app.py``) is
    ambiguous (answers also name files of a user's project), so it is counted apart, not in the share."""
    n_cite = n_absent = n_only = n_bare = 0
    counts: dict[str, int] = {}
    bare: dict[str, int] = {}
    for ans in answers:
        cited = cited_paths(ans)
        paths = [c for c in cited if "/" in c]
        gone = absent(paths, files)
        gone_bare = absent([c for c in cited if "/" not in c], files)
        n_cite += bool(paths)
        n_absent += bool(gone)
        n_only += bool(paths) and len(gone) == len(paths)
        n_bare += bool(gone_bare)
        for p in gone:
            counts[p] = counts.get(p, 0) + 1
        for p in gone_bare:
            bare[p] = bare.get(p, 0) + 1
    n = len(answers)

    def ranked(d: dict[str, int]) -> dict[str, int]:
        return dict(sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))

    return {"questions": n, "cite_a_path": n_cite, "cite_an_absent_path": n_absent,
            "cite_only_absent_paths": n_only, "share_citing_an_absent_path": round(n_absent / n, 4) if n else None,
            "absent_paths": ranked(counts), "cite_an_absent_bare_name": n_bare, "absent_bare_names": ranked(bare)}


def load_coverage() -> dict[str, Any]:
    """The shipped measurements (``sdists.json``): repository -> sdist record."""
    return json.loads(SDIST_COVERAGE.read_text(encoding="utf-8"))["sdists"]


def coverage_line(source_id: str, info: dict[str, Any]) -> str:
    """One sentence on what the loaded sdist lacks, from the shipped measurement ('' when not an sdist)."""
    sd = info.get("sdist")
    if not sd:
        return ""
    rec = load_coverage().get(source_id)
    if not rec or rec.get("version") != sd["version"]:
        return (f"the share of its questions citing files absent from {sd['name']} {sd['version']} was not "
                f"measured (measured: {rec['name']} {rec['version']})" if rec else
                "the share of its questions citing files absent from this sdist was not measured")
    return (f"{rec['cite_an_absent_path']} of its {rec['questions']} questions "
            f"({100 * rec['share_citing_an_absent_path']:.0f}%) have a reference answer citing a file absent "
            f"from {rec['name']} {rec['version']} ({rec['cite_only_absent_paths']} cite only absent files)")


def main(argv: list[str]) -> int:
    """``python -m sourcebench.adapters.swe_qa.tree QUESTIONS_DIR SDIST.tar.gz ...``: print the JSON of
    the measurements (the repository is the sdist's name, lower case)."""
    if len(argv) < 2:
        print("usage: python -m sourcebench.adapters.swe_qa.tree QUESTIONS_DIR SDIST.tar.gz ...", file=sys.stderr)
        return 2
    questions = Path(argv[0])
    out = {}
    for arg in argv[1:]:
        archive = Path(arg)
        name, _, version = archive.name.removesuffix(".tar.gz").rpartition("-")
        repo = name.lower()
        answers = [json.loads(line)["answer"] for line in (questions / f"{repo}.jsonl").read_text().splitlines()
                   if line.strip()]
        files = sdist_files(archive)
        h = hashlib.sha256(archive.read_bytes()).hexdigest()
        out[repo] = {"name": name, "version": version, "sdist": archive.name, "sdist_sha256": h,
                     "sdist_files": len(files), **coverage(answers, files)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
