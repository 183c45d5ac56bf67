"""APIBench (Gorilla): instructions to be fulfilled by one call to the right model-hub API.

Each hub's API database is one source (one element per API record, in file order); instructions
come from the hub's evaluation file (``*_eval.json``, JSON lines) with the 0-shot question text, and
are grouped by API so the same API never sits on both sides of a split. Scoring is the official AST
evaluator (``judges.apibench_ast``). The paper uses TorchHub's 186 instructions and 100 each of
HuggingFace and TensorFlow Hub: here a fixed seeded subset of 100 (``--opt n_tasks=all`` for all).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np

from sourcebench.adapters.fetch import FetchedData
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.harness.errors import ConfigError, DataError
from sourcebench.harness.io import iter_jsonl, require_fields

HUB_FILES = {
    "torchhub": ("torchhub_api.jsonl", "torchhub_eval.json", "questions_torchhub_0_shot.jsonl"),
    "huggingface": ("huggingface_api.jsonl", "huggingface_eval.json", "questions_huggingface_0_shot.jsonl"),
    "tensorflowhub": ("tensorflowhub_api.jsonl", "tensorflow_eval.json", "questions_tensorflowhub_0_shot.jsonl"),
}
PAPER_TASKS = {"torchhub": None, "huggingface": 100, "tensorflowhub": 100}
SUBSET_SEED = 20240523  # fixed: the subset is part of the benchmark definition, not of the split seed
FIELDS = ("domain", "framework", "functionality", "api_name", "api_call", "api_arguments",
          "python_environment_requirements", "example_code", "performance", "description")


def render_api(rec: dict[str, Any]) -> str:
    lines = []
    for k in FIELDS:
        v = rec.get(k)
        if v in (None, "", [], {}, "N/A"):
            continue
        lines.append(f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}")
    return "\n".join(lines)


class APIBench(FetchedData, Benchmark):
    name = "apibench"
    version = "1-A"
    subdir = "apibench"
    scorer_name = "apibench_ast"
    answer_instructions = (
        "Reply with one Python-dict-like object with the keys 'domain', 'api_call', 'api_provider', "
        "'explanation' and 'code', where 'api_call' is a single line of code that calls the API with its "
        "arguments, for example {'domain': '...', 'api_call': \"...\", 'api_provider': '...', "
        "'explanation': '...', 'code': '...'}."
    )
    answer_max_tokens = 256  # one dict with an api_call line and a short explanation
    known_options: ClassVar[dict[str, str]] = {
        "n_tasks": "instructions per hub: 'paper' (186/100/100, default), 'all', or a number",
        "torchhub_rule": "a TorchHub response without an api_call: 'current' (default, Gorilla's script since "
                         "2023-06-03: neither correct nor hallucination) or 'paper' (the script of the Gorilla "
                         "paper's numbers: a hallucination)",
    }

    deviations: ClassVar[list[str]] = [
        ("TorchHub responses without an api_call are scored by Gorilla's current TorchHub script (since "
         "2023-06-03: neither correct nor hallucination), the official evaluator today; the Gorilla paper's "
         "TorchHub numbers came from the script before it, which counted them as hallucinations. "
         "--opt torchhub_rule=paper applies that rule."),
    ]

    def __init__(self, data_dir=None, options: dict[str, str] | None = None):
        super().__init__(data_dir, options)
        rule = self.options.get("torchhub_rule", "current")
        if rule not in ("current", "paper"):
            raise ConfigError(f"apibench: --opt torchhub_rule={rule!r}: expected current or paper")

    def how_to_get(self) -> str:
        return ("`sourcebench data fetch apibench` downloads them from the Gorilla repository (ShishirPatil/gorilla) "
                "at a pinned commit: data/api/<hub>_api.jsonl, data/apibench/<hub>_eval.json and "
                "gorilla/eval/eval-data/questions/<hub>/questions_<hub>_0_shot.jsonl, in one folder DATA/apibench")

    def source_ids(self) -> list[str]:
        root = self.data_root()
        ids = [h for h, (api, ev, _) in HUB_FILES.items() if (root / api).exists() and (root / ev).exists()]
        if not ids:
            raise DataError(f"{root}: no APIBench hub files (*_api.jsonl with *_eval.json)")
        return ids

    def _hub(self, source_id: str) -> tuple:
        if source_id not in HUB_FILES:
            raise DataError(f"apibench: unknown hub '{source_id}' (torchhub, huggingface, tensorflowhub)")
        return HUB_FILES[source_id]

    def api_records(self, source_id: str) -> list[dict[str, Any]]:
        path = self.data_root() / self._hub(source_id)[0]
        recs = []
        for line, obj in iter_jsonl(path):
            require_fields(path, line, obj, ["domain", "api_name", "api_call"])
            recs.append(obj)
        return recs

    def load_source(self, source_id: str) -> Source:
        els = []
        for i, rec in enumerate(self.api_records(source_id)):
            els.append(Element(id=f"api/{i:04d}", title=f"{rec['api_name']} ({rec.get('functionality', '')})",
                               text=render_api(rec), path=f"api/{i:04d}", kind="api",
                               metadata={"domain": rec["domain"], "api_name": rec["api_name"]}))
        return Source(id=source_id, kind="api_docs", elements=els, origin=str(self.data_root() / self._hub(source_id)[0]),
                      description=f"API documentation of {source_id}")

    def load_tasks(self, source_id: str) -> list[Task]:
        api_f, eval_f, q_f = self._hub(source_id)
        root = self.data_root()
        golds = {}
        for line, obj in iter_jsonl(root / eval_f):
            require_fields(root / eval_f, line, obj, ["api_data"])
            golds[line] = obj
        # question_id is the 1-based line index into the eval file
        questions = {}
        if (root / q_f).exists():
            for line, obj in iter_jsonl(root / q_f):
                require_fields(root / q_f, line, obj, ["question_id", "text"])
                questions[int(obj["question_id"])] = obj["text"]
        tasks = []
        for n, (qid, gold) in enumerate(sorted(golds.items()), start=1):
            text = questions.get(n) or _instruction_from_code(gold.get("code", ""))
            if not text:
                continue
            api = gold["api_data"]
            group_key = api.get("api_name") if source_id == "huggingface" else api.get("api_call")
            tasks.append(Task(id=f"{source_id}-{n}", source_id=source_id,
                              question=text.replace("\\n", "\n").strip(), reference=api,
                              group=str(group_key), metadata={"hub": source_id, "question_id": n}))
        return self._subset(source_id, tasks)

    def _subset(self, source_id: str, tasks: list[Task]) -> list[Task]:
        opt = self.options.get("n_tasks", "paper")
        if opt == "all":
            return tasks
        if opt == "paper":
            n = PAPER_TASKS[source_id]
        else:
            try:
                n = int(opt)
            except ValueError:
                raise ConfigError(f"apibench: --opt n_tasks={opt!r}: expected paper, all or a number") from None
        if n is None or n >= len(tasks):
            return tasks
        idx = np.random.default_rng(SUBSET_SEED).permutation(len(tasks))[:n]
        return [tasks[i] for i in sorted(idx)]

    _dbs: dict[str, Any] = {}

    def _db(self, hub: str) -> Any:
        from sourcebench.judges.apibench_ast import APIDatabase

        key = f"{self.data_root()}:{hub}"
        if key not in self._dbs:
            self._dbs[key] = APIDatabase.from_file(self.data_root() / self._hub(hub)[0], hub)
        return self._dbs[key]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        if answer.failed:
            return Score(value=0.0, correct=False, judge=self.scorer_name, failed=True, failure_reason=answer.failure_reason)
        from sourcebench.judges.apibench_ast import evaluate_response

        hub = task.source_id
        rule = self.options.get("torchhub_rule", "current")
        v = evaluate_response(answer.text, hub, self._db(hub), task.reference, torchhub_rule=rule)
        return Score(value=float(v.correct), correct=bool(v.correct), judge=self.scorer_name,
                     details={"hallucination": v.hallucination, "matched_api": v.matched_api, "reason": v.reason,
                              **({"torchhub_rule": rule} if hub == "torchhub" else {})})


def _instruction_from_code(code: str) -> str:
    text = code.split("###Output")[0]
    return text.replace("###Instruction:", "").strip()
