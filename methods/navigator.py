"""Book navigator (seed paper 003, BookNavigator): study the source's structure while answering.

An agent gets three tools over the source seen as a book (documents / folders, divided into
sections = elements): the table of contents, keyword search over sections, and reading one whole
section. It takes one action per round for at most ``max_rounds`` rounds, choosing ``answer`` when
it has studied enough; at the limit the terminal round answers without further access, as in the
paper. The answer is written by the shared answer prompt from the sections read (then the search
lines seen), so answers stay comparable across methods. There is no build phase: ``learn`` writes a
small manifest and makes no model call; the table of contents and the keyword index are built from
the elements in memory when the method is loaded.

Deviations from the paper (also in ``Navigator.deviations``): the paper's policy is RL-trained; here
the run's model is used as is (the paper's base-model setting). Actions are schema-constrained JSON
steps. Keyword search is BM25 over the section text. A read shows at most ``read_chars``
characters of a section, and older observations are shortened once the history exceeds
``history_chars``, so the loop fits small context windows. The paper states no round limit in the
part we have; 8 is our default.

The step schema, observations and episode record are shared with the KB curator's reader
(``methods.kb_curator.tools`` / ``.reader``), so both agents report actions the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from sourcebench.harness.data import Answer, Element, Evidence, Source, Task, normalise_ws
from sourcebench.harness.method import Context, LearnContext, Method, MethodConfig
from sourcebench.harness.retrieval import SparseBM25, tokenize

from .kb_curator.reader import Episode, act_until_done, fit_history, render_steps
from .kb_curator.tools import (
    ID_CHARS,
    QUERY_CHARS,
    ActionStep,
    Finish,
    Observation,
    ToolAction,
    snippet,
)

MANIFEST_FILE = "navigator.json"


class NavigatorConfig(MethodConfig):
    max_rounds: int = Field(8, ge=1)  # study rounds before the terminal answer
    search_k: int = Field(5, ge=1)  # sections per keyword search
    toc_max_lines: int = Field(60, ge=5)  # lines per table-of-contents page
    read_chars: int = Field(8000, ge=200)  # a read shows at most this much of a section
    snippet_chars: int = Field(160, ge=20)  # the matching line shown per search hit
    history_chars: int = Field(16000, ge=1000)  # beyond this, older observations are shortened
    step_max_tokens: int = Field(256, ge=32)
    max_evidence: int = Field(8, ge=1)  # sections given to the answer prompt (all reads are kept)


# -- actions --------------------------------------------------------------------------------------------


class KeywordSearch(ToolAction):
    tool: Literal["search"]
    keywords: str = Field(max_length=QUERY_CHARS, description="words the section should contain")


class ReadSection(ToolAction):
    tool: Literal["read"]
    section_id: str = Field(max_length=ID_CHARS, description="a section id from the table of contents or a search")


class Contents(ToolAction):
    tool: Literal["toc"]
    node: str = Field(max_length=ID_CHARS, description='"" for the top level, or a node name from an earlier listing')
    page: int = Field(description="1 for the first page")


NavigatorAction = Annotated[KeywordSearch | ReadSection | Contents | Finish, Field(discriminator="tool")]


class NavigatorStep(ActionStep):
    action: NavigatorAction


# -- the book -------------------------------------------------------------------------------------------


@dataclass
class _Node:
    children: dict[str, str] = field(default_factory=dict)  # display name -> node key
    sections: list[str] = field(default_factory=list)  # element ids, in source order
    size: int = 0  # sections below this node


def _components(e: Element) -> list[str]:
    where = e.path or e.id.split("#", 1)[0]
    return [c for c in where.split("/") if c] or [e.id]


class Book:
    """The source as a book: a tree of nodes (path components) whose leaves are sections."""

    def __init__(self, source: Source, *, toc_max_lines: int, snippet_chars: int, read_chars: int):
        self.sections: dict[str, Element] = {e.id: e for e in source.elements}
        self.toc_max_lines = toc_max_lines
        self.snippet_chars = snippet_chars
        self.read_chars = read_chars
        self.nodes: dict[str, _Node] = {"": _Node()}
        for e in source.elements:
            key = ""
            self.nodes[""].size += 1
            for comp in _components(e):
                child = f"{key}/{comp}" if key else comp
                self.nodes[key].children.setdefault(comp, child)
                node = self.nodes.setdefault(child, _Node())
                node.size += 1
                key = child
            self.nodes[key].sections.append(e.id)
        self._ids = list(self.sections)
        self._tiebreak = {eid: i for i, eid in enumerate(sorted(self._ids))}
        self.bm25 = SparseBM25([tokenize(e.title + "\n" + e.text) for e in source.elements])

    # -- table of contents -----------------------------------------------------------------------
    def _items(self, key: str) -> list[str]:
        node = self.nodes[key]
        items = [f"- {name}/ ({self.nodes[k].size} section{'s' if self.nodes[k].size != 1 else ''})"
                 for name, k in node.children.items()]
        return items + [f"- [{sid}] {self.sections[sid].title}" for sid in node.sections]

    def _expanded(self, key: str, depth: int, limit: int) -> list[str] | None:
        """The full listing under ``key`` (indented), or None once it exceeds ``limit`` lines."""
        node, out, pad = self.nodes[key], [], "  " * depth
        for name, k in node.children.items():
            out.append(f"{pad}- {name}/")
            sub = self._expanded(k, depth + 1, limit - len(out))
            if sub is None:
                return None
            out.extend(sub)
            if len(out) > limit:
                return None
        out.extend(f"{pad}- [{sid}] {self.sections[sid].title}" for sid in node.sections)
        return None if len(out) > limit else out

    def toc(self, node: str, page: int) -> Observation:
        key = normalise_ws(node).strip("/")
        if key not in self.nodes:
            return Observation(f'no node "{node}" in the table of contents; use "" for the top level or a name '
                               "from a listing", ok=False, kind="reject")
        label = f'"{key}"' if key else "the top level"
        full = self._expanded(key, 0, self.toc_max_lines)
        if full is not None:
            return Observation(f"contents of {label} ({self.nodes[key].size} sections):\n" + "\n".join(full), kind="toc")
        items = self._items(key)
        pages = max(1, -(-len(items) // self.toc_max_lines))
        p = min(max(page, 1), pages)
        shown = items[(p - 1) * self.toc_max_lines: p * self.toc_max_lines]
        more = f"\n(page {p} of {pages}; ask for page {p + 1} for more)" if p < pages else \
            (f"\n(page {p} of {pages})" if pages > 1 else "")
        return Observation(f"contents of {label} ({self.nodes[key].size} sections; open a node with toc):\n"
                           + "\n".join(shown) + more, kind="toc")

    # -- keyword search and reading --------------------------------------------------------------
    def search(self, keywords: str, k: int) -> Observation:
        tokens = tokenize(keywords)
        if not tokens:
            return Observation("search needs at least one keyword", ok=False, kind="reject")
        matched = np.zeros(len(self._ids), dtype=bool)
        scores = self.bm25.get_scores(tokens, matched)
        ranked = sorted(np.flatnonzero(matched).tolist(), key=lambda i: (-scores[i], self._tiebreak[self._ids[i]]))
        hits, lines = [], [f'search "{snippet(keywords, 80)}": {min(k, len(ranked))} section(s)']
        for i in ranked[:k]:
            e = self.sections[self._ids[i]]
            line = self._best_line(e.text, set(tokens))
            hits.append(Evidence(element_id=e.id, title=e.title, text=line, score=float(scores[i])))
            lines.append(f"- [{e.id}] {e.title}: {line}")
        if not ranked:
            lines.append("no section contains these keywords")
        return Observation("\n".join(lines), kind="search", hits=hits)

    def _best_line(self, text: str, tokens: set[str]) -> str:
        best, best_n = "", -1
        for ln in text.splitlines():
            n = len(tokens & set(tokenize(ln)))
            if n > best_n:
                best, best_n = ln, n
        return snippet(best, self.snippet_chars)

    def read(self, section_id: str) -> Observation:
        e = self.sections.get(section_id.strip())
        if e is None:
            return Observation(f"no section with id [{section_id}]; ids appear in the table of contents and in "
                               "search results", ok=False, kind="reject")
        body = e.text if len(e.text) <= self.read_chars else e.text[: self.read_chars] + " ... [section cut here]"
        return Observation(f"read [{e.id}] {e.title}\n{body}", kind="read",
                           read=Evidence(element_id=e.id, title=e.title, text=body))


# -- the agent loop -------------------------------------------------------------------------------------

NAV_SYSTEM = """You answer a question by studying a source organised like a book: documents divided into sections. Each round, take exactly one action:
- toc: the table of contents below a node ("" for the top level, or a node name from an earlier listing), one page at a time;
- search: the sections whose text contains your keywords (the best {k}, each with its id and a matching line);
- read: the complete text of one section, by id;
- answer: stop studying; the answer is then written from the sections you read.
Start from the table of contents to find your way. A search line only points to a section: read the section before relying on it. Do not repeat a search; after two searches that turn up nothing useful, go back to the table of contents or answer. You have at most {rounds} rounds."""


def navigator_messages(question: str, ep: Episode, cfg: NavigatorConfig,
                       history_chars: int | None = None) -> list[dict[str, str]]:
    chars = cfg.history_chars if history_chars is None else history_chars
    parts = [f"Question: {question.strip()}"]
    if ep.steps:
        parts.append("Your study so far:\n" + "\n\n".join(render_steps(ep.steps, label="Round", budget_chars=chars)))
    parts.append(f"Round {ep.actions + 1} of {cfg.max_rounds}. Choose the next action.")
    return [{"role": "system", "content": NAV_SYSTEM.format(k=cfg.search_k, rounds=cfg.max_rounds)},
            {"role": "user", "content": "\n\n".join(parts)}]


async def navigate(question: str, book: Book, ctx: Context, cfg: NavigatorConfig) -> Episode:
    """Study rounds until the agent answers, the round limit is reached, or a step call fails."""

    async def next_step(ep: Episode) -> Any:
        messages = await fit_history(ctx, lambda chars: navigator_messages(question, ep, cfg, chars),
                                     cfg.history_chars, cfg.step_max_tokens)
        return await ctx.llm.structured(messages, NavigatorStep, stage="navigate_step", max_tokens=cfg.step_max_tokens)

    def act(action: Any) -> Observation:
        if isinstance(action, KeywordSearch):
            return book.search(action.keywords, cfg.search_k)
        if isinstance(action, ReadSection):
            return book.read(action.section_id)
        assert isinstance(action, Contents)
        return book.toc(action.node, action.page)

    return await act_until_done(cfg.max_rounds, next_step, act)


# -- the method -----------------------------------------------------------------------------------------


class Navigator(Method):
    """An agent that studies the source through a table of contents, keyword search and section reads.

    Parallel stages and chains: learning makes no model calls (the table of contents is built from the
    source); at test time each task is a chain of navigation steps (each step reads what the previous
    one chose), and tasks run at once."""

    name = "navigator"
    version = "2"  # 2: step prompts fit the window in the local model's own tokens
    Config = NavigatorConfig
    uses_guidance = False
    description = "an agent with table-of-contents, keyword-search and read-section tools; no build phase"
    deviations: ClassVar[list[str]] = [
        "The run's model is used as is; the paper RL-trains the navigating policy.",
        "Actions are schema-constrained JSON steps (one per round), not native tool calls.",
        ("The answer is written by the shared answer prompt from the sections read (then the search lines seen), "
         "also when the round limit is reached (the paper's terminal round)."),
        ("Reads show at most read_chars characters of a section; older observations are shortened past "
         "history_chars so the loop fits small context windows (a smaller cap for a step whose prompt would "
         "overflow, when the solver counts tokens exactly)."),
        "Round limit 8 is our default (not stated in the part of the paper we have).",
    ]

    async def learn(self, source: Source, guidance: list[Task], ctx: LearnContext) -> dict[str, Any]:
        cfg: NavigatorConfig = self.config  # type: ignore[assignment]
        book = Book(source, toc_max_lines=cfg.toc_max_lines, snippet_chars=cfg.snippet_chars,
                    read_chars=cfg.read_chars)
        stats = {"n_sections": len(book.sections), "n_toc_nodes": len(book.nodes) - 1, "build_calls": 0}
        (ctx.workdir / MANIFEST_FILE).write_text(json.dumps(
            {"source": source.id, "source_fingerprint": source.fingerprint, "note": "no build phase", **stats},
            indent=1, ensure_ascii=False) + "\n")
        return stats

    def load(self, artifact_dir: Path, ctx: Context) -> Book:
        cfg: NavigatorConfig = self.config  # type: ignore[assignment]
        return Book(ctx.source, toc_max_lines=cfg.toc_max_lines, snippet_chars=cfg.snippet_chars,
                    read_chars=cfg.read_chars)

    async def answer(self, task: Task, state: Book, ctx: Context) -> Answer:
        cfg: NavigatorConfig = self.config  # type: ignore[assignment]
        ep = await navigate(task.question, state, ctx, cfg)
        meta = ep.metadata()
        meta.pop("entries_used", None)  # the navigator learns nothing
        meta["tocs"] = sum(o.kind == "toc" for _, o in ep.steps)
        if ep.error:
            return Answer(text="", failed=True, failure_reason=f"navigator step failed: {ep.error}", metadata=meta)
        ans = await ctx.solve(task, ep.evidence(cfg.max_evidence))
        ans.metadata.update(meta)
        return ans
