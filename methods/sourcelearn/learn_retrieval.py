"""Learning-time retrieval: what a study action and a diagnosis read, with settings of their own.

Learning never reads the task-time ``top_k`` (Figure 5a varies it down to 0, and one MS is shared by
every variant of a source), so study and diagnosis retrieve with the official learning settings of
``SourceLearnConfig`` (``deepen_k``, ``connect_k``, ``task_evidence_k``, ``inspect_*``, ``code_*``), as the
official ``inspect_source`` does:

* tiers: ``inspect_cand_mult`` x k candidates of the Hybrid RAG ranking, at most ``per_file_cap`` per
  file (self-study: ``PER_FILE_CAP`` for every source, as the official self-study retriever; diagnosis:
  the task retriever's cap, 3 for code and none for documents); the
  first tier whose files hold at least ``inspect_min_hits`` of the candidates supplies the best k of
  those (tier ``hint``: the files a guidance task's labels or reference point to; tier ``scoped``: the
  files of the entities a study action names); otherwise the best k of all candidates (``global``);
* code windows: the first ``code_expand_hits`` top-level symbol hits are shown as their window, the
  symbol itself, the functions, classes and constants of its module it reaches (transitively), and
  the classes it imports from other modules of its top-level folder; windows together are capped at
  ``code_window_chars``. Other hits are shown as their first 1,200 characters (the retrieval excerpt).

A hit's shown text is returned with it, so the reading prompt shows exactly what was retrieved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sourcebench.harness.data import Element, Source, Task
from sourcebench.harness.retrieval import DEFAULT_CANDIDATES, HybridIndex, per_file_cap_for
from sourcebench.methods.evidence import gold_document_elements

from .code_window import WINDOW_CHARS, closure_window

if TYPE_CHECKING:
    from .config import SourceLearnConfig

PER_FILE_CAP = 3  # the official retriever's default cap, which self-study uses for every source (retrieval.py)
EXCERPT_CHARS = 1200  # a hit that is not expanded shows its retrieval excerpt (official element excerpt)
_PATH = re.compile(r"[\w./-]+\.(?:py|md|rst|txt)(?::\d+(?:-\d+)?)?")  # file paths a reference may name


@dataclass(frozen=True)
class Shown:
    """One retrieved element and the text a learning prompt shows for it."""

    element_id: str
    text: str


@dataclass(frozen=True)
class Found:
    items: list[Shown]
    tier: str  # hint | scoped | global


def file_of(el: Element) -> str:
    return el.path or el.id.split("#", 1)[0]


def hint_files(task: Task, source: Source) -> set[str]:
    """Where a guidance task says to look: the files of its labelled gold elements, else the files its
    reference names (official ``evidence_hint``: gold documents, else file paths in the reference)."""
    gold = [source.element(i) for i in sorted(gold_document_elements(task, source))]
    files = {file_of(e) for e in gold if e is not None}
    if files:
        return files
    ref = task.reference if isinstance(task.reference, str) else ""
    named = sorted({m.split(":")[0] for m in _PATH.findall(ref)})[:8]
    if not named:
        return set()
    out = set()
    for f in {file_of(e) for e in source.elements}:
        for h in named:
            if f == h or f.endswith("/" + h) or _stem(f) == _stem(h) or h in f:
                out.add(f)
    return out


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name


def tiered_search(index: HybridIndex, source: Source, query: str, k: int, cfg: SourceLearnConfig, *,
                  hint: frozenset[str] | set[str] = frozenset(),
                  scoped: frozenset[str] | set[str] = frozenset(), per_file_cap: int | None | str = "source") -> Found:
    """The best ``k`` elements of the first tier that holds ``inspect_min_hits`` candidates, with their
    shown text (code windows expanded). ``hint`` and ``scoped`` are sets of file paths; ``per_file_cap``:
    hits per file, "source" for the source kind's task-time cap (``per_file_cap_for``)."""
    if k <= 0:
        return Found([], "global")
    n = max(1, cfg.inspect_cand_mult * k)
    cap = per_file_cap_for(source.kind) if per_file_cap == "source" else per_file_cap
    cands = index.search(query, k=n, per_file_cap=cap,  # type: ignore[arg-type]
                         candidates=max(DEFAULT_CANDIDATES, n))
    els = [(c.element_id, source.element(c.element_id)) for c in cands]
    els = [(i, e) for i, e in els if e is not None]
    hits, tier = None, "global"
    for name, files in (("hint", hint), ("scoped", scoped)):
        if files:
            inside = [(i, e) for i, e in els if file_of(e) in files][:k]
            if len(inside) >= cfg.inspect_min_hits:
                hits, tier = inside, name
                break
    if hits is None:
        hits = els[:k]
    return Found(expand_code_windows(source, [e for _, e in hits], cfg), tier)


# -- code windows ------------------------------------------------------------------------------------
def code_window(source: Source, symbol: Element, max_chars: int = WINDOW_CHARS) -> list[Shown]:
    """A top-level symbol's closure window (``code_window.closure_window``) over the Python files of its
    top-level folder (the official inspection's region), as shown pieces; [] when it cannot be built."""
    path = file_of(symbol)
    top = path.split("/", 1)[0] + "/" if "/" in path else ""
    scope = (e.path for e in source.elements if e.kind == "file" and e.path.endswith(".py")
             and (not top or e.path.startswith(top)))  # read only when the symbol imports a name
    return [Shown(eid, text) for eid, _, text in closure_window(source, symbol, scope, max_chars)]


def expand_code_windows(source: Source, hits: Iterable[Element], cfg: SourceLearnConfig) -> list[Shown]:
    """The hits with their shown text: the first ``code_expand_hits`` top-level symbols replaced by their
    windows (pieces not among the hits follow them), within ``code_window_chars`` in all."""
    hits = list(hits)
    shown: dict[str, list[str]] = {h.id: [h.excerpt(EXCERPT_CHARS)] for h in hits}
    symbols = {h.id for h in hits if h.kind == "symbol"}
    expanded: set[str] = set()
    extra: dict[str, list[str]] = {}
    spent = n = 0
    for h in hits:
        if n >= cfg.code_expand_hits:
            break
        if h.kind != "symbol" or "." in h.title:
            continue
        window = code_window(source, h)
        if not window:
            continue
        n += 1
        for piece in window:
            if spent + len(piece.text) > cfg.code_window_chars:
                break
            spent += len(piece.text)
            if piece.element_id not in shown:
                texts = extra.setdefault(piece.element_id, [])
                if piece.text not in texts:  # a helper two windows reach is shown once
                    texts.append(piece.text)
            elif piece.element_id in symbols and piece.element_id not in expanded:
                shown[piece.element_id] = [piece.text]  # a hit's excerpt gives way to its whole text
                expanded.add(piece.element_id)
            elif piece.element_id not in symbols:
                shown[piece.element_id].append(piece.text)  # a constant of a file that is itself a hit
    out = [Shown(i, "\n\n".join(t)) for i, t in shown.items()]
    return out + [Shown(i, "\n\n".join(t)) for i, t in extra.items()]
