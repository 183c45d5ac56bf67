"""The book navigator with the scripted model: its three tools over the source's structure, the
round limit with a terminal answer, action counts, and a build phase that makes no model call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sourcebench.harness.artifacts import ArtifactStore
from sourcebench.harness.benchmark import Benchmark
from sourcebench.harness.data import Answer, Element, Score, Source, Task
from sourcebench.harness.embeddings import HashEmbedder
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger
from sourcebench.harness.method import Context, LearnContext
from sourcebench.harness.providers import scripted
from sourcebench.methods.kb_curator.reader import render_steps
from sourcebench.methods.kb_curator.tools import Observation
from sourcebench.methods.navigator import Book, Navigator

CHAPTERS = {
    "guide/install.md": [("Requirements", "Python 3.11 and a C compiler are needed."),
                         ("Steps", "Run the installer, then restart the shell.")],
    "guide/usage.md": [("Options", "The --fast flag skips the integrity check.\nThe --slow flag adds a full scan."),
                       ("Exit codes", "Code 3 means the archive is corrupt.")],
    "reference/api.md": [("open", "open(path) returns a handle."), ("close", "close(handle) flushes buffers.")],
}


def book_source() -> Source:
    els = []
    for path, secs in CHAPTERS.items():
        for title, text in secs:
            els.append(Element(id=f"{path}#{title.lower().replace(' ', '-')}", title=f"{path} > {title}", path=path,
                               text=f"## {title}\n{text}"))
    return Source(id="manual", kind="documents", elements=els)


SOURCE = book_source()
TASK = Task(id="q1", source_id="manual", question="What does exit code 3 mean?", reference="the archive is corrupt")


class ManualBench(Benchmark):
    name = "manual"

    def source_ids(self) -> list[str]:
        return ["manual"]

    def load_source(self, source_id: str) -> Source:
        return SOURCE

    def load_tasks(self, source_id: str) -> list[Task]:
        return [TASK]

    async def score(self, task: Task, answer: Answer, judge=None) -> Score:
        raise AssertionError("the navigator never scores")


def act(tool: str, **args: Any) -> str:
    return json.dumps({"action": {"tool": tool, **args}})


def router(step: Callable[[int, str], str]) -> Callable:
    """Navigator steps get the 0-based round from the 'Round n of N' line; the answer prompt gets text."""
    def reply(messages, schema):
        prompt = messages[-1]["content"]
        if "organised like a book" in messages[0]["content"]:
            return step(int(prompt.rsplit("Round ", 1)[1].split(" ")[0]) - 1, prompt)
        return "The archive is corrupt."
    return reply


def nav_calls() -> list[dict[str, Any]]:
    return [c for c in scripted.CALLS if "organised like a book" in c["messages"][0]["content"]]


def solve_calls() -> list[dict[str, Any]]:
    return [c for c in scripted.CALLS if "organised like a book" not in c["messages"][0]["content"]]


def contexts(tmp_path: Path) -> tuple[LearnContext, Context, UsageLedger]:
    ledger = UsageLedger()
    llm = LLM(ModelSpec(name="scripted/unit", max_tokens=64), CallCache(tmp_path / "c.sqlite"), ledger)
    common = {"source": SOURCE, "benchmark": ManualBench(), "embedder": HashEmbedder(),
              "store": ArtifactStore(tmp_path / "store")}
    workdir = tmp_path / "artifact"
    workdir.mkdir()
    return (LearnContext(llm=llm.bind("navigator", "learn"), workdir=workdir, **common),
            Context(llm=llm.bind("navigator", "answer"), **common), ledger)


def run(tmp_path: Path, step: Callable[[int, str], str], **config: Any) -> tuple[Answer, UsageLedger]:
    scripted.set_script(router(step))
    method = Navigator(config)
    lctx, tctx, ledger = contexts(tmp_path)
    asyncio.run(method.learn(SOURCE, [], lctx))
    return asyncio.run(method.answer(TASK, method.load(lctx.workdir, tctx), tctx)), ledger


def book(**kw: Any) -> Book:
    return Book(SOURCE, **{"toc_max_lines": 60, "snippet_chars": 160, "read_chars": 8000, **kw})


# -- tools ---------------------------------------------------------------------------------------------------


def test_table_of_contents_expands_when_it_fits_and_pages_when_it_does_not():
    full = book().toc("", 1).text
    assert full.splitlines()[0] == "contents of the top level (6 sections):"
    assert "- guide/\n  - install.md/\n    - [guide/install.md#requirements] guide/install.md > Requirements" in full
    small = book(toc_max_lines=5)
    top = small.toc("", 1).text
    assert "- guide/ (4 sections)" in top and "- reference/ (2 sections)" in top and "[" not in top
    node = small.toc("guide/usage.md", 1).text
    assert "[guide/usage.md#exit-codes] guide/usage.md > Exit codes" in node
    paged = book(toc_max_lines=5)
    paged.nodes[""].children.update({f"extra{i}": "guide" for i in range(6)})  # 8 top-level items
    p1, p2 = paged.toc("", 1).text, paged.toc("", 2).text
    assert "(page 1 of 2; ask for page 2 for more)" in p1 and "(page 2 of 2)" in p2
    bad = small.toc("nowhere", 1)
    assert not bad.ok and 'no node "nowhere"' in bad.text


def test_keyword_search_shows_the_matching_line_and_read_returns_the_whole_section():
    b = book()
    obs = b.search("slow flag", 5)
    assert obs.hits[0].element_id == "guide/usage.md#options"
    assert obs.hits[0].text == "The --slow flag adds a full scan."  # the best line, not the first
    assert not b.search("zebra", 5).hits and not b.search("!!", 5).ok
    read = b.read("guide/usage.md#options")
    assert read.read is not None and read.read.text == SOURCE.elements[2].text
    assert not b.read("guide/usage.md#nope").ok
    assert b.read("guide/install.md#steps").text.startswith("read [guide/install.md#steps]")
    cut = book(read_chars=200).read("guide/usage.md#options")
    assert cut.read is not None and cut.read.text == SOURCE.elements[2].text  # short sections are whole


# -- the agent ------------------------------------------------------------------------------------------------


def test_navigator_stops_at_its_round_limit_then_answers_once(tmp_path):
    ans, ledger = run(tmp_path, lambda n, p: act("search", keywords=f"flag {n}"), max_rounds=3)
    assert len(nav_calls()) == 3 and len(solve_calls()) == 1
    assert ans.metadata["actions"] == 3 and ans.metadata["budget_exhausted"] and ans.metadata["stop"] == "budget"
    assert "Round 3 of 3" in nav_calls()[-1]["messages"][-1]["content"]
    stages = {r["stage"]: r["calls"] for r in ledger.snapshot() if r["phase"] == "answer"}
    assert stages == {"navigate_step": 3, "answer": 1}
    assert ans.text == "The archive is corrupt."


def test_navigation_reads_sections_and_answers_from_them(tmp_path):
    plan = [act("toc", node="", page=1), act("search", keywords="exit code"),
            act("read", section_id="guide/usage.md#exit-codes"), act("answer")]
    ans, _ = run(tmp_path, lambda n, p: plan[n])
    assert ans.metadata["actions"] == 4 and ans.metadata["stop"] == "answer" and not ans.metadata["budget_exhausted"]
    assert ans.metadata["tocs"] == 1 and ans.metadata["searches"] == 1 and ans.metadata["reads"] == 1
    assert ans.metadata["trace"][2] == 'read(section_id="guide/usage.md#exit-codes")'
    # every observation was in the history of the next round
    third = nav_calls()[2]["messages"][-1]["content"]
    assert "contents of the top level" in third and "[guide/usage.md#exit-codes]" in third
    # evidence: the section read (whole), then the other search hits (as shown)
    assert ans.evidence_ids[0] == "guide/usage.md#exit-codes"
    solve = solve_calls()[0]["messages"][-1]["content"]
    assert "## Exit codes\nCode 3 means the archive is corrupt." in solve


def test_an_invalid_section_id_costs_a_round(tmp_path):
    ans, _ = run(tmp_path, lambda n, p: act("read", section_id="missing") if n == 0 else act("answer"))
    assert ans.metadata["actions"] == 2 and "no section with id [missing]" in nav_calls()[1]["messages"][-1]["content"]
    assert ans.evidence_ids == []


def test_older_observations_are_shortened_to_fit_the_history_budget(tmp_path):
    plan = [act("read", section_id=e.id) for e in SOURCE.elements[:3]] + [act("answer")]
    run(tmp_path, lambda n, p: plan[n], history_chars=1000)
    assert "[shortened]" not in nav_calls()[3]["messages"][-1]["content"]  # three short reads fit
    steps = [("read(a)", Observation("head a\n" + "x" * 600)), ("read(b)", Observation("head b\n" + "y" * 600))]
    lines = render_steps(steps, label="Round", budget_chars=1000)
    assert lines[0] == "Round 1: read(a)\nResult: head a [shortened]" and lines[1].endswith("y" * 600)
    assert render_steps(steps, label="Round", budget_chars=5000)[0].endswith("x" * 600)  # under budget nothing is shortened


def test_learn_writes_only_a_manifest_and_calls_no_model(tmp_path):
    scripted.set_script(router(lambda n, p: act("answer")))
    lctx, _, ledger = contexts(tmp_path)
    stats = asyncio.run(Navigator().learn(SOURCE, [TASK], lctx))
    assert stats == {"n_sections": 6, "n_toc_nodes": 5, "build_calls": 0}
    assert [p.name for p in lctx.workdir.iterdir()] == ["navigator.json"]
    assert not scripted.CALLS and not ledger.snapshot()
    assert Navigator.uses_guidance is False


def test_a_failed_step_is_a_failed_answer(tmp_path):
    ans, _ = run(tmp_path, lambda n, p: "{}")
    assert ans.failed and ans.failure_reason.startswith("navigator step failed") and not solve_calls()


def test_a_step_prompt_that_would_overflow_the_window_gets_a_smaller_history(tmp_path):
    """With a tokenizer that counts more than chars/4 (a local model), the history shrinks for the step
    that would not fit; the same episode without exact counts keeps every observation whole."""
    from types import SimpleNamespace

    from sourcebench.methods.kb_curator.reader import fit_history

    async def count(text: str) -> int:
        return (len(text) * 3) // 8  # 1.5 tokens per chars/4 estimate

    def build(chars):
        return [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "h" * (20000 if chars is None else chars)}]

    ctx = SimpleNamespace(llm=SimpleNamespace(spec=ModelSpec(name="scripted/x", context_window=3000), count_tokens=count))
    fitted = asyncio.run(fit_history(ctx, build, 16000, 512))
    used = sum(asyncio.run(count(m["content"])) + 8 for m in fitted)
    assert used <= 3000 - 512 and len(fitted[1]["content"]) < 16000
    assert asyncio.run(fit_history(ctx, build, 2000, 512)) == build(2000)  # fits: built as before
    no_count = SimpleNamespace(llm=SimpleNamespace(spec=ctx.llm.spec))
    assert asyncio.run(fit_history(no_count, build, 16000, 512)) == build(16000)

    plan = [act("read", section_id=e.id) for e in SOURCE.elements[:3]] + [act("answer")]
    scripted.set_script(router(lambda n, p: plan[n]))
    method = Navigator({"history_chars": 16000})
    lctx, tctx, _ = contexts(tmp_path)
    tctx.llm.llm.spec = ModelSpec(name="scripted/unit", max_tokens=64, context_window=700)
    tctx.llm.count_tokens = count
    asyncio.run(method.learn(SOURCE, [], lctx))
    asyncio.run(method.answer(TASK, method.load(lctx.workdir, tctx), tctx))
    assert "[shortened]" in nav_calls()[3]["messages"][-1]["content"]
