"""Splitters must give stable, unique, non-empty elements; tree loading must be deterministic and safe."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from sourcebench.harness import elements as E
from sourcebench.harness.data import fingerprint
from sourcebench.harness.errors import DataError

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
PHANTOMWIKI = SHARED / "data/phantomwiki/seed1_people51_depth20/articles.json"


def ids(els):
    return [e.id for e in els]


def check_invariants(els):
    assert all(e.text.strip() for e in els)
    assert len(set(ids(els))) == len(els)


# --- markdown ------------------------------------------------------------------------------------

MD = """Intro before any heading.

# Guide

## Install
Run `pip install x`.

```bash
# not a heading
pip install x
```

## Install
Second install section.

### Step: one (fast)!
Do it.

~~~
## also not a heading
~~~

## Empty

## Usage ##
Use it.
"""


def test_markdown_headings_fences_and_duplicates():
    els = E.split_markdown("docs/guide.md", MD)
    check_invariants(els)
    assert ids(els) == [
        "docs/guide.md",
        "docs/guide.md#install",
        "docs/guide.md#install-1",
        "docs/guide.md#step-one-fast",
        "docs/guide.md#usage",
    ]
    by = {e.id: e for e in els}
    assert by["docs/guide.md"].text == "Intro before any heading."
    install = by["docs/guide.md#install"]
    assert install.title == "Guide > Install"
    assert install.text.startswith("## Install")
    assert "# not a heading" in install.text and install.kind == "section" and install.path == "docs/guide.md"
    step = by["docs/guide.md#step-one-fast"]
    assert step.title == "Guide > Install > Step: one (fast)!"
    assert "## also not a heading" in step.text
    assert by["docs/guide.md#usage"].title == "Guide > Usage"  # closing #s stripped, stack popped


def test_slugify_github_style():
    assert E.slugify("Hello, World!") == "hello-world"
    assert E.slugify("`foo()` and [link](http://x.y)") == "foo-and-link"
    assert E.slugify("snake_case Über") == "snake_case-über"
    assert E.slugify("!!!") == "section"


def test_markdown_crlf():
    els = E.split_markdown("w.md", "# Title\r\n\r\nBody\r\n")
    assert ids(els) == ["w.md#title"] and els[0].title == "Title"


def test_markdown_without_headings_and_empty():
    assert ids(E.split_markdown("a.md", "just text\n")) == ["a.md"]
    assert E.split_markdown("a.md", "  \n\n") == []


# --- reStructuredText ----------------------------------------------------------------------------

RST = """=========
 Project
=========

Overview text.

Install
-------

pip install it.

Details
~~~~~~~

More.

Usage
-----

Use it::

    Not a title
    -----------
"""


def test_rst_sections_and_levels():
    els = E.split_rst("README.rst", RST)
    check_invariants(els)
    assert ids(els) == ["README.rst#project", "README.rst#install", "README.rst#details", "README.rst#usage"]
    by = {e.id: e for e in els}
    assert by["README.rst#project"].text.startswith("=========\n Project")
    assert by["README.rst#details"].title == "Project > Install > Details"
    assert by["README.rst#usage"].title == "Project > Usage"
    assert "Not a title" in by["README.rst#usage"].text


def test_rst_short_underline_is_not_a_title():
    els = E.split_rst("x.rst", "Long title here\n---\n\ntext\n")
    assert ids(els) == ["x.rst"]


# --- HTML ----------------------------------------------------------------------------------------

HTML = """<html><head><style>h1 {color: red}</style><script>var h2 = "<h2>x</h2>";</script></head>
<body><p>Preface &amp; notes.</p>
<h1>API <code>Reference</code></h1><p>Top.</p>
<h2>Auth</h2><p>Use a <b>token</b>.</p><ul><li>one</li><li>two</li></ul>
<h2>Auth</h2><pre>x = 1
    y = 2</pre>
</body></html>"""


def test_html_sections_strip_tags():
    els = E.split_html("api.html", HTML)
    check_invariants(els)
    assert ids(els) == ["api.html", "api.html#api-reference", "api.html#auth", "api.html#auth-1"]
    by = {e.id: e for e in els}
    assert by["api.html"].text == "Preface & notes."
    auth = by["api.html#auth"]
    assert auth.title == "API Reference > Auth"
    assert "<" not in auth.text and "Use a token." in auth.text and "one\ntwo" in auth.text
    assert "    y = 2" in by["api.html#auth-1"].text  # <pre> keeps its whitespace
    assert all("color" not in e.text and "var" not in e.text for e in els)


# --- plain text and stories ----------------------------------------------------------------------


def test_plaintext_chunks_at_paragraphs():
    paras = [f"Paragraph {i} " + "word " * 30 for i in range(10)]
    els = E.split_plaintext("notes.txt", "\n\n".join(paras), max_chars=400)
    check_invariants(els)
    assert ids(els)[:2] == ["notes.txt#part-1", "notes.txt#part-2"]
    assert all(len(e.text) <= 400 for e in els)
    assert " ".join(e.text for e in els).split() == " ".join(paras).split()  # nothing lost
    huge = E.split_plaintext("h.txt", "x" * 1000, max_chars=300)
    assert [len(e.text) for e in huge] == [300, 300, 300, 100]


STORY = """The Project Gutenberg eBook.

CONTENTS

CHAPTER I

CHAPTER II

CHAPTER I. The Beginning

It was a dark night.
Chapter 3 was not a heading here because it continues a paragraph.

CHAPTER II

The middle.

Chapter 12: The End

Fin.
"""


def test_story_chapters_skip_table_of_contents():
    els = E.split_story("book.txt", STORY)
    check_invariants(els)
    assert ids(els) == [
        "book.txt",
        "book.txt#chapter-i-the-beginning",
        "book.txt#chapter-ii",
        "book.txt#chapter-12-the-end",
    ]
    assert "Chapter 3 was not" in els[1].text


def test_story_scripts_acts_and_fallback():
    script = "ACT I\n\nSCENE 1\n\nINT. KITCHEN - NIGHT\n\nANNA enters.\n\nEXT. GARDEN - DAY\n\nRain.\n"
    els = E.split_story("play.txt", script)
    assert ids(els) == ["play.txt#int-kitchen---night", "play.txt#ext-garden---day"]
    assert els[0].title == "ACT I > SCENE 1 > INT. KITCHEN - NIGHT"
    assert ids(E.split_story("s.txt", "Once upon a time.\n\nThe end.\n")) == ["s.txt#part-1"]
    # Lowercase words that happen to be roman-numeral letters are not headings.
    assert ids(E.split_story("s.txt", "Intro.\n\nAct mild\n\nmore\n")) == ["s.txt#part-1"]


def test_story_long_chapter_cut_into_parts():
    text = "CHAPTER ONE\n\n" + "\n\n".join(["sentence " * 20] * 10)
    els = E.split_story("b.txt", text, max_chars=500)
    assert ids(els)[:2] == ["b.txt#chapter-one-part-1", "b.txt#chapter-one-part-2"]
    assert all(len(e.text) <= 500 for e in els)
    assert ids(E.split_story("b.txt", text, max_chars=None)) == ["b.txt#chapter-one"]


# --- Python --------------------------------------------------------------------------------------

PY = '''"""Module doc."""
import functools


@functools.lru_cache(maxsize=None)
def top(x):
    """Top doc."""
    def inner():
        return x
    return inner()


class Shape:
    """A shape."""

    @property
    def area(self):
        return 0

    @area.setter
    def area(self, v):
        pass

    async def fetch(self):
        return 1


async def main():
    pass
'''


def test_python_symbols():
    els = E.split_python("pkg/shapes.py", PY)
    check_invariants(els)
    assert ids(els) == [
        "pkg/shapes.py",
        "pkg/shapes.py#top",
        "pkg/shapes.py#Shape",
        "pkg/shapes.py#Shape.area",
        "pkg/shapes.py#Shape.area-1",
        "pkg/shapes.py#Shape.fetch",
        "pkg/shapes.py#main",
    ]
    file_el, top = els[0], els[1]
    assert file_el.kind == "file" and file_el.text == PY
    assert top.kind == "symbol" and top.title == "top"
    assert top.text.startswith('@functools.lru_cache(maxsize=None)\ndef top(x):\n    """Top doc."""')
    assert top.text.endswith("return inner()")
    assert top.metadata == {"lineno": 5, "end_lineno": 10, "symbol_type": "function"}
    assert PY.splitlines()[4:10] == top.text.splitlines()
    by = {e.id: e for e in els}
    assert by["pkg/shapes.py#Shape"].metadata["symbol_type"] == "class"
    assert by["pkg/shapes.py#Shape.area"].text.lstrip().startswith("@property")
    assert by["pkg/shapes.py#Shape.fetch"].metadata["symbol_type"] == "method"
    assert by["pkg/shapes.py#Shape.fetch"].title == "Shape.fetch"
    assert not any("inner" in i for i in ids(els))


def test_python_syntax_error_yields_file_only():
    els = E.split_python("bad.py", "def broken(:\n    pass\n")
    assert ids(els) == ["bad.py"] and "parse_error" in els[0].metadata
    assert E.split_python("empty.py", "\n") == []


# --- dispatch and trees --------------------------------------------------------------------------


def test_split_file_dispatch():
    assert E.split_file("a/b.md", "# T\nx")[0].id == "a/b.md#t"
    assert E.split_file("a/b.rst", "Title\n=====\n\nx")[0].id == "a/b.rst#title"
    assert E.split_file("a/b.htm", "<h1>T</h1>x")[0].id == "a/b.htm#t"
    assert E.split_file("a/b.py", "x = 1\n")[0].kind == "file"
    assert E.split_file("a/b.txt", "x")[0].id == "a/b.txt#part-1"
    assert E.split_file("README", "x")[0].id == "README#part-1"
    for name in (
        "pyproject.toml",
        "setup.cfg",
        "c.yaml",
        "d.json",
        "e.js",
        "f.c",
        "g.h",
        "h.ini",
        "Makefile",
    ):
        (el,) = E.split_file(name, "[x]\n\n# y = 1\n\nz")
        assert el.id == name and el.kind == "file"


def make_tree(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / ".git").mkdir()
    (root / "node_modules/dep").mkdir(parents=True)
    (root / "pkg/mod.py").write_text("def f():\n    return 1\n")
    (root / "docs/guide.md").write_text("# Guide\n\nSome words   here.\n")
    (root / "README.txt").write_text("Hello.\n")
    (root / "setup.cfg").write_text("[metadata]\nname = x\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "big.txt").write_text("x" * 200)
    (root / ".git/config").write_text("[core]\n")
    (root / "node_modules/dep/index.js").write_text("x")


def test_load_tree(tmp_path, caplog):
    make_tree(tmp_path)
    with caplog.at_level(logging.WARNING, logger="sourcebench.harness.elements"):
        els = E.load_tree(tmp_path, max_file_bytes=100)
    assert ids(els) == ["README.txt#part-1", "docs/guide.md#guide", "pkg/mod.py", "pkg/mod.py#f", "setup.cfg"]
    assert "big.txt" in caplog.text and "skipped 3 file(s)" in caplog.text
    assert E.load_tree(tmp_path, max_file_bytes=100) == els  # deterministic
    assert ids(E.load_tree(tmp_path, include=["*.py", "docs/*"])) == [
        "docs/guide.md#guide",
        "pkg/mod.py",
        "pkg/mod.py#f",
    ]


def test_fingerprint_stable_under_whitespace(tmp_path):
    make_tree(tmp_path)
    before = {e.id: e.fingerprint for e in E.load_tree(tmp_path)}
    (tmp_path / "docs/guide.md").write_text("# Guide\n\nSome\n   words here.  \n\n")
    after = {e.id: e.fingerprint for e in E.load_tree(tmp_path)}
    assert after == before
    assert before["docs/guide.md#guide"] == fingerprint("# Guide Some words here.")
    (tmp_path / "docs/guide.md").write_text("# Guide\n\nOther words.\n")
    assert E.load_tree(tmp_path)[1].fingerprint != before["docs/guide.md#guide"]


def test_source_from_tree(tmp_path):
    make_tree(tmp_path)
    src = E.source_from_tree("demo", tmp_path, max_file_bytes=100)
    assert src.kind == "code" and src.origin == str(tmp_path)
    assert src.metadata == {"n_files": 4, "skipped_files": 3}
    assert src.element("pkg/mod.py#f").text == "def f():\n    return 1"
    with pytest.raises(DataError, match="not a directory"):
        E.source_from_tree("x", tmp_path / "missing")


def test_load_tree_rejects_path_traversal(tmp_path, monkeypatch):
    (tmp_path / "a.md").write_text("# A\nx\n")
    monkeypatch.setattr(
        E, "split_file", lambda path, text: [E.Element(id="../etc/passwd#x", title="x", text="x")]
    )
    with pytest.raises(DataError, match="a.md.*escapes"):
        E.load_tree(tmp_path)
    for bad in ("/abs/x.py", "a/../../b", "..", "C:\\x", "a\\..\\b"):
        assert E._unsafe(bad)
    assert not E._unsafe("a/..b/c..d.py")


def test_load_tree_skips_symlinks(tmp_path):
    (tmp_path / "real.txt").write_text("inside\n")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret\n")
    (tmp_path / "link.txt").symlink_to(outside)
    assert ids(E.load_tree(tmp_path)) == ["real.txt#part-1"]


# --- real data -----------------------------------------------------------------------------------


@pytest.mark.skipif(not PHANTOMWIKI.exists(), reason="PhantomWiki data not present")
def test_phantomwiki_article_sections():
    articles = json.loads(PHANTOMWIKI.read_text())
    art = next(a for a in articles if a["title"] == "Aida Wang")
    els = E.split_markdown(art["title"], art["article"])
    check_invariants(els)
    assert ids(els) == ["Aida Wang#family", "Aida Wang#friends", "Aida Wang#attributes"]
    fam = els[0]
    assert fam.title == "Aida Wang > Family"
    assert fam.text.startswith("## Family\n") and "The husband of Aida Wang is Ryan Wang." in fam.text
    assert "Friends" not in fam.text
    # Every article splits cleanly.
    for a in articles:
        got = E.split_markdown(a["title"], a["article"])
        check_invariants(got)
        assert {e.id.split("#")[1] for e in got} <= {"family", "friends", "attributes"}


# --- non-overlapping pieces ------------------------------------------------------------------------

NESTED = '''"""Module docstring."""
import os

LIMIT = 3


@decorator
class Outer:
    """Outer doc."""

    size = 1

    class Inner:
        def deep(self):
            return "inner-deep"

    def method(self):
        def helper():
            return "nested-helper"
        return helper()

    level = 2

    async def other(self):
        return "other-method"


def top():
    return "top-function"


if __name__ == "__main__":
    top()
'''


def _line_owners(pieces, path):
    """Line number -> how many pieces of ``path`` hold it (from the pieces' spans)."""
    held: dict[int, int] = {}
    for p in pieces:
        if p.path != path:
            continue
        spans = p.metadata.get("lines") or [[p.metadata["lineno"], p.metadata["end_lineno"]]]
        for a, b in spans:
            for n in range(a, b + 1):
                held[n] = held.get(n, 0) + 1
    return held


@pytest.mark.parametrize("runs", [False, True])
def test_disjoint_pieces_hold_each_line_of_a_nested_file_once(runs):
    els = E.split_python("pkg/mod.py", NESTED)
    assert ids(els) == ["pkg/mod.py", "pkg/mod.py#Outer", "pkg/mod.py#Outer.method", "pkg/mod.py#Outer.other",
                        "pkg/mod.py#top"]
    pieces = E.disjoint_pieces(els, runs=runs)
    lines = NESTED.splitlines()
    held = _line_owners(pieces, "pkg/mod.py")
    assert {n: c for n, c in held.items() if c != 1} == {}  # no line twice
    assert {n for n, line in enumerate(lines, 1) if line.strip()} <= set(held) <= set(range(1, len(lines) + 1))
    for line in lines:  # and each piece's text is those lines (every line here is unique)
        if line.strip() and lines.count(line) == 1:
            assert sum(line in p.text.splitlines() for p in pieces) == 1, line
    # the innermost element owns a line: nested classes and functions stay inside their parent
    by_id: dict[str, str] = {}
    for p in pieces:
        by_id[p.id] = by_id.get(p.id, "") + p.text
    assert "inner-deep" in by_id["pkg/mod.py#Outer"] and "nested-helper" in by_id["pkg/mod.py#Outer.method"]
    assert "LIMIT = 3" in by_id["pkg/mod.py"] and "top()" in by_id["pkg/mod.py"]
    assert "def method" not in by_id["pkg/mod.py#Outer"] and "class Outer" not in by_id["pkg/mod.py"]
    # a symbol without children is the element itself; pieces follow the file's line order
    whole = {e.id: e for e in els}
    assert next(p for p in pieces if p.id == "pkg/mod.py#top") is whole["pkg/mod.py#top"]
    first_line = [(p.metadata.get("lines") or [[p.metadata["lineno"]]])[0][0] for p in pieces]
    assert first_line == sorted(first_line)
    if runs:  # read line for line: the pieces' lines are the file's non-blank lines, in order
        assert [p.id for p in pieces].count("pkg/mod.py") == 2  # the head and the __main__ block
        got = [line for p in pieces for line in p.text.splitlines() if line.strip()]
        assert got == [line for line in lines if line.strip()]
    else:
        assert [p.id for p in pieces] == ids(els)  # one piece per element here, each id once
        assert E.disjoint_pieces(els) == pieces  # deterministic


def test_disjoint_pieces_pass_other_elements_through():
    docs = E.split_markdown("README.md", MD)
    toml = E.split_file("pyproject.toml", "[project]\nname = 'x'\n")
    flat = E.split_python("consts.py", "A = 1\nB = 2\n")  # a file element without symbols
    broken = E.split_python("bad.py", "def f(:\n")
    els = docs + toml + flat + broken
    assert E.disjoint_pieces(els) == els
    # a file whose symbol texts are not its lines is left whole rather than cut wrongly
    py = E.split_python("m.py", "def f():\n    return 1\n")
    odd = [py[0], py[1].model_copy(update={"text": "def f():\n    return 2"})]
    assert E.disjoint_pieces(odd) == odd


def test_disjoint_pieces_keep_ids_and_loader_elements_unchanged():
    els = E.split_python("pkg/mod.py", NESTED)
    before = [e.model_dump() for e in els]
    pieces = E.disjoint_pieces(els)
    assert [e.model_dump() for e in els] == before
    assert {p.id for p in pieces} <= {e.id for e in els}
    file_piece = next(p for p in pieces if p.id == "pkg/mod.py")
    assert file_piece.metadata["piece_of"] == "pkg/mod.py" and file_piece.kind == "file"
    assert file_piece.text.startswith('"""Module docstring."""\nimport os\n') and file_piece.text.endswith("top()")
