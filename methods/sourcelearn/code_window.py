"""The closure window of a code symbol (official ``draft/induce.py::build_window``), one function for
construction's entity reading and for learning-time retrieval (the official inspection expands a
retrieved symbol with the same function).

A window is the symbol's own code, the same-module functions, classes and constants it reaches
(transitively, breadth first), then the classes it imports that other modules of its scope define, one
hop; each piece whole, as ``ast.get_source_segment`` cuts it, while the total stays within
``max_chars``. The scope is the caller's: construction passes its region's files, retrieval the files
of the symbol's top-level folder (the official region argument).

Each file is parsed once per content (cached by element id and fingerprint) and keeps only the text of
its top-level definitions and constants, not its syntax tree.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from sourcebench.harness.data import Element, Source

WINDOW_CHARS = 16_000  # official WINDOW_CHARS: one symbol's window, full text

Piece = tuple[str, str, str]  # (element id, label "path:name", full text)


@dataclass(frozen=True)
class _Def:
    text: str
    names: tuple[str, ...]  # names the definition uses, in first-use order
    is_class: bool


@dataclass(frozen=True)
class _Module:
    defs: dict[str, _Def]  # top-level functions and classes
    consts: dict[str, str]  # top-level assignments: name -> source text
    imports: frozenset[str]  # names bound by ``from x import name``


_MODULES: dict[tuple[str, str], _Module | None] = {}  # (element id, fingerprint) -> parsed module
_MODULES_KEPT = 4096
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # the parser's lines (no split at form feeds)


def _names(node: ast.AST) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))


def _segment(lines: list[str], node: ast.AST) -> str:
    """``ast.get_source_segment(text, node)`` over lines split once per file (it splits the whole file,
    character by character, on every call)."""
    first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined, operator]
    start, end = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    if first == last:
        return lines[first].encode()[start:end].decode()
    return "".join([lines[first].encode()[start:].decode(), *lines[first + 1:last],
                    lines[last].encode()[:end].decode()])


def parse_module(el: Element) -> _Module | None:
    """The top-level definitions of a Python file element; None when it does not parse."""
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
        lines = _LINE.findall(el.text)
        defs: dict[str, _Def] = {}
        consts: dict[str, str] = {}
        imports: set[str] = set()
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs[n.name] = _Def(_segment(lines, n), _names(n), isinstance(n, ast.ClassDef))
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    if isinstance(t, ast.Name):
                        consts[t.id] = _segment(lines, n)
            elif isinstance(n, ast.ImportFrom) and n.module:
                imports.update(a.asname or a.name for a in n.names)
        mod = _Module(defs, consts, frozenset(imports))
    if len(_MODULES) >= _MODULES_KEPT:
        _MODULES.pop(next(iter(_MODULES)))
    _MODULES[key] = mod
    return mod


def _python_file(source: Source, path: str) -> Element | None:
    el = source.element(path)
    return el if el is not None and el.kind == "file" and path.endswith(".py") else None


def closure_window(source: Source, symbol: Element, scope: Iterable[str],
                   max_chars: int = WINDOW_CHARS) -> list[Piece]:
    """[(element id, label, full text)] of a top-level symbol's window; ``scope``: the other files, in
    order, whose classes an import may reach. [] when the symbol is not a top-level definition of a
    parsable module. A piece is named by its element id, a constant by its file's id. A symbol longer
    than the window contributes no piece of its own (officially, too)."""
    path = symbol.path or symbol.id.split("#", 1)[0]
    file_el = _python_file(source, path)
    mod = parse_module(file_el) if file_el is not None else None
    if mod is None or symbol.kind != "symbol" or symbol.title not in mod.defs:
        return []
    pieces: list[Piece] = []
    size = 0

    def add(p: str, name: str | None, text: str) -> bool:
        nonlocal size
        if not text or size + len(text) > max_chars:
            return False
        cand = f"{p}#{name}" if name else p
        pieces.append((cand if source.element(cand) is not None else p, f"{p}:{name or '(module)'}", text))
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
        if not add(path, cur, d.text):
            break
        for used in d.names:
            if used in mod.defs:
                queue.append(used)
            elif used in mod.consts and used not in done:
                done.add(used)
                add(path, None, mod.consts[used])
    wanted = sorted({u for n in done if n in mod.defs for u in mod.defs[n].names if u in mod.imports})
    if wanted:
        for other in scope:
            f2 = _python_file(source, other) if other != path else None
            m2 = parse_module(f2) if f2 is not None else None
            if m2 is None:
                continue
            for w in wanted:
                if w in m2.defs and m2.defs[w].is_class:
                    add(other, w, m2.defs[w].text)
    return pieces
