"""Bad input, table-driven: every case is a one-line error naming the file (or option) and the
problem, a non-zero exit, no traceback, and nothing already computed is lost.

Each case runs ``sourcebench`` in-process against a malformed data folder or command line. Where
the command would write into a run folder, that folder first holds a finished run (a copy of one
made once for the module): after the failed command every result row, artifact and cached call of
it is still there, unchanged (counters may have been appended to; ``run.json`` rewritten with the
same run id).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sourcebench.harness.cli import main
from tests.conftest import need_data

ARTICLES = [
    {"title": name, "article": f"# {name}\n\n## Family\nThe mother of {name} is {mother}.\n\n## Hobbies\n"
                               f"The hobby of {name} is {hobby}.\n"}
    for name, mother, hobby in [("Ann Lee", "Bo Lee", "chess"), ("Bo Lee", "Cy Lee", "golf"),
                                ("Cy Lee", "Di Lee", "tennis"), ("Di Lee", "Ed Lee", "rowing"),
                                ("Ed Lee", "Fa Lee", "poetry"), ("Fa Lee", "Gus Lee", "dance")]
]
QUESTIONS = [{"id": f"q{i}", "question": f"Who is the mother of {ARTICLES[i % 6]['title']}?",
              "answer": [ARTICLES[(i + 1) % 6]["title"]], "type": i % 5, "difficulty": 1} for i in range(20)]


def dumps(obj) -> bytes:
    return json.dumps(obj, indent=1).encode()


def pw_data(tmp: Path, articles: bytes | None = None, questions: bytes | None = None) -> Path:
    """A small valid PhantomWiki instance ``w``, with either file replaced."""
    inst = tmp / "data" / "phantomwiki" / "w"
    inst.mkdir(parents=True, exist_ok=True)
    (inst / "articles.json").write_bytes(dumps(ARTICLES) if articles is None else articles)
    (inst / "questions.json").write_bytes(dumps(QUESTIONS) if questions is None else questions)
    return tmp / "data"


def swe_data(tmp: Path, questions: bytes | None = None, tree_files: dict[str, bytes] | None = None) -> tuple[Path, Path]:
    root = tmp / "data" / "swe_qa"
    root.mkdir(parents=True, exist_ok=True)
    good = b'{"question": "What does dumps do?", "answer": "It serialises."}\n'
    (root / "flask.jsonl").write_bytes(good * 3 if questions is None else questions)
    tree = tmp / "flask-src"
    tree.mkdir(exist_ok=True)
    files = {"src/flask/json.py": b"def dumps(obj):\n    return str(obj)\n"} if tree_files is None else tree_files
    for rel, data in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    return tmp / "data", tree


def api_data(tmp: Path, api: bytes | None = None, questions: bytes | None = None) -> Path:
    """A copy of the real TorchHub files with one of them replaced (the case skips where they are absent)."""
    real = need_data("apibench")
    root = tmp / "data" / "apibench"
    root.mkdir(parents=True, exist_ok=True)
    for name in ("torchhub_api.jsonl", "torchhub_eval.json", "questions_torchhub_0_shot.jsonl"):
        shutil.copy(real / name, root / name)
    if api is not None:
        (root / "torchhub_api.jsonl").write_bytes(api)
    if questions is not None:
        (root / "questions_torchhub_0_shot.jsonl").write_bytes(questions)
    return tmp / "data"


def run(out: Path, data: Path | None = None, bench: str = "phantomwiki", methods: str = "no_source",
        model: str = "scripted/extractive", *extra: str) -> list[str]:
    args = ["run", "--benchmark", bench, "--methods", methods, "--model", model, "--limit", "2", "--seeds", "0",
            "--embedder", "hash", "--out", str(out), "--no-report"]
    return args + (["--data-dir", str(data)] if data else []) + list(extra)


@dataclass
class Case:
    id: str
    args: Callable[[Path, Path], list[str]]  # (tmp, out) -> argv
    expect: str  # must appear in the one error line
    names_file: str = ""  # a file name the line must name (default: none beyond ``expect``)
    env: dict[str, str] = field(default_factory=dict)
    guarded: bool = True  # ``out`` holds a finished run that must survive untouched


def _pw(articles: bytes | None = None, questions: bytes | None = None, *extra: str):
    return lambda tmp, out: run(out, pw_data(tmp, articles, questions), "phantomwiki", "no_source",
                                "scripted/extractive", *extra)


def _opt(*extra: str, methods: str = "no_source", model: str = "scripted/extractive", bench: str = "phantomwiki"):
    return lambda tmp, out: run(out, pw_data(tmp), bench, methods, model, *extra)


def _swe(questions: bytes | None = None, tree_files: dict[str, bytes] | None = None, tree: str | None = None):
    def args(tmp: Path, out: Path) -> list[str]:
        data, t = swe_data(tmp, questions, tree_files)
        return run(out, data, "swe_qa", "no_source", "scripted/extractive", "--sources", "flask",
                   "--opt", f"flask={tree or t}")
    return args


def _api(api: bytes | None = None, questions: bytes | None = None):
    return lambda tmp, out: run(out, api_data(tmp, api, questions), "apibench", "no_source", "scripted/extractive",
                                "--sources", "torchhub")


def _folder(mutate: Callable[[Path], None], *extra: str):
    """The guarded run folder damaged first; the command is the one that made it."""
    def args(tmp: Path, out: Path) -> list[str]:
        mutate(out)
        return run(out, pw_data(tmp), "phantomwiki", "no_source", "scripted/extractive", *extra)
    return args


def _corrupt_middle_row(out: Path) -> None:
    lines = (out / "results.jsonl").read_bytes().splitlines(keepends=True)
    lines[0] = lines[0][:30] + b"\n"
    (out / "results.jsonl").write_bytes(b"".join(lines))


def _tamper_artifact(out: Path) -> None:
    folder = next(p for p in (out / "artifacts").glob("method_no_source/*") if (p / "artifact.json").exists())
    (folder / "tampered.txt").write_text("changed after freezing")


def _edit_first_row(**changes):
    def mutate(out: Path) -> None:
        lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
        lines[0] = json.dumps({**json.loads(lines[0]), **changes}) + "\n"
        (out / "results.jsonl").write_text("".join(lines))
    return mutate


def _duplicate_first_row(out: Path) -> None:
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines + lines[:1]))


def _manifest_a_list(out: Path) -> None:
    folder = next(p for p in (out / "artifacts").glob("method_no_source/*") if (p / "artifact.json").exists())
    (folder / "artifact.json").write_text("[1, 2]")


def _corrupt_cache(tmp: Path, out: Path) -> list[str]:
    (out / "cache").mkdir(parents=True)
    (out / "cache" / "llm_calls.sqlite").write_bytes(b"this is not an sqlite database, it was overwritten" * 40)
    return run(out, pw_data(tmp))


# -- reproduce configs: a small valid config, one field broken -----------------------------------
CONFIG = {"name": "bad", "output": "runs/bad", "seeds": [0], "limit": 2, "embedder": "hash",
          "backends": [{"id": "scripted", "model": "scripted/extractive"}],
          "benchmarks": [{"id": "phantomwiki"}],
          "methods": {"hybrid_rag": {"config": {"top_k": 4}}},
          "tables": {"table1": {"methods": ["hybrid_rag", "no_source"]}}}


def _config(change: Callable[[dict], None] | None = None, raw: bytes | None = None, suffix: str = ".yaml"):
    def args(tmp: Path, out: Path) -> list[str]:
        import copy

        import yaml

        cfg = copy.deepcopy(CONFIG)
        if change:
            change(cfg)
        path = tmp / f"exp{suffix}"
        path.write_bytes(raw if raw is not None else yaml.safe_dump(cfg).encode())
        return ["reproduce", str(path), "--out", str(out / "repro"), "--render-only"]
    return args


def _fetch(bench: str, *opts: str):
    return lambda tmp, out: ["data", "fetch", bench, "--dest", str(tmp / "data"), *[x for o in opts for x in ("--opt", o)]]


NON_UTF8 = b'[{"title": "Ann \xff\xfe Lee", "article": "x"}]'
BIG = b"[" + b'{"title": "x", "article": "' + b"a" * (2 * 2**20) + b'"}]'
pw_art = ARTICLES
pw_q = QUESTIONS

CASES = [
    # -- PhantomWiki articles.json ------------------------------------------------------------------
    Case("articles_corrupt", _pw(articles=b'[{"title": "A", "article": "x"}, {oops}]'), "invalid JSON at line 1",
         "articles.json"),
    Case("articles_truncated", _pw(articles=dumps(pw_art)[:300]), "invalid JSON", "articles.json"),
    Case("articles_empty_file", _pw(articles=b""), "invalid JSON at line 1 column 1", "articles.json"),
    Case("articles_empty_source", _pw(articles=b"[]"), "expected a non-empty JSON list of articles", "articles.json"),
    Case("articles_not_a_list", _pw(articles=b'{"title": "A"}'), "expected a non-empty JSON list", "articles.json"),
    Case("article_missing_field", _pw(articles=dumps([{"title": "A"}])), "missing field(s) article", "articles.json"),
    Case("article_not_an_object", _pw(articles=b'["just text"]'), "article 0 is not an object", "articles.json"),
    Case("articles_not_utf8", _pw(articles=NON_UTF8), "not valid UTF-8", "articles.json"),
    Case("articles_duplicate_titles", _pw(articles=dumps(pw_art + pw_art[:1])), "duplicate element id",
         "articles.json"),
    Case("article_title_path_traversal",
         _pw(articles=dumps([{"title": "../../etc/passwd", "article": "# x\n## y\nz"}] + pw_art)),
         "is not a safe relative id", "articles.json"),
    Case("article_title_wrong_type", _pw(articles=dumps([{"title": 5, "article": "x"}] + pw_art)),
         "phantomwiki/w: cannot load the source"),
    Case("articles_huge", _pw(articles=BIG), "file is too large", "articles.json", env={"SOURCEBENCH_MAX_INPUT_MB": "1"}),
    Case("articles_is_a_directory", lambda tmp, out: (pw_data(tmp), (tmp / "data/phantomwiki/w/articles.json").unlink(),
                                                      (tmp / "data/phantomwiki/w/articles.json").mkdir(),
                                                      run(out, tmp / "data"))[-1],
         "is a directory", "articles.json"),
    # -- PhantomWiki questions.json -----------------------------------------------------------------
    Case("questions_truncated", _pw(questions=dumps(pw_q)[:-40]), "invalid JSON", "questions.json"),
    Case("questions_missing_field", _pw(questions=dumps([{k: v for k, v in q.items() if k != "answer"} for q in pw_q])),
         "missing field(s) answer", "questions.json"),
    Case("questions_not_utf8", _pw(questions=b'[{"id": "q\xc3\x28"}]'), "not valid UTF-8", "questions.json"),
    Case("questions_not_a_list", _pw(questions=b'{"id": 1}'), "expected a JSON list of questions", "questions.json"),
    Case("question_not_an_object", _pw(questions=b"[1, 2]"), "question 0 is not an object", "questions.json"),
    Case("questions_duplicate_ids", _pw(questions=dumps(pw_q + pw_q[:1])), "duplicate task ids"),
    Case("question_answer_wrong_type", _pw(questions=dumps([{**pw_q[0], "answer": 7}] + pw_q[1:])),
         "phantomwiki/w: cannot load the tasks"),
    Case("question_text_null", _pw(questions=dumps([{**pw_q[0], "question": None}] + pw_q[1:])),
         "phantomwiki/w: cannot load the tasks"),
    Case("no_instance_folder", lambda tmp, out: ((tmp / "data" / "phantomwiki").mkdir(parents=True),
                                                 run(out, tmp / "data"))[-1],
         "no PhantomWiki instance", "phantomwiki"),
    Case("data_dir_missing", lambda tmp, out: run(out, tmp / "nowhere"), "data folder not found", "nowhere"),
    # -- SWE-QA and APIBench files ------------------------------------------------------------------
    Case("swe_qa_malformed_line", _swe(questions=b'{"question": "q", "answer": "a"}\n{"question": \n'),
         "flask.jsonl:2: malformed JSON line", guarded=False),
    Case("swe_qa_missing_field", _swe(questions=b'{"question": "q"}\n'), "flask.jsonl:1: missing field(s) answer",
         guarded=False),
    Case("swe_qa_line_not_object", _swe(questions=b'["q", "a"]\n'), "flask.jsonl:1: expected a JSON object",
         guarded=False),
    Case("swe_qa_empty_source_tree", _swe(tree_files={}), "has no readable text files", "flask-src", guarded=False),
    Case("swe_qa_only_binary_files", _swe(tree_files={"a.py": b"\x00\x01\x02", "b.txt": b"\xff\xfe\xfd"}),
         "has no readable text files", "flask-src", guarded=False),
    Case("swe_qa_tree_not_a_directory", _swe(tree="/nonexistent/flask-tree"), "is not a directory",
         "/nonexistent/flask-tree", guarded=False),
    Case("apibench_api_malformed", _api(api=b'{"domain": "x", "api_name": \n'), "torchhub_api.jsonl:1: malformed JSON",
         guarded=False),
    Case("apibench_api_missing_field", _api(api=b'{"domain": "x", "api_name": "y"}\n'),
         "torchhub_api.jsonl:1: missing field(s) api_call", guarded=False),
    Case("apibench_questions_missing_text", _api(questions=b'{"question_id": 1}\n'),
         "questions_torchhub_0_shot.jsonl:1: missing field(s) text", guarded=False),
    # -- names and option values --------------------------------------------------------------------
    Case("unknown_method", _opt(methods="no_source,nope"), "unknown method 'nope'"),
    Case("unknown_benchmark", lambda tmp, out: run(out, pw_data(tmp), "nobench"), "unknown benchmark 'nobench'"),
    Case("unknown_source", _opt("--sources", "w,elsewhere"), "--sources: unknown source(s) elsewhere"),
    Case("unknown_benchmark_option", _opt("--opt", "colour=blue"), "unknown option(s) colour"),
    Case("bad_option_value", _opt("--opt", "max_difficulty=two"), "max_difficulty='two' is not an integer"),
    Case("option_without_value", _opt("--opt", "max_difficulty"), "--opt 'max_difficulty': expected KEY=VALUE"),
    Case("method_config_without_method", _opt("--method-config", "top_k=3"), "expected METHOD.KEY=VALUE"),
    Case("method_config_unknown_key", _opt("--method-config", "no_source.colour=1"), "method 'no_source': invalid config"),
    Case("method_config_wrong_type", _opt("--method-config", "hybrid_rag.top_k=many", methods="hybrid_rag"),
         "method 'hybrid_rag': invalid config"),
    # the harness's own message, before any folder is made (so the finished run in the folder is untouched)
    Case("model_without_provider", _opt(model="gpt4"), "--model 'gpt4': expected provider/model, e.g. local/smollm2"),
    Case("model_unknown_provider", _opt(model="nosuchprovider/m"), "model 'nosuchprovider/m'", guarded=False),
    Case("unknown_embedder", _opt("--embedder", "word2vec"), "unknown embedder 'word2vec'"),
    Case("seeds_not_integers", _opt("--seeds", "a,b"), "--seeds 'a,b': expected comma-separated integers"),
    Case("limit_zero", _opt("--limit", "0"), "--limit: expected a positive integer, got '0'"),
    Case("max_tokens_not_a_number", _opt("--max-tokens", "lots"), "--max-tokens: expected a positive integer"),
    Case("temperature_not_a_number", _opt("--temperature", "hot"), "--temperature: invalid float value"),
    Case("max_retries_negative", _opt("--max-retries", "-1"), "--max-retries: expected a non-negative integer"),
    Case("unknown_executor", _opt("--executor", "dask"), "--executor: invalid choice: 'dask'"),
    Case("ray_address_without_ray", _opt("--ray-address", "auto"), "--ray-address: only meaningful with --executor ray"),
    # -- the run folder -----------------------------------------------------------------------------
    Case("results_corrupt_middle_line", _folder(_corrupt_middle_row), "results.jsonl:1: malformed JSON line"),
    Case("run_json_corrupt", _folder(lambda out: (out / "run.json").write_text('{"run_id": ')), "invalid JSON",
         "run.json"),
    Case("folder_of_another_benchmark", _opt(bench="swe_qa"), "this folder holds a phantomwiki run", "run.json"),
    Case("folder_of_another_model", _opt(model="scripted/other"), "this folder holds a run with model", "run.json"),
    Case("frozen_artifact_tampered", _folder(_tamper_artifact, "--limit", "3"), "content hash mismatch",
         "method_no_source"),
    # -- seeds, numbers and names that were accepted silently ------------------------------------------
    Case("seeds_duplicate", _opt("--seeds", "0,0"), "--seeds: seed 0 given more than once"),
    Case("seeds_empty", _opt("--seeds", ""), "--seeds: expected a non-empty list"),
    Case("seeds_only_commas", _opt("--seeds", ",,"), "--seeds: expected a non-empty list"),
    Case("seeds_negative", _opt("--seeds=-1"), "--seeds: -1 is not a non-negative integer"),
    Case("temperature_nan", _opt("--temperature", "nan"), "--temperature: expected a finite number"),
    Case("temperature_infinite", _opt("--temperature", "inf"), "--temperature: expected a finite number"),
    Case("temperature_negative", _opt("--temperature=-0.5"), "--temperature: expected a non-negative number"),
    Case("max_cost_negative", _opt("--max-cost=-1"), "--max-cost: expected a non-negative number"),
    Case("price_input_negative", _opt("--price-input=-2", "--price-output", "1"),
         "--price-input: expected a non-negative number"),
    Case("price_output_nan", _opt("--price-input", "1", "--price-output", "nan"),
         "--price-output: expected a finite number"),
    Case("sources_empty", _opt("--sources", ""), "--sources: expected comma-separated names"),
    Case("methods_empty", _opt(methods=","), "--methods: expected comma-separated names"),
    Case("method_config_for_method_not_run", _opt("--method-config", "hybrid_rag.top_k=3"),
         "--method-config hybrid_rag.top_k: method 'hybrid_rag' is not in --methods"),
    Case("method_config_negative_top_k", _opt("--method-config", "hybrid_rag.top_k=-5", methods="hybrid_rag"),
         "--method-config hybrid_rag.top_k: expected a finite non-negative number, got -5"),
    Case("method_config_nan", _opt("--method-config", "hybrid_rag.top_k=NaN", methods="hybrid_rag"),
         "--method-config hybrid_rag.top_k: expected a finite non-negative number"),
    Case("method_config_empty_key", _opt("--method-config", "hybrid_rag.=3", methods="hybrid_rag"),
         "expected METHOD.KEY=VALUE"),
    # -- data that scored 0 or nothing without a word ------------------------------------------------
    Case("question_empty_answer_list", _pw(questions=dumps([{**pw_q[0], "answer": []}] + pw_q[1:])),
         "phantomwiki/w: task q0 has an empty reference list"),
    Case("question_difficulty_a_string",
         _pw(None, dumps([{**q, "difficulty": "two"} for q in pw_q]), "--opt", "max_difficulty=2"),
         "phantomwiki/w: cannot load the test tasks"),
    Case("split_with_no_test_task", _opt("--opt", "max_difficulty=0"), "has 0 test tasks"),
    # -- the run folder, read back -------------------------------------------------------------------
    Case("results_score_a_string", _folder(_edit_first_row(score="0.9")),
         "results.jsonl:1: field score must be a number between 0 and 1, got '0.9'"),
    Case("results_score_out_of_range", _folder(_edit_first_row(score=1.5)), "results.jsonl:1: field score"),
    Case("results_seed_negative", _folder(_edit_first_row(seed=-1)), "results.jsonl:1: field seed"),
    Case("results_failed_not_a_bool", _folder(_edit_first_row(failed="no")), "results.jsonl:1: field failed"),
    Case("results_duplicated_line", _folder(_duplicate_first_row), "results.jsonl:3: duplicate result row"),
    Case("run_json_a_list", _folder(lambda out: (out / "run.json").write_text("[1, 2]")),
         "expected a JSON object, got list", "run.json"),
    Case("artifact_manifest_a_list", _folder(_manifest_a_list, "--limit", "3"), "artifact.json: expected a JSON object"),
    Case("call_cache_corrupt", _corrupt_cache, "the model-call cache is not a readable sqlite database",
         "llm_calls.sqlite", guarded=False),
    # -- reproduce configs ---------------------------------------------------------------------------
    Case("config_not_utf8", _config(raw=b"name: b\xff\xfead\n"), "not valid UTF-8", "exp.yaml", guarded=False),
    Case("config_seeds_negative", _config(lambda c: c.update(seeds=[-1])), "seeds", "exp.yaml", guarded=False),
    Case("config_seeds_duplicate", _config(lambda c: c.update(seeds=[1, 1])), "distinct", "exp.yaml", guarded=False),
    Case("config_temperature_nan", _config(lambda c: c["backends"][0].update(temperature=float("nan"))),
         "backends.0.temperature", "exp.yaml", guarded=False),
    Case("config_method_misspelled", _config(lambda c: c["tables"]["table1"].update(methods=["hybrid_rg"])),
         "tables.table1.methods: unknown method 'hybrid_rg' (did you mean 'hybrid_rag'?)", "exp.yaml", guarded=False),
    Case("config_baseline_misspelled", _config(lambda c: c.update(baseline="hybridrag")),
         "baseline: unknown method 'hybridrag'", "exp.yaml", guarded=False),
    Case("config_method_setting_unknown", _config(lambda c: c["methods"]["hybrid_rag"]["config"].update(topk=3)),
         "methods.hybrid_rag.config.topk: unknown setting of hybrid_rag", "exp.yaml", guarded=False),
    Case("config_method_setting_negative", _config(lambda c: c["methods"]["hybrid_rag"]["config"].update(top_k=-5)),
         "methods.hybrid_rag.config.top_k: expected a finite non-negative number", "exp.yaml", guarded=False),
    Case("config_unknown_stage", _config(lambda c: c["tables"].update(table3={"stages": ["M9"]})),
         "tables.table3.stages: unknown stage 'M9'", "exp.yaml", guarded=False),
    # -- data fetch settings that became paths -------------------------------------------------------
    Case("fetch_name_climbs_out", _fetch("phantomwiki", "name=../../swe_qa"), "--opt name='../../swe_qa'",
         guarded=False),
    Case("fetch_name_absolute", _fetch("phantomwiki", "name=/tmp/elsewhere"), "--opt name='/tmp/elsewhere'",
         guarded=False),
    Case("fetch_name_dot_dot", _fetch("phantomwiki", "name=.."), "expected one folder or file name", guarded=False),
    Case("fetch_revision_climbs_out", _fetch("narrativeqa", "revision=../../../../"), "--opt revision=",
         guarded=False),
    Case("fetch_unknown_setting", _fetch("phantomwiki", "colour=blue"), "unknown setting(s) colour", guarded=False),
    Case("out_is_a_file", lambda tmp, out: (shutil.rmtree(out), out.write_text("not a folder"),
                                            run(out, pw_data(tmp)))[-1], "not a directory", "--out"),
]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file a run keeps (the lock file and sqlite's WAL side files aside)."""
    if not folder.is_dir():
        return {}
    skip = (".lock", "-wal", "-shm")
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith(skip)}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished small run, copied into each guarded case's output folder."""
    tmp = tmp_path_factory.mktemp("finished")
    out = tmp / "run"
    assert main(run(out, pw_data(tmp))) == 0
    assert (out / "results.jsonl").read_text().count("\n") == 2
    return out


def test_the_table_is_large_enough():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_error(case: Case, tmp_path, finished_run, capsys, monkeypatch):
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "out"
    if case.guarded:
        shutil.copytree(finished_run, out)
    argv = case.args(tmp_path, out)
    before = snapshot(out) if out.is_dir() else {}
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc not in (0, None), f"exit code {rc}; stderr: {err}"
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    assert len(err.splitlines()) == 1, err
    assert case.expect in err, err
    if case.names_file:
        assert case.names_file in err, err
    if case.guarded and case.id != "out_is_a_file":
        assert_nothing_lost(out, before)


def assert_nothing_lost(out: Path, before: dict[str, bytes]) -> None:
    """Rows, artifacts, caches as they were; append-only files only grew; run.json kept its run id."""
    for rel, data in before.items():
        path = out / rel
        assert path.is_file(), f"{rel} disappeared"
        now = path.read_bytes()
        if rel == "run.json" and now != data:  # rewritten: same run
            assert json.loads(now)["run_id"] == json.loads(data)["run_id"]
        elif rel in ("usage.jsonl", "failures.jsonl"):
            assert now.startswith(data), f"{rel} lost lines"
        elif rel.endswith("llm_calls.sqlite"):
            assert cached_keys(path) >= cached_keys_from(data, path), f"{rel} lost entries"
        elif rel.endswith((".sqlite", ".sqlite-wal", ".sqlite-shm")):
            continue  # other caches (embeddings) only ever grow; their tables differ
        else:
            assert now == data, f"{rel} changed"


def cached_keys(path: Path) -> set[str]:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return {k for (k,) in con.execute("SELECT key FROM calls")}
    finally:
        con.close()


def cached_keys_from(data: bytes, like: Path) -> set[str]:
    import sqlite3

    copy = like.with_name(like.name + ".before")
    copy.write_bytes(data)
    try:
        return cached_keys(copy)
    except sqlite3.OperationalError:  # the snapshot of a WAL-mode file may not hold the table yet
        return set()
    finally:
        copy.unlink()
