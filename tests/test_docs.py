"""The documentation stays true to the code: generated pages are current, links resolve, and every
``sourcebench`` command in a ```bash block parses with the CLI's own parser.

Why parse instead of trusting review: a renamed option or a moved heading breaks a newcomer's first
command silently. ```bash blocks hold runnable commands only; a template with placeholders goes in
a ```text block, which is not checked.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from sourcebench.harness import docgen
from sourcebench.harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "configs" / "README.md",
         *sorted((ROOT / "adapters").glob("*/README.md"))]  # each benchmark's README
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
SEPARATORS = {"&&", "||", ";", "|", "&"}
REDIRECTS = {">", ">>", "<", "2>", "&>"}
ENV_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ----------------------------------------------------------------------------------------- reading


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    out, fenced = [], False
    for no, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((no, re.sub(r"(`+)(?:(?!\1).)+?\1", "``", line)))
    return out


def code_blocks(text: str, lang: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each fenced block whose info string starts with ``lang``."""
    blocks: list[tuple[int, list[str]]] = []
    open_lang: str | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            if open_lang is None:
                open_lang = (line.lstrip()[3:].split() or [""])[0]
                if open_lang == lang:
                    blocks.append((no + 1, []))
            else:
                open_lang = None
        elif open_lang == lang:
            blocks[-1][1].append(line)
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but - and _ removed,
    each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub generates for a Markdown file (repeated headings get -1, -2, ...)."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if fenced:
            continue
        out.update(HTML_ANCHOR.findall(line))
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for no, line in prose_lines(path.read_text(encoding="utf-8")):
        found += [(no, t) for t in LINK.findall(line)]
        m = REF_DEF.match(line)
        if m:
            found.append((no, m.group(1)))
    return found


def commands(lines: list[str], first: int) -> list[tuple[int, list[str]]]:
    """(line number, argv) of every ``sourcebench`` command in a bash block: continuation lines
    joined, comments dropped, split at && ; | and redirections, leading VAR=value prefixes removed."""
    out: list[tuple[int, list[str]]] = []
    joined, start = "", first
    for i, line in enumerate(lines):
        if not joined:
            start = first + i
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        joined += line
        lex = shlex.shlex(joined, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        segment: list[str] = []
        for tok in [*lex, ";"]:
            if tok not in SEPARATORS:
                segment.append(tok)
                continue
            while segment and ENV_PREFIX.match(segment[0]):
                segment.pop(0)
            if segment and segment[0] == "sourcebench":
                out.append((start, segment[1:]))
            segment = []
        joined = ""
    return [(no, _without_redirects(argv)) for no, argv in out]


def _without_redirects(argv: list[str]) -> list[str]:
    for i, tok in enumerate(argv):
        if tok in REDIRECTS:
            return argv[:i]
    return argv


def subcommand_parser(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.ArgumentParser, str]:
    """The (sub)parser the leading positional words of ``argv`` select, and the words' names."""
    words = ["sourcebench"]
    rest = [a for a in argv if not a.startswith("-")]
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or not rest:
            return parser, " ".join(words)
        word = rest.pop(0)
        if word not in sub.choices:
            raise AssertionError(f"unknown subcommand {' '.join(words)} {word!r}; known: {', '.join(sub.choices)}")
        words.append(word)
        parser = sub.choices[word]


# ---------------------------------------------------------------------------------------- checking


def link_problems(page: Path) -> list[str]:
    """Relative links of ``page`` whose file, or whose #anchor in a Markdown file, does not exist."""
    problems = []
    for no, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{rel(page)}:{no}: link to {target}: {path_part} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{rel(page)}:{no}: link to {target}: no heading with anchor #{anchor} in {rel(dest)}")
    return problems


def command_problems(page: Path) -> list[str]:
    """``sourcebench`` commands in the bash blocks of ``page`` that hold a placeholder, name an unknown
    subcommand or option, or do not parse with the CLI's parser."""
    parser = build_parser()
    problems = []
    for first, lines in code_blocks(page.read_text(encoding="utf-8"), "bash"):
        for no, argv in commands(lines, first):
            where = f"{rel(page)}:{no}: sourcebench {shlex.join(argv)}"
            if any("..." in a or re.fullmatch(r"<[^>]*>|[A-Z_]{3,}", a) for a in argv):
                problems.append(f"{where}: placeholder in a bash block (write a concrete command or use ```text)")
                continue
            try:
                sub, name = subcommand_parser(parser, argv)
            except AssertionError as e:
                problems.append(f"{where}: {e}")
                continue
            for a in argv:
                if a == "--":
                    break
                option = a.split("=", 1)[0]
                if option.startswith("--") and option not in sub._option_string_actions:
                    problems.append(f"{where}: `{name}` has no option {option} (see {name} --help)")
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    parser.parse_args(argv)
                except SystemExit as e:
                    if e.code:
                        problems.append(f"{where}: does not parse: {err.getvalue().strip()}")
    return problems


# ------------------------------------------------------------------------------------------- tests


def test_methods_page_is_generated_from_the_registry():
    page = ROOT / "docs" / "methods.md"
    expected = docgen.methods_markdown(docgen.builtin_method_names())
    assert page.is_file() and page.read_text(encoding="utf-8") == expected, (
        f"docs/methods.md is out of date with the method registry; refresh it with `{docgen.REFRESH}`")


def test_docgen_reads_config_comments_types_and_bounds():
    from pydantic import Field

    from sourcebench.harness.method import MethodConfig

    class Base(MethodConfig):
        top_k: int = Field(8, ge=1)  # evidence items
        mode: str = "a"

    class Child(Base):
        mode: str = "b"  # overrides the base

    table = "\n".join(docgen.settings_table(Child))
    assert "| `top_k` | `int, ≥ 1` | `8` | evidence items |" in table
    assert '| `mode` | `str` | `"b"` | overrides the base |' in table
    assert docgen.type_name(int | None) == "int | None" and docgen.cell("a | b") == "a \\| b"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_resolve(page: Path):
    problems = link_problems(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_sourcebench_commands_parse(page: Path):
    problems = command_problems(page)
    assert not problems, "\n".join(problems)


def test_readme_has_bash_commands():
    found = [c for first, lines in code_blocks((ROOT / "README.md").read_text(encoding="utf-8"), "bash")
             for c in commands(lines, first)]
    assert len(found) >= 4, found  # the quickstart and the task sections


def test_the_checks_catch_broken_links_and_commands(tmp_path: Path):
    (tmp_path / "b.md").write_text("# B\n")
    page = tmp_path / "a.md"
    page.write_text(
        "# Top `x_y` Title!\n## Same\n## Same\n"
        "[ok](#same-1) [ok](#top-x_y-title) [ok](b.md#b) [bad](b.md#nope) [bad](c.md) `[code](d.md)`\n"
        "```bash\n"
        "FOO=1 sourcebench run --benchmark phantomwiki --methods hybrid_rag --model m --limt 3 && echo hi\n"
        "sourcebench runn --x\n"
        "sourcebench report runs/q \\\n    --seed 3 > out.txt\n"
        "sourcebench cache merge runs/a\n"
        "sourcebench report DIR\n"
        "```\n"
        "```text\nsourcebench report DIR\n```\n"
    )
    assert [p.split(": ", 1)[1] for p in link_problems(page)] == [
        "link to b.md#nope: no heading with anchor #nope in " + str(tmp_path / "b.md"),
        "link to c.md: c.md does not exist",
    ]
    problems = command_problems(page)
    assert len(problems) == 5, problems
    assert "`sourcebench run` has no option --limt" in problems[0] and "does not parse" in problems[1]
    assert "unknown subcommand sourcebench 'runn'" in problems[2]
    assert "merge" in problems[3] and "--into" in problems[3]  # a required option missing
    assert "placeholder" in problems[4] and ":11:" in problems[4]  # reported at its line
