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

import ast
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sourcebench.harness.data import Element, Source, Task
from sourcebench.harness.retrieval import DEFAULT_CANDIDATES, HybridIndex, per_file_cap_for
from sourcebench.methods.evidence import gold_document_elements

if TYPE_CHECKING:
    from .config import SourceLearnConfig

PER_FILE_CAP = 3  # the official retriever's default cap, which self-study uses for every source (retrieval.py)
EXCERPT_CHARS = 1200  # a hit that is not expanded shows its retrieval excerpt (official element excerpt)
WINDOW_CHARS = 16_000  # one symbol's window (official entity-centred window cap)
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
@dataclass(frozen=True)
class _Def:
    text: str
    names: tuple[str, ...]  # names the definition uses, in first-use order
    is_class: bool


@dataclass(frozen=True)
class _Module:
    defs: dict[str, _Def]  # top-level functions and classes
    consts: dict[str, str]  # top-level assignments: name -> source lines
    imports: frozenset[str]  # names bound by ``from x import name``


_MODULES: dict[tuple[str, str], _Module | None] = {}  # (path, fingerprint) -> parsed module
_MODULES_KEPT = 4096


def _names(node: ast.AST) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))


def _module(el: Element) -> _Module | None:
    """The top-level definitions of a Python file element (None when it does not parse)."""
    key = (el.id, el.fingerprint)
    if key in _MODULES:
        return _MODULES[key]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(el.text)
    except (SyntaxError, ValueError, RecursionError):
        tree = None
    mod = None
    if tree is not None:
        lines = el.text.splitlines()

        def seg(node: ast.AST) -> str:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])  # type: ignore[attr-defined]
            return "\n".join(lines[start - 1: node.end_lineno])  # type: ignore[attr-defined]

        defs: dict[str, _Def] = {}
        consts: dict[str, str] = {}
        imports: set[str] = set()
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[n.name] = _Def(seg(n), _names(n), isinstance(n, ast.ClassDef))
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    if isinstance(t, ast.Name):
                        consts[t.id] = seg(n)
            elif isinstance(n, ast.ImportFrom) and n.module:
                imports.update(a.asname or a.name for a in n.names)
        mod = _Module(defs, consts, frozenset(imports))
    if len(_MODULES) >= _MODULES_KEPT:
        _MODULES.pop(next(iter(_MODULES)))
    _MODULES[key] = mod
    return mod


def _python_files(source: Source) -> list[Element]:
    return [e for e in source.elements if e.kind == "file" and e.path.endswith(".py")]


def code_window(source: Source, symbol: Element, max_chars: int = WINDOW_CHARS) -> list[Shown]:
    """A top-level symbol with the same-module code it reaches and the classes it imports from other
    modules of its top-level folder, in that order, while the total stays within ``max_chars``.
    Pieces are named by their element id (a constant by its file's id); [] when it cannot be built."""
    path = file_of(symbol)
    file_el = source.element(path)
    mod = _module(file_el) if file_el is not None else None
    if mod is None or symbol.title not in mod.defs:
        return []
    pieces: list[Shown] = []
    size = 0

    def eid(f: str, name: str | None) -> str:
        return f"{f}#{name}" if name and source.element(f"{f}#{name}") is not None else f

    def add(element_id: str, text: str) -> bool:
        nonlocal size
        if not text or size + len(text) > max_chars:
            return False
        pieces.append(Shown(element_id, text))
        size += len(text)
        return True

    queue, done = [symbol.title], set()
    while queue:
        cur = queue.pop(0)
        if cur in done:
            continue
        done.add(cur)
        d = mod.defs.get(cur)
        if d is None:
            continue
        if not add(eid(path, cur), d.text):
            break
        for used in d.names:
            if used in mod.defs:
                queue.append(used)
            elif used in mod.consts and used not in done:
                done.add(used)
                add(path, mod.consts[used])
    wanted = sorted({u for n in done if n in mod.defs for u in mod.defs[n].names if u in mod.imports})
    if wanted and pieces:
        top = path.split("/", 1)[0] + "/" if "/" in path else ""
        for f2 in _python_files(source):
            if f2.path == path or (top and not f2.path.startswith(top)):
                continue
            other = _module(f2)
            if other is None:
                continue
            for w in wanted:
                if w in other.defs and other.defs[w].is_class:
                    add(eid(f2.path, w), other.defs[w].text)
    return pieces


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
