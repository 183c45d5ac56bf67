"""The official APIBench (Gorilla) AST evaluator, reproduced verdict for verdict.

Gorilla scores a response in four steps (``eval/eval-scripts/ast_eval_{th,hf,tf}.py`` upstream):

1. Cut the API call out of the response: the text after the first ``api_call`` and before the next
   ``api_provider``, from two characters past its first ``:`` up to and including its last ``)``.
   A TorchHub response with no ``api_call`` at all is neither correct nor a hallucination (it still
   counts in the denominator); HuggingFace and TensorFlow Hub then parse the whole response.
   That is the TorchHub script since its rewrite of 2023-06-03 (Gorilla PR #33). The script of the
   Gorilla paper's numbers counted such a response as a hallucination; ``torchhub_rule="paper"``
   applies that rule (``TORCHHUB_RULES``), the rest of the evaluation being the same.
2. Parse that text with tree-sitter (error tolerant: prose and broken code still give a tree) and
   list every node that has children, in the order of a stack-based walk (a node, then its children
   from the last to the first). Each node's "callee" is the text of its first child.
3. For every API of the hub's database, in file order: take its function name (the callee of the
   database ``api_call``) and the first listed node whose callee equals it. If there is none, the
   node used is whatever the walk listed last (the upstream loop variable is simply left there), so
   a response can match an API it never calls. The API matches when every reference argument
   (quotes ``'`` stripped at both ends) occurs in that node's text. Reference arguments: TorchHub,
   the values of arguments mentioning ``repo_or_dir`` or ``model``; HuggingFace, keyword values and
   positional arguments; TensorFlow Hub, the value of ``model=`` and the other arguments whole.
   APIs without reference arguments are skipped. The first API that matches wins.
4. No match: hallucination. Otherwise correct iff the matched API's ``domain`` equals the gold
   ``api_data.domain``. Rates are over the number of response lines.

The verdicts on text that is not valid Python (most responses: the extracted text usually starts
with a stray quote, and HuggingFace/TensorFlow Hub responses are often parsed whole) depend on the parser's
error recovery, which lives in the tree-sitter C runtime that py-tree-sitter bundles. So the parser is
pinned to what was current when Gorilla published its numbers (May 2023; its requirements name
``tree_sitter`` unpinned): the py-tree-sitter runtime 0.20.1 (the next release, 0.20.2, came in
September 2023) with the Python grammar shipped in tree-sitter-languages 1.5.0. With these, every
one of the 14,200 verdicts on the 24 published Gorilla response files equals that of the official
scripts run with their bundled ``my-languages.so`` on the same runtime, which gives the three published
FT 0-shot results (``tests/judges/test_apibench_official_verdicts.py``). The official scripts on
py-tree-sitter 0.20.2, 0.20.4 or 0.21.3 give 14 other verdicts (in 9 of the 24 files, none of the three
published ones), and this module on those runtimes gives the same 14: the runtime, not the grammar or
the extraction, is what moves them. The two grammars (tree-sitter-languages 1.5.0 carries
tree-sitter-python of June 2022, the bundled one is from early 2023) give the same tree on all but one
of the 15,738 texts involved (the files' extracted calls and the databases' api_calls), and the same
verdict on all. A current parser (tree-sitter 0.26 with tree-sitter-python 0.25) changes up to 18
verdicts in a file and misses the published TensorFlow Hub number. Python's ``ast`` cannot stand in: it
rejects over half of the published responses' extracted texts (nearly every TorchHub one), whose
verdicts come from that error recovery.
"""

from __future__ import annotations

import json
import threading
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sourcebench.harness.errors import DataError, SourceBenchError
from sourcebench.harness.io import iter_jsonl

HUBS = ("torchhub", "huggingface", "tensorflowhub")
# What a TorchHub response without an ``api_call`` counts as: "current" (Gorilla's script since 2023-06-03,
# PR #33: neither correct nor hallucination, the default) or "paper" (the script before it, which gave the
# Gorilla paper's TorchHub numbers: a hallucination).
TORCHHUB_RULES = ("current", "paper")

# hub -> (API database, evaluation set (JSON lines), 0-shot questions), all in one data folder
HUB_FILES: dict[str, tuple[str, str, str]] = {
    "torchhub": ("torchhub_api.jsonl", "torchhub_eval.json", "questions_torchhub_0_shot.jsonl"),
    "huggingface": ("huggingface_api.jsonl", "huggingface_eval.json", "questions_huggingface_0_shot.jsonl"),
    "tensorflowhub": ("tensorflowhub_api.jsonl", "tensorflow_eval.json", "questions_tensorflowhub_0_shot.jsonl"),
}

DEFAULT_DATA_DIR = Path("..") / "shared" / "data" / "apibench"

# The parser versions the official numbers were produced with (see the module docstring).
PINNED_VERSIONS = {"tree-sitter": "0.20.1", "tree-sitter-languages": "1.5.0"}

_REQUIRED_API_FIELDS = ("domain", "api_name", "api_call")


# --------------------------------------------------------------------------------------------------
# parser


_LOCAL = threading.local()  # a tree-sitter parser must not be shared between threads
_CHECKED_VERSIONS = False


def parser_versions() -> dict[str, str | None]:
    """Installed versions of the parser packages (None when a package is missing)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in PINNED_VERSIONS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _parser() -> Any:
    global _CHECKED_VERSIONS
    parser = getattr(_LOCAL, "parser", None)
    if parser is None:
        try:
            from tree_sitter_languages import get_parser
        except ImportError:
            pins = " ".join(f"{k}=={v}" for k, v in PINNED_VERSIONS.items())
            raise SourceBenchError(
                f"the APIBench AST evaluator needs the tree-sitter Python parser: pip install {pins}"
            ) from None
        if not _CHECKED_VERSIONS:
            _CHECKED_VERSIONS = True
            installed = parser_versions()
            if installed != PINNED_VERSIONS:
                warnings.warn(
                    f"APIBench AST evaluator: parser versions {installed} differ from {PINNED_VERSIONS}; "
                    "verdicts on responses that are not valid Python may differ from the official ones (with "
                    "py-tree-sitter 0.20.2 to 0.21.3, 14 of the 14,200 on Gorilla's published responses do)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        parser = _LOCAL.parser = get_parser("python")
    return parser


def _encode(text: str) -> bytes:
    return text.encode("utf-8", errors="replace")


def _parse(source: bytes) -> Any:
    return _parser().parse(source).root_node


# --------------------------------------------------------------------------------------------------
# API database


@dataclass(frozen=True)
class _Reference:
    """What the matcher needs from one database API."""

    index: int  # 0-based position in the database file
    name: bytes  # callee text of the database api_call
    args: tuple[bytes, ...]  # reference arguments, outer single quotes stripped


def _reference_args(hub: str, call_node: Any, source: bytes) -> list[str]:
    """The reference arguments of a database call node, hub by hub, as upstream picks them."""
    args: list[str] = []
    for child in call_node.children[1].children:
        text = source[child.start_byte:child.end_byte].decode("utf-8")
        if hub == "torchhub":
            if "repo_or_dir" in text or "model" in text:
                args.append(_node_text(child.children[2], source))
        elif hub == "huggingface":
            if "=" in text:
                args.append(_node_text(child.children[2], source))
            elif text not in ("(", ")", ","):
                args.append(text)
        else:  # tensorflowhub
            if "model=" in text or "model =" in text:
                args.append(_node_text(child.children[2], source))
            elif text not in ("(", ")", ","):
                args.append(text)
    return args


def _node_text(node: Any, source: bytes) -> str:
    return source[node.start_byte:node.end_byte].decode("utf-8")


class APIDatabase:
    """One hub's API database (``<hub>_api.jsonl``), in file order, with its parsed api_calls."""

    def __init__(self, records: list[dict[str, Any]], hub: str, *, origin: str = "<records>",
                 lines: list[int] | None = None):
        if hub not in HUBS:
            raise DataError(f"apibench: unknown hub '{hub}' (expected one of {', '.join(HUBS)})")
        self.hub = hub
        self.origin = origin
        self.records = list(records)
        lines = lines or list(range(1, len(self.records) + 1))
        refs: list[_Reference] = []
        for i, (rec, line) in enumerate(zip(self.records, lines)):
            where = f"{origin}:{line}"
            missing = [f for f in _REQUIRED_API_FIELDS if f not in rec]
            if missing:
                raise DataError(f"{where}: missing field(s) {', '.join(missing)}")
            call = rec["api_call"]
            if not isinstance(call, str):
                raise DataError(f"{where}: field api_call must be a string, got {type(call).__name__}")
            ref = self._reference(i, call, where)
            if ref is not None:
                refs.append(ref)
        self._refs = refs
        # For speed, the references grouped by function name (each group keeps file order): the
        # first match in file order is the smallest of the groups' first matches.
        groups: dict[bytes, list[tuple[int, bytes, tuple[bytes, ...]]]] = {}
        for ref in refs:
            groups.setdefault(ref.name, []).append((ref.index, ref.args[0], ref.args[1:]))
        self._groups = list(groups.items())

    def _reference(self, index: int, call: str, where: str) -> _Reference | None:
        source = _encode(call)
        root = _parse(source)
        try:
            stmt = root.children[0]
            expr = stmt.children[0]
            if expr.child_count == 0:  # upstream skips such an API
                return None
            name = source[expr.children[0].start_byte:expr.children[0].end_byte]
            args = _reference_args(self.hub, expr, source)
        except IndexError:
            # The upstream script would stop with an error on this record: refuse it up front.
            raise DataError(
                f"{where}: api_call {call!r} does not have the shape the official evaluator expects "
                "(a call with an argument list)"
            ) from None
        if not args:  # upstream skips APIs without reference arguments
            return None
        stripped = tuple(_encode(a.lstrip("'").rstrip("'")) for a in args)
        return _Reference(index=index, name=name, args=stripped)

    @classmethod
    def from_file(cls, path: Path | str, hub: str) -> APIDatabase:
        path = Path(path)
        records: list[dict[str, Any]] = []
        lines: list[int] = []
        for line, obj in iter_jsonl(path):
            records.append(obj)
            lines.append(line)
        if not records:
            raise DataError(f"{path}: no API records")
        return cls(records, hub, origin=str(path), lines=lines)

    @classmethod
    def load(cls, hub: str, data_dir: Path | str | None = None) -> APIDatabase:
        return cls.from_file(hub_paths(hub, data_dir)["api"], hub)

    def __len__(self) -> int:
        return len(self.records)

    def describe(self, index: int) -> dict[str, Any]:
        rec = self.records[index]
        return {"index": index, "api_name": rec["api_name"], "api_call": rec["api_call"], "domain": rec["domain"]}


# --------------------------------------------------------------------------------------------------
# data paths


def resolve_data_dir(data_dir: Path | str | None = None) -> Path:
    """The APIBench data folder: the given one (or its ``apibench`` sub-folder), else the default
    ``../shared/data/apibench`` relative to the current working directory."""
    if data_dir is None:
        d = (Path.cwd() / DEFAULT_DATA_DIR).resolve()
    else:
        d = Path(data_dir)
        if not any((d / f).exists() for files in HUB_FILES.values() for f in files[:2]) and (d / "apibench").is_dir():
            d = d / "apibench"
    if not d.is_dir():
        raise DataError(f"{d}: APIBench data folder not found")
    return d


def hub_paths(hub: str, data_dir: Path | str | None = None) -> dict[str, Path]:
    if hub not in HUB_FILES:
        raise DataError(f"apibench: unknown hub '{hub}' (expected one of {', '.join(HUBS)})")
    d = resolve_data_dir(data_dir)
    api, ev, q = HUB_FILES[hub]
    return {"api": d / api, "eval": d / ev, "questions": d / q}


def load_gold(hub: str, data_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """The gold ``api_data`` of each evaluation instruction, in file order (question_id k -> item k-1)."""
    path = hub_paths(hub, data_dir)["eval"]
    gold = []
    for line, obj in iter_jsonl(path):
        api = obj.get("api_data")
        if not isinstance(api, dict) or "domain" not in api:
            raise DataError(f"{path}:{line}: missing field api_data.domain")
        gold.append(api)
    return gold


# --------------------------------------------------------------------------------------------------
# evaluation


@dataclass
class Verdict:
    correct: bool
    hallucination: bool
    matched_api: dict[str, Any] | None = None  # index (0-based, file order), api_name, api_call, domain
    extracted: str | None = None  # the text that was parsed
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def extract_api_call(text: str, hub: str) -> str | None:
    """Step 1: the API call text the official evaluator parses (None: TorchHub, no ``api_call``)."""
    if hub not in HUBS:
        raise DataError(f"apibench: unknown hub '{hub}' (expected one of {', '.join(HUBS)})")
    pieces = text.split("api_call")
    if len(pieces) == 1:
        return None if hub == "torchhub" else text
    part = pieces[1].split("api_provider")[0]
    start = part.index(":") if ":" in part else 0
    end = part.rindex(")") if ")" in part else -2
    return part[start + 2:end + 1]


def _candidates(source: bytes) -> tuple[dict[bytes, Any], Any]:
    """Walk the tree as upstream does; return {callee text: first node with it} and the last node."""
    root = _parse(source)
    first: dict[bytes, Any] = {}
    stack = [root]
    node = root
    while stack:
        node = stack.pop()
        children = node.children
        if children:
            head = children[0]
            key = source[head.start_byte:head.end_byte]
            if key not in first:
                first[key] = node
            stack.extend(c for c in children if c.child_count)
    return first, node


def match_api(extracted: str, db: APIDatabase) -> tuple[int, bool]:
    """Steps 2-3: index of the first database API that matches (-1: none) and whether that match
    came from the last-sub-tree fallback (no node called the API's function name)."""
    source = _encode(extracted)
    first, last = _candidates(source)
    best, best_fallback = -1, False
    texts: dict[tuple[int, int], bytes] = {}
    for name, group in db._groups:
        if best >= 0 and group[0][0] > best:
            continue
        node = first.get(name)
        fallback = node is None
        if fallback:
            node = last
        span = (node.start_byte, node.end_byte)
        text = texts.get(span)
        if text is None:
            text = texts[span] = source[span[0]:span[1]]
        for index, head, rest in group:
            if best >= 0 and index > best:
                break
            if head in text and all(a in text for a in rest):
                best, best_fallback = index, fallback
                break
    return best, best_fallback


def _gold_domain(gold_api_data: dict[str, Any]) -> Any:
    gold = gold_api_data.get("api_data", gold_api_data) if isinstance(gold_api_data, dict) else None
    if not isinstance(gold, dict) or "domain" not in gold:
        raise DataError("apibench: the gold api_data has no 'domain' field")
    return gold["domain"]


def check_torchhub_rule(rule: str) -> str:
    if rule not in TORCHHUB_RULES:
        raise DataError(f"apibench: torchhub_rule {rule!r}: expected one of {', '.join(TORCHHUB_RULES)}")
    return rule


def evaluate_response(text: str, hub: str, db: APIDatabase, gold_api_data: dict[str, Any],
                      torchhub_rule: str = "current") -> Verdict:
    """The official verdict on one response (``gold_api_data``: the gold ``api_data`` record, or the
    whole evaluation record holding it); ``torchhub_rule`` as in ``TORCHHUB_RULES``."""
    check_torchhub_rule(torchhub_rule)
    if db.hub != hub:
        raise DataError(f"apibench: the API database is for {db.hub}, not {hub}")
    gold_domain = _gold_domain(gold_api_data)
    extracted = extract_api_call(text, hub)
    if extracted is None and torchhub_rule == "paper":
        return Verdict(False, True, None, None, "no 'api_call' in the response: the paper-era TorchHub script "
                       "(before 2023-06-03) counts it as a hallucination", {"torchhub_rule": "paper"})
    if extracted is None:
        return Verdict(False, False, None, None,
                       "no 'api_call' in the response: TorchHub counts it as neither correct nor hallucination",
                       {"torchhub_rule": "current"})
    index, fallback = match_api(extracted, db)
    if index < 0:
        return Verdict(False, True, None, extracted, "no database API matched: hallucination")
    matched = db.describe(index)
    how = ("through the last sub-tree of the walk (no call to its function name)" if fallback
           else "by function name and reference arguments")
    correct = matched["domain"] == gold_domain
    relation = "equals" if correct else "differs from"
    reason = (f"matched API #{index} ({matched['api_name']}) {how}; its domain {matched['domain']!r} "
              f"{relation} the gold domain {gold_domain!r}")
    return Verdict(correct, False, matched, extracted, reason, {"via_last_subtree": fallback})


def evaluate_for_task(response_text: str, hub: str, api_db: APIDatabase, gold_api_data: dict[str, Any],
                      torchhub_rule: str = "current") -> Verdict:
    """Used by the harness when scoring one task: the same as :func:`evaluate_response`."""
    return evaluate_response(response_text, hub, api_db, gold_api_data, torchhub_rule)


def evaluate_file(hub: str, responses_path: Path | str, data_dir: Path | str | None = None,
                  *, db: APIDatabase | None = None, torchhub_rule: str = "current"
                  ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Score a Gorilla-style responses file (JSON lines ``{question_id, text}``) like the official
    script: per-question verdicts and totals over the number of response lines."""
    check_torchhub_rule(torchhub_rule)
    paths = hub_paths(hub, data_dir)
    db = db or APIDatabase.from_file(paths["api"], hub)
    gold = load_gold(hub, data_dir)
    responses_path = Path(responses_path)
    rows: list[dict[str, Any]] = []
    for line, obj in iter_jsonl(responses_path):
        qid = obj.get("question_id")
        if not isinstance(qid, int) or isinstance(qid, bool) or not 1 <= qid <= len(gold):
            raise DataError(f"{responses_path}:{line}: question_id must be an integer from 1 to {len(gold)}, "
                            f"got {json.dumps(qid)}")
        text = obj.get("text")
        if text is None and "text" not in obj:
            # upstream: a line without text is reported and scored neither correct nor hallucination
            rows.append({"question_id": qid, "correct": False, "hallucination": False})
            continue
        if not isinstance(text, str):
            raise DataError(f"{responses_path}:{line}: field text must be a string, got {type(text).__name__}")
        v = evaluate_response(text, hub, db, gold[qid - 1], torchhub_rule)
        rows.append({"question_id": qid, "correct": v.correct, "hallucination": v.hallucination})
    n = len(rows)
    if n == 0:
        raise DataError(f"{responses_path}: no responses")
    correct = sum(r["correct"] for r in rows)
    halluc = sum(r["hallucination"] for r in rows)
    totals = {"n": n, "correct": correct, "hallucination": halluc,
              "accuracy": correct / n, "hallucination_rate": halluc / n}
    return rows, totals
