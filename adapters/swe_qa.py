"""SWE-QA: repository-level questions about Python projects, judged by the QA LLM judge.

Questions come from the official files (``<repo>.jsonl``, 48 each, fields ``question``/``answer``).
The source is the repository tree at the pinned commit, which the user provides: a clone, or an
sdist of a nearby release (``--opt flask=DIR``, or a folder ``<data>/swe_qa/repos/<repo>``). The
tree actually used is recorded as the source origin. Task ids are a hash of the question text.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sourcebench.adapters.fetch import FetchedData
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Score, Source, Task
from sourcebench.harness.elements import source_from_tree
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import iter_jsonl, read_text, require_fields
from sourcebench.judges.llm_judge import JUDGE_NAME, llm_judge

REPOS = ("streamlink", "sphinx", "xarray", "pytest", "flask", "conan")


class SWEQA(FetchedData, Benchmark):
    name = "swe_qa"
    version = "1-A"
    subdir = "swe_qa"
    scorer_name = JUDGE_NAME
    needs_judge_model = True
    answer_instructions = "Answer the question about this code base precisely, naming the relevant files, classes or functions."
    known_options = {r: f"path to the {r} source tree (clone at the pinned commit, or an sdist)" for r in REPOS}

    def how_to_get(self) -> str:
        return ("`sourcebench data fetch swe_qa` downloads the question files of the SWE-QA-Bench repository "
                "(Benchmark/<repo>.jsonl) and clones the six repositories at the commits in repo_commits.txt into "
                "DATA/swe_qa/repos/ (`--opt repos=none`: questions only). Offline, a source tree can be an sdist, e.g. "
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
            f"(`sourcebench data fetch swe_qa --opt repos={source_id}` clones it there)"
        )

    def load_source(self, source_id: str) -> Source:
        tree = self.tree(source_id)
        src = source_from_tree(source_id, tree, kind="code")
        src.metadata["pinned_commit"] = self.commit(source_id)
        if not src.elements:
            raise DataError(f"{tree}: source tree for swe_qa/{source_id} has no readable text files")
        return src

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
        if answer.failed:
            return Score(value=0.0, correct=False, judge=self.scorer_name, failed=True, failure_reason=answer.failure_reason)
        if judge is None:
            raise DataError("swe_qa needs a judge model (--judge-model)")
        return await llm_judge(task, answer, judge)
