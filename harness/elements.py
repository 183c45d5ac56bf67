"""Cut raw material (documents, stories, code trees) into ``Element``s with stable ids.

Ids are what learned artifacts anchor claims to, so they must depend only on the material itself:
``path#heading-slug`` for sections, ``path#Class.method`` for code symbols, ``path#part-N`` for
unstructured text. Every splitter is deterministic and never emits an element with empty text.
"""

from __future__ import annotations

import ast
import fnmatch
import logging
import os
import re
import warnings
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from .data import Element, Source, SourceKind
from .errors import DataError

log = logging.getLogger(__name__)

DEFAULT_EXCLUDE_DIRS = (".git", "__pycache__", "node_modules", ".tox", ".venv", "build", "dist")

# Structured-but-not-prose files: kept whole, one element each.
_CODE_EXTS = (
    ".toml .cfg .ini .yaml .yml .json .jsonl .js .mjs .cjs .ts .tsx .jsx .c .h .cc .cpp .cxx .hpp .hh "
    ".java .go .rs .rb .sh .bash .zsh .ps1 .bat .css .scss .less .xml .sql .r .jl .lua .php .kt .swift "
    ".scala .pl .m .mm .cs .proto .pyx .pxd .ipynb .lock .env .gradle .cmake .mk .tex .bib .csv .tsv "
    ".vue .svelte .dart .hs .ml .ex .exs .erl .clj .el .vim .nix .tf .graphql .gql"
)
CODE_EXTS = frozenset(_CODE_EXTS.split())
CODE_NAMES = frozenset({"Makefile", "Dockerfile", "CMakeLists.txt", "Jenkinsfile", "Gemfile", "Rakefile"})


# ---------------------------------------------------------------------------------------------
# Shared section machinery
# ---------------------------------------------------------------------------------------------


class _Sec(NamedTuple):
    level: int  # 0 = text before the first heading
    heading: str
    text: str  # heading line(s) + body
    body: str  # body only, to decide whether the section is empty
    lineno: int | None = None


def slugify(heading: str) -> str:
    """GitHub-style anchor: lowercase, drop punctuation, spaces to hyphens."""
    heading = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) renders as text
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    return slug or "section"


def _unique(eid: str, seen: set[str]) -> str:
    """Duplicate ids get -1, -2, ... in order of appearance (GitHub's rule)."""
    out, n = eid, 0
    while out in seen:
        n += 1
        out = f"{eid}-{n}"
    seen.add(out)
    return out


def _chunks(text: str, max_chars: int) -> list[str]:
    """Greedy packing of blank-line paragraphs; an oversized paragraph is cut at lines/spaces."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    pieces: list[str] = []
    for para in re.split(r"\n[ \t]*\n", text):
        para = para.strip()
        while len(para) > max_chars:
            cut = para.rfind("\n", 0, max_chars + 1)
            if cut <= 0:
                cut = para.rfind(" ", 0, max_chars + 1)
            if cut <= 0:
                cut = max_chars
            pieces.append(para[:cut].rstrip())
            para = para[cut:].lstrip()
        if para:
            pieces.append(para)
    chunks: list[str] = []
    for p in pieces:
        if chunks and len(chunks[-1]) + 2 + len(p) <= max_chars:
            chunks[-1] += "\n\n" + p
        else:
            chunks.append(p)
    return chunks


def _assemble(path: str, secs: list[_Sec], max_chars: int | None = None) -> list[Element]:
    """Turn sections into elements: heading-path titles, unique slug ids, empty sections skipped.

    Only kept sections consume slugs, so a table of contents of bare headings does not shift the
    ids of the real sections. With ``max_chars``, a longer section is cut into ``-part-N`` pieces.
    """
    out: list[Element] = []
    seen: set[str] = set()
    stack: list[tuple[int, str]] = []
    for sec in secs:
        if sec.level == 0:
            eid, title = path, path
            if not sec.text.strip():
                continue
        else:
            while stack and stack[-1][0] >= sec.level:
                stack.pop()
            stack.append((sec.level, sec.heading))
            if not sec.body.strip():
                continue
            eid, title = f"{path}#{slugify(sec.heading)}", " > ".join(h for _, h in stack)
        meta: dict[str, Any] = {"level": sec.level}
        if sec.lineno is not None:
            meta["lineno"] = sec.lineno
        text = sec.text.strip()
        if max_chars is None or len(text) <= max_chars:
            out.append(Element(id=_unique(eid, seen), title=title, text=text, path=path, metadata=meta))
            continue
        base = f"{eid}-part" if sec.level else f"{path}#part"
        for n, chunk in enumerate(_chunks(text, max_chars), start=1):
            out.append(
                Element(
                    id=_unique(f"{base}-{n}", seen),
                    title=f"{title} (part {n})",
                    text=chunk,
                    path=path,
                    metadata={**meta, "part": n},
                )
            )
    return out


def _lines(text: str) -> list[str]:
    """Lines with any newline convention, so a stray \\r never ends up in a heading or slug."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _split_at(
    path: str, lines: list[str], heads: list[tuple[int, int, int, str]], max_chars: int | None = None
) -> list[Element]:
    """Sections from heading positions given as (start line, heading line count, level, title)."""
    secs = [_Sec(0, "", "\n".join(lines[: heads[0][0] if heads else len(lines)]), "")]
    for i, (start, n_head, level, title) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(lines)
        secs.append(
            _Sec(level, title, "\n".join(lines[start:end]), "\n".join(lines[start + n_head : end]), start + 1)
        )
    return _assemble(path, secs, max_chars)


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------

_MD_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def split_markdown(path: str, text: str) -> list[Element]:
    """Sections at ATX headings; ``#`` lines inside fenced code blocks are code, not headings."""
    lines = _lines(text)
    heads, fence = [], None
    for i, line in enumerate(lines):
        m = _MD_FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        h = _MD_HEADING.match(line)
        if h and (h.group(2) or "").strip():
            heads.append((i, 1, len(h.group(1)), h.group(2).strip()))
    return _split_at(path, lines, heads)


_RST_ADORN = re.compile(r"^([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])\1+\s*$")


def split_rst(path: str, text: str) -> list[Element]:
    """Sections at reST titles; levels follow the order in which adornment styles first appear."""
    lines = _lines(text)
    heads, styles, i = [], {}, 0

    def adorn(j: int) -> str | None:
        return lines[j].rstrip() if 0 <= j < len(lines) and _RST_ADORN.match(lines[j]) else None

    while i < len(lines):
        over, title = adorn(i), lines[i + 1] if i + 1 < len(lines) else ""
        under = adorn(i + 2)
        if (
            over
            and over == under
            and title.strip()
            and not adorn(i + 1)
            and len(over) >= len(title.strip())
            and (i == 0 or not lines[i - 1].strip())
        ):
            level = styles.setdefault((over[0], True), len(styles) + 1)
            heads.append((i, 3, level, title.strip()))
            i += 3
            continue
        line, under = lines[i], adorn(i + 1)
        if (
            under
            and line.strip()
            and not line[0].isspace()
            and not adorn(i)
            and len(under) >= max(len(line.rstrip()), 2)
            and (i == 0 or not lines[i - 1].strip())
        ):
            level = styles.setdefault((under[0], False), len(styles) + 1)
            heads.append((i, 2, level, line.strip()))
            i += 2
            continue
        i += 1
    return _split_at(path, lines, heads)


class _HTMLSections(HTMLParser):
    """Collects (level, heading, body) sections; tag-free text with block tags as line breaks."""

    _BLOCK = (
        "p div br li ul ol tr table section article header footer nav aside pre blockquote dl dt dd "
        "h1 h2 h3 h4 h5 h6 hr form fieldset figure figcaption main details summary"
    )
    BLOCK = frozenset(_BLOCK.split())
    SKIP = frozenset({"script", "style", "template", "noscript"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.secs: list[list[Any]] = [[0, "", []]]  # level, heading, body parts
        self.heading: list[str] | None = None
        self.skip = self.pre = 0

    def _emit(self, s: str, raw: bool = False) -> None:
        buf = self.heading if self.heading is not None else self.secs[-1][2]
        if raw and (not buf or buf[-1].endswith("\n")):
            return  # one line break per block boundary
        if not (self.pre or raw):
            s = re.sub(r"\s+", " ", s)
            if not buf or buf[-1].endswith("\n"):
                s = s.lstrip()
        if s:
            buf.append(s)

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self.SKIP:
            self.skip += 1
        elif re.fullmatch(r"h[1-6]", tag) and self.heading is None:
            self.secs.append([int(tag[1]), "", []])
            self.heading = []
        elif tag in self.BLOCK:
            self._emit("\n", raw=True)
        if tag == "pre":
            self.pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif re.fullmatch(r"h[1-6]", tag) and self.heading is not None:
            self.secs[-1][1] = " ".join("".join(self.heading).split())
            self.heading = None
        elif tag in self.BLOCK:
            self._emit("\n", raw=True)
        if tag == "pre":
            self.pre = max(0, self.pre - 1)

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self._emit(data)


def split_html(path: str, text: str) -> list[Element]:
    """Sections at <h1>-<h6>, with tags stripped (stdlib parser: no dependency, tolerant of bad HTML)."""
    p = _HTMLSections()
    p.feed(text)
    p.close()
    if p.heading is not None:  # unclosed heading at end of input
        p.secs[-1][1] = " ".join("".join(p.heading).split())

    def clean(parts: list[str]) -> str:
        s = "\n".join(line.rstrip() for line in "".join(parts).split("\n"))
        return re.sub(r"\n{3,}", "\n\n", s).strip()

    secs = []
    for level, heading, parts in p.secs:
        if level and not heading:
            heading = "section"
        body = clean(parts)
        secs.append(_Sec(level, heading, f"{heading}\n\n{body}" if level else body, body))
    return _assemble(path, secs)


def split_plaintext(path: str, text: str, max_chars: int = 4000) -> list[Element]:
    """No headings to anchor to: paragraph-aligned chunks of at most ``max_chars``, ids ``path#part-N``."""
    return [
        Element(id=f"{path}#part-{n}", title=f"{path} (part {n})", text=c, path=path, metadata={"part": n})
        for n, c in enumerate(_chunks(text, max_chars), start=1)
    ]


_NUM = (
    r"(?:(?-i:[IVXLCDM]+)|\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen"
    r"|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty)"
)
_STORY_HEADS = [
    (1, re.compile(rf"^\s*(?:book|part|volume|act)\s+{_NUM}(?:[\s.:\-—–].{{0,60}})?$", re.IGNORECASE)),
    (2, re.compile(r"^\s*(?:prologue|epilogue)(?:[\s.:\-—–].{0,60})?$", re.IGNORECASE)),
    (2, re.compile(rf"^\s*chapter\s+{_NUM}(?:[\s.:\-—–].{{0,60}})?$", re.IGNORECASE)),
    (3, re.compile(rf"^\s*scene\s+{_NUM}(?:[\s.:\-—–].{{0,60}})?$", re.IGNORECASE)),
    (4, re.compile(r"^\s*(?:INT\.|EXT\.|INT\.?/EXT\.?|I/E\.?)\s+\S.{0,100}$")),
]


def split_story(path: str, text: str, max_chars: int | None = 1200) -> list[Element]:
    """Sections at chapter/book/act/scene headings (and INT./EXT. for scripts), else plain chunks.

    A heading must stand on its own line after a blank line, so prose that merely starts a line with
    "Chapter 3 ..." is not mistaken for one. Chapters longer than ``max_chars`` are cut into
    paragraph-aligned ``path#chapter-slug-part-N`` pieces (None keeps whole chapters). The default,
    1,200, is what the shared retrieval index indexes and a solver is shown of an element
    (``retrieval.EXCERPT_CHARS``): longer sections would leave the rest of their text unreachable.
    """
    lines = _lines(text)
    heads = []
    for i, line in enumerate(lines):
        if i and lines[i - 1].strip():
            continue
        for level, rx in _STORY_HEADS:
            if rx.match(line):
                heads.append((i, 1, level, line.strip()))
                break
    if not heads:
        return split_plaintext(path, text, max_chars or 4000)
    return _split_at(path, lines, heads, max_chars)


# ---------------------------------------------------------------------------------------------
# Code
# ---------------------------------------------------------------------------------------------


def split_python(path: str, text: str) -> list[Element]:
    """The whole file plus one element per top-level function/class and per method of those classes.

    Symbol text is the exact source lines, decorators included, so an anchor's fingerprint changes
    when a decorator does; ``lineno``/``end_lineno`` describe those lines. Nested functions stay
    inside their parent. A file that does not parse yields the file element alone.
    """
    if not text.strip():
        return []
    file_meta: dict[str, Any] = {"language": "python"}
    try:
        with warnings.catch_warnings():  # invalid escapes etc. are the file's business, not ours
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError) as e:
        file_meta["parse_error"] = f"{type(e).__name__}: {e}"
        tree = None
    out = [Element(id=path, title=path, text=text, path=path, kind="file", metadata=file_meta)]
    if tree is None:
        return out
    lines = text.splitlines(keepends=True)
    seen = {path}
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    def add(node: Any, qualname: str) -> None:
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        kind = "class" if isinstance(node, ast.ClassDef) else ("method" if "." in qualname else "function")
        out.append(
            Element(
                id=_unique(f"{path}#{qualname}", seen),
                title=qualname,
                text="".join(lines[start - 1 : node.end_lineno]).rstrip("\n"),
                path=path,
                kind="symbol",
                metadata={"lineno": start, "end_lineno": node.end_lineno, "symbol_type": kind},
            )
        )

    for node in tree.body:
        if isinstance(node, defs):
            add(node, node.name)
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(sub, f"{node.name}.{sub.name}")
    return out


def split_file(path: str, text: str) -> list[Element]:
    """Dispatch on the extension; unknown text is prose (plaintext), known code/config stays whole."""
    name = PurePosixPath(path).name
    ext = PurePosixPath(path).suffix.lower()
    if ext in (".md", ".markdown"):
        return split_markdown(path, text)
    if ext == ".rst":
        return split_rst(path, text)
    if ext in (".html", ".htm"):
        return split_html(path, text)
    if ext in (".py", ".pyi"):
        return split_python(path, text)
    if ext in CODE_EXTS or name in CODE_NAMES:
        if not text.strip():
            return []
        return [Element(id=path, title=path, text=text, path=path, kind="file", metadata={"ext": ext})]
    return split_plaintext(path, text)


# ---------------------------------------------------------------------------------------------
# Directory trees
# ---------------------------------------------------------------------------------------------


def _unsafe(path: str) -> bool:
    parts = re.split(r"[/\\]", path)
    return path.startswith(("/", "\\")) or bool(re.match(r"^[A-Za-z]:", path)) or ".." in parts


def _walk(
    root: Path,
    include: list[str] | None,
    exclude_dirs: tuple[str, ...] | list[str],
    max_file_bytes: int,
) -> tuple[list[Element], dict[str, Any]]:
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory")
    elements: list[Element] = []
    seen: dict[str, str] = {}
    n_files = 0
    skipped: dict[str, str] = {}
    files: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in exclude_dirs]
        files += [((Path(dirpath) / f).relative_to(root).as_posix(), Path(dirpath) / f) for f in filenames]
    for rel, full in sorted(files):  # one global order, independent of directory listing order
        if include and not any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(full.name, p) for p in include):
            continue
        if full.is_symlink() or not full.is_file():  # a link may point outside the root
            skipped[rel] = "symlink or special file"
            continue
        size = full.stat().st_size
        if size > max_file_bytes:
            log.warning("%s: skipped, %d bytes is over max_file_bytes=%d", rel, size, max_file_bytes)
            skipped[rel] = "too big"
            continue
        data = full.read_bytes()
        try:
            if b"\x00" in data:
                raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL byte")
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            skipped[rel] = "binary"
            continue
        text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        n_files += 1
        for el in split_file(rel, text):
            if _unsafe(el.id.split("#", 1)[0]) or _unsafe(el.path):
                raise DataError(f"{full}: element id {el.id!r} escapes the source root")
            if el.id in seen:
                raise DataError(f"{full}: element id {el.id!r} already produced by {seen[el.id]}")
            seen[el.id] = rel
            elements.append(el)
    if skipped:
        log.warning("%s: skipped %d file(s) (binary, too big or links)", root, len(skipped))
    return elements, {"n_files": n_files, "skipped_files": len(skipped), "skipped": skipped}


def load_tree(
    root: Path,
    *,
    include: list[str] | None = None,
    exclude_dirs: tuple[str, ...] | list[str] = DEFAULT_EXCLUDE_DIRS,
    max_file_bytes: int = 1_000_000,
) -> list[Element]:
    """Elements of every text file under ``root`` in sorted order, paths relative and POSIX.

    ``include`` holds glob patterns matched against the relative path or the file name. Binary
    (NUL byte or not UTF-8), oversized and symlinked files are skipped with a logged warning.
    """
    return _walk(root, include, exclude_dirs, max_file_bytes)[0]


def source_from_tree(
    source_id: str,
    root: Path,
    kind: SourceKind = "code",
    *,
    description: str = "",
    include: list[str] | None = None,
    exclude_dirs: tuple[str, ...] | list[str] = DEFAULT_EXCLUDE_DIRS,
    max_file_bytes: int = 1_000_000,
) -> Source:
    """A ``Source`` over a directory, recording what was read and what was skipped for provenance."""
    elements, info = _walk(Path(root), include, exclude_dirs, max_file_bytes)
    return Source(
        id=source_id,
        kind=kind,
        elements=elements,
        description=description,
        origin=str(root),
        metadata={"n_files": info["n_files"], "skipped_files": info["skipped_files"]},
    )


# ---------------------------------------------------------------------------------------------
# Non-overlapping pieces (one copy of each text)
# ---------------------------------------------------------------------------------------------


def _span(e: Element) -> tuple[int, int] | None:
    lo, hi = e.metadata.get("lineno"), e.metadata.get("end_lineno")
    return (lo, hi) if e.kind == "symbol" and isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi else None


def _file_pieces(file: Element, symbols: list[Element], runs: bool) -> list[Element] | None:
    """The file cut so that each line belongs to the innermost element whose span holds it; None when
    a symbol's text is not its lines of the file (then nothing is cut)."""
    lines = file.text.splitlines(keepends=True)  # as split_python cuts symbol text
    owners = [file, *sorted(symbols, key=lambda s: (_span(s)[0], -_span(s)[1]))]  # type: ignore[index]
    owner = [0] * len(lines)
    for k, sym in enumerate(owners[1:], start=1):
        lo, hi = _span(sym)  # type: ignore[misc]
        if hi > len(lines) or "".join(lines[lo - 1 : hi]).rstrip("\n") != sym.text:
            return None
        owner[lo - 1 : hi] = [k] * (hi - lo + 1)  # parents sort first: the innermost span wins
    spans: list[tuple[int, int, int]] = []  # (first line, end line, owner), 0-based half-open, in line order
    start = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or owner[i] != owner[start]:
            a, b = start, i
            while a < b and not lines[a].strip():  # blank lines at the edges of a run are dropped
                a += 1
            while b > a and not lines[b - 1].strip():
                b -= 1
            if a < b:
                spans.append((a, b, owner[start]))
            start = i
    groups: dict[int, list[tuple[int, int]]] = {}
    for a, b, k in spans:
        groups.setdefault(k, []).append((a, b))

    def piece(k: int, rs: list[tuple[int, int]]) -> Element:
        e = owners[k]
        if k and rs == [(_span(e)[0] - 1, _span(e)[1])]:  # type: ignore[index]
            return e  # a whole symbol: the element itself
        text = "\n".join("".join(lines[a:b]).rstrip("\n") for a, b in rs)
        meta = {**e.metadata, "piece_of": e.id, "lines": [[a + 1, b] for a, b in rs]}
        return Element(id=e.id, title=e.title, text=text, path=e.path, kind=e.kind, metadata=meta)

    if runs:
        return [piece(k, [(a, b)]) for a, b, k in spans]
    return [piece(k, groups[k]) for k in sorted(groups, key=lambda k: groups[k][0][0])]


def disjoint_pieces(elements: list[Element], *, runs: bool = False) -> list[Element]:
    """The source's text with each line once, for methods that read every element (RAPTOR, HippoRAG 2).

    A code file's elements overlap: the file holds its classes and functions, a class its methods. Each
    file with symbol elements is cut so that every line belongs to exactly one piece: the innermost
    element whose line span (``lineno``..``end_lineno``) holds it. A symbol without children is its own
    piece (the element itself). The lines an element keeps outside its children (a file's imports and
    module-level code, a class's header, docstring and attributes) become one piece with that element's
    id and title, its runs of lines joined by line breaks (``metadata["lines"]``: the runs, 1-based
    inclusive; blank lines at a run's edges are dropped); pieces are ordered by their first line. With
    ``runs`` each maximal run of lines is a piece of its own, so the pieces read as the file does, line
    for line (an element's id then recurs, once per run).

    Every other element (sections, parts, files without symbols) passes through unchanged, as does a
    file whose symbols are not exactly its lines (nothing is cut rather than cut wrongly).
    """
    files = {e.path: e for e in elements if e.kind == "file" and e.id == e.path}
    symbols: dict[str, list[Element]] = {}
    for e in elements:
        if e.path in files and _span(e) is not None:
            symbols.setdefault(e.path, []).append(e)
    cut = {p: _file_pieces(files[p], syms, runs) for p, syms in symbols.items()}
    out: list[Element] = []
    for e in elements:
        pieces = cut.get(e.path)
        if pieces is None:
            out.append(e)
        elif e is files[e.path]:
            out.extend(pieces)
        elif _span(e) is None:  # not part of the cut (a symbol is inside its file's pieces)
            out.append(e)
    return out
