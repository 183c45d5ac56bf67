import asyncio

import pytest

from sourcebench.adapters.apibench.benchmark import APIBench
from sourcebench.harness.data import Answer
from sourcebench.harness.errors import DataError
from tests.conftest import need_data


@pytest.fixture
def bench():
    return APIBench(data_dir=need_data("apibench").parent)


def test_hubs_and_paper_task_counts(bench):
    assert bench.source_ids() == ["torchhub", "huggingface", "tensorflowhub"]
    assert [len(bench.load_tasks(h)) for h in bench.source_ids()] == [186, 100, 100]
    src = bench.load_source("torchhub")
    assert src.kind == "api_docs" and len(src.elements) == 94
    assert "api_call: torch.hub.load" in src.elements[0].text


def test_grouped_by_api(bench):
    tasks = bench.load_tasks("torchhub")
    src = bench.load_source("torchhub")
    sp = bench.make_splits(src, tasks, [0])[0]
    g = {t.id: t.group for t in tasks}
    assert {g[i] for i in sp.guidance_ids}.isdisjoint({g[i] for i in sp.test_ids})
    assert 0.25 < len(sp.guidance_ids) / len(tasks) < 0.35


def test_scoring_uses_ast_evaluator(bench):
    t = bench.load_tasks("torchhub")[0]
    call = t.reference["api_call"]
    good = asyncio.run(bench.score(t, Answer(text=f"{{'domain': 'x', 'api_call': \"{call}\", 'api_provider': 'PyTorch'}}"), None))
    assert good.correct and good.value == 1.0
    bad = asyncio.run(bench.score(t, Answer(text="{'api_call': \"torch.hub.load('nope/nope', 'zzz')\", 'api_provider': 'x'}"), None))
    assert not bad.correct and bad.details["hallucination"]
    failed = asyncio.run(bench.score(t, Answer(text="", failed=True, failure_reason="context_overflow: x"), None))
    assert failed.failed and failed.value == 0


def test_malformed_line_names_file_and_line(tmp_path):
    d = tmp_path / "apibench"
    d.mkdir()
    (d / "torchhub_api.jsonl").write_text('{"domain": "a", "api_name": "b", "api_call": "c"}\n{broken\n')
    (d / "torchhub_eval.json").write_text("")
    with pytest.raises(DataError, match=r"torchhub_api\.jsonl:2: malformed JSON line"):
        APIBench(data_dir=tmp_path).load_source("torchhub")


def test_torchhub_rule_option_reaches_the_evaluator():
    """--opt torchhub_rule=paper: a TorchHub answer without an api_call is a hallucination (the paper-era
    script); by default it is neither (the current script)."""
    data = need_data("apibench").parent
    t = APIBench(data_dir=data).load_tasks("torchhub")[0]
    prose = Answer(text="I would use a video classification model from PyTorch Hub.")
    cur = asyncio.run(APIBench(data_dir=data).score(t, prose, None))
    pap = asyncio.run(APIBench(data_dir=data, options={"torchhub_rule": "paper"}).score(t, prose, None))
    assert not cur.correct and cur.details["hallucination"] is False and cur.details["torchhub_rule"] == "current"
    assert not pap.correct and pap.details["hallucination"] is True and pap.details["torchhub_rule"] == "paper"
    from sourcebench.harness.errors import ConfigError

    with pytest.raises(ConfigError, match=r"apibench: --opt torchhub_rule='1923': expected current or paper"):
        APIBench(data_dir=data, options={"torchhub_rule": "1923"})
