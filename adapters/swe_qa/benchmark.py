"""SWE-QA: repository-level questions about Python projects, judged by the QA LLM judge.

Questions come from the official files (``<repo>.jsonl``, 48 each, fields ``question``/``answer``).
The source is the repository tree at the pinned commit: the one ``sourcebench data fetch swe_qa``
unpacks from the commit's archive into ``<data>/swe_qa/repos/<repo>``, a clone, or (``--opt flask=DIR``)
any tree, e.g. an sdist of a nearby release. Which tree was loaded is identified (``tree.py``) and
recorded in the source's ``provenance`` (run.json); for a tree that is not the pinned one its ``note``
(which a run prints) gives the share of questions citing files it lacks, and reports mark its numbers. Task ids are a hash
of the question text.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import ClassVar

from sourcebench.adapters.fetch import FetchedData
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Score, Source, Task
from sourcebench.harness.elements import source_from_tree
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import iter_jsonl, read_text, require_fields
from sourcebench.judges.llm_judge import JUDGE_NAME, judged_score

from . import tree as swe_qa_tree

REPOS = ("streamlink", "sphinx", "xarray", "pytest", "flask", "conan")
# Folders left out of a tree. Unlike the default, no "build" or "dist": conan's code has conan/tools/build/
# and its tests test/unittests/client/build/, part of the pinned tree (a pinned tree has no build output).
EXCLUDE_DIRS = (".git", "__pycache__", "node_modules", ".tox", ".venv")


class SWEQA(FetchedData, Benchmark):
    name = "swe_qa"
    version = "1-A"
    subdir = "swe_qa"
    scorer_name = JUDGE_NAME
    needs_judge_model = True
    answer_instructions = "Answer the question about this code base precisely, naming the relevant files, classes or functions."
    known_options: ClassVar[dict[str, str]] = {r: f"path to the {r} source tree (clone at the pinned commit, or an sdist)" for r in REPOS}
    deviations: ClassVar[list[str]] = [
        ("A tree other than the pinned commit's is accepted (--opt REPO=DIR: an sdist of a nearby release, "
        "another checkout), because a machine without access to GitHub cannot get the pinned trees and the "
        "sdists from PyPI are the nearest real trees it can get. Such a tree is not the paper's source (an "
        "sdist leaves out files: conan's drops its tests and server code), so it is identified in run.json "
        "(provenance: pinned false, its origin and content hash), announced with the measured share of questions "
        "citing files it lacks, and every number computed on it is marked in the reports; with the pinned tree "
        "(data fetch swe_qa, or a clone at the pin) nothing departs."),
    ]

    def how_to_get(self) -> str:
        return ("`sourcebench data fetch swe_qa` downloads the question files of the SWE-QA-Bench repository "
                "(Benchmark/<repo>.jsonl) and each of the six repositories as the archive of its pinned commit, "
                "unpacked into DATA/swe_qa/repos/ (`--opt repos=none`: questions only). Without GitHub, an sdist "
                "can stand in (not the pinned tree: its numbers are marked), e.g. "
                "pip download --no-deps --no-binary :all: flask==3.1.1 && tar xzf flask-3.1.1.tar.gz; "
                "then --opt flask=flask-3.1.1")

    def source_ids(self) -> list[str]:
        root = self.data_root()
        ids = [r for r in REPOS if (root / f"{r}.jsonl").exists()]
        ids += sorted(p.stem for p in root.glob("*.jsonl") if p.stem not in REPOS)
        if not ids:
            raise DataError(f"{root}: no SWE-QA question files (<repo>.jsonl)")
        return ids

    def commit(self, source_id: str) -> str:
        path = self.data_root() / "repo_commits.txt"
        if path.exists():
            for line in read_text(path).splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0].rstrip("/").split("/")[-1] == source_id:
                    return parts[1]
        return ""

    def tree(self, source_id: str) -> Path:
        if source_id in self.options:
            p = Path(self.options[source_id]).expanduser()
            if not p.is_dir():
                raise DataError(f"{p}: source tree for swe_qa/{source_id} is not a directory")
            return p
        repos = self.data_root() / "repos"
        if repos.is_dir():
            for cand in sorted(repos.iterdir()):
                if cand.is_dir() and (cand.name == source_id or cand.name.startswith(source_id + "-")):
                    return cand
        raise DataError(
            f"swe_qa/{source_id}: source tree not found; pass --opt {source_id}=DIR (a clone at commit "
            f"{self.commit(source_id) or '?'} or an sdist tree) or put it in {repos}/{source_id} "
            f"(`sourcebench data fetch swe_qa --opt repos={source_id}` puts the pinned tree there)"
        )

    def load_source(self, source_id: str) -> Source:
        tree = self.tree(source_id)
        src = source_from_tree(source_id, tree, kind="code", exclude_dirs=EXCLUDE_DIRS)
        if not src.elements:
            raise DataError(f"{tree}: source tree for swe_qa/{source_id} has no readable text files")
        info = self.identify(source_id, tree)
        if not info["pinned"]:  # the runner prints the note when it loads the source
            lacks = swe_qa_tree.coverage_line(source_id, info)
            info["note"] += ("; numbers on it are not comparable with the paper's and are marked in the reports"
                             + (f"; {lacks}" if lacks else ""))
        src.metadata["provenance"] = info
        return src

    def identify(self, source_id: str, tree: Path) -> dict:
        """``swe_qa_tree.identify`` with the fetch manifest's record of the tree it unpacked, if any."""
        root = self.data_root()
        fetched = Manifest(root, self.name, log=lambda _m: None).get(f"repos/{source_id}") if root.is_dir() else None
        return swe_qa_tree.identify(source_id, tree, self.commit(source_id), fetched)

    def load_tasks(self, source_id: str) -> list[Task]:
        path = self.data_root() / f"{source_id}.jsonl"
        tasks = []
        for line, obj in iter_jsonl(path):
            require_fields(path, line, obj, ["question", "answer"])
            tid = hashlib.sha256(obj["question"].strip().encode()).hexdigest()[:12]
            tasks.append(Task(id=tid, source_id=source_id, question=obj["question"], reference=[obj["answer"]],
                              group=tid, metadata={"line": line}))
        return tasks

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        return await judged_score(self.name, self.scorer_name, task, answer, judge)
