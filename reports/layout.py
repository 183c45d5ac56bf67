"""The reports' neutral table model (``Table``, ``Figure``, ``Link``) and its one Markdown and HTML
layout, with every free text passed through ``safe``, which masks anything shaped like a credential
(the core's ``redact_credentials``): a report is meant to be shared, and error messages or commands
can echo keys."""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import quote, urlsplit, urlunsplit

from sourcebench.harness.io import redact_credentials

from .stats import format_p, stars

NA = "—"


def safe(value: Any) -> str:
    """Text with anything credential-shaped masked (``***``), by the core's redaction."""
    return redact_credentials("" if value is None else str(value))


def safe_url(url: Any) -> str:
    """A base URL without user:password, query or fragment (where tokens sometimes ride along)."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return safe(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return safe(urlunsplit((parts.scheme, netloc, parts.path, "", "")))


@dataclass
class Table:
    """A rendered-format-neutral table: every cell is already display text."""

    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""


class Link(str):
    """Cell text that links to ``href`` (a page beside the report, a log viewer URL); elsewhere (CSV,
    terminal) it is its text."""

    href: str

    def __new__(cls, text: str, href: str) -> Self:
        out = super().__new__(cls, text)
        out.href = href
        return out


@dataclass
class Figure:
    """A PNG in a report section: written next to the report as ``filename``, linked from the
    Markdown and embedded in the HTML (which stays one self-contained file)."""

    title: str
    filename: str
    png: bytes
    note: str = ""


@dataclass
class Fragment:
    """Part of a page already rendered by its own formatter (the paper tables of ``reports.render``,
    whose cells carry marks and deltas), as HTML and as Markdown."""

    html: str
    markdown: str = ""


Item = Table | Figure | Fragment


@dataclass
class Section:
    """A titled part of a page: ``items`` shown, ``folded`` below them (HTML ``<details>`` titled
    ``folded_title``; Markdown after every section's shown items), so the result comes first. A
    section with an ``id`` is an anchor the page's navigation links (``nav``: its label there)."""

    title: str
    items: list[Item]
    folded: list[Item] = field(default_factory=list)
    folded_title: str = "More tables"
    id: str = ""
    nav: str = ""


@dataclass
class Page:
    """A report page. ``banners`` come first (what the numbers below are not), then ``intro``, the
    sections, ``notes`` (titled lists: definitions, deviations; folded) and the provenance (folded)."""

    title: str
    sections: list[Section | tuple[str, list[Item]]]
    banners: list[str] = field(default_factory=list)
    intro: list[str] = field(default_factory=list)
    notes: list[tuple[str, list[str]]] = field(default_factory=list)
    provenance: list[Table] = field(default_factory=list)
    nav: bool = False  # a bar of links to the sections that have an id
    style: str = ""  # CSS for what the page's fragments need beyond the tables' own

    def parts(self) -> list[Section]:
        return [s if isinstance(s, Section) else Section(s[0], list(s[1])) for s in self.sections]


def pct(x: float | None) -> str:
    return NA if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100.0 * x:.1f}"


def fmt_p(p: float | None, comparable: bool = True, mc_se: float | None = None) -> str:
    """p by the reports' one rule (``stats.format_p``) with stars, which a degraded or incomplete
    comparison never gets."""
    if p is None:
        return NA
    return f"{format_p(p, mc_se)} {stars(p, comparable)}".strip()


def md_cell(text: str) -> str:
    """Cell text that cannot break the table or open an HTML tag ('<' before a letter, '/', '!')."""
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return re.sub(r"<(?=[A-Za-z/!?])", r"\\<", text)


def md_link(c: str) -> str:
    """A cell as Markdown: a ``Link`` as ``[text](href)``."""
    if isinstance(c, Link):
        return f"[{md_cell(c)}]({quote(c.href, safe=':/#?=&%@+~.,-_')})"
    return md_cell(c)


def md_table(t: Table) -> str:
    lines = [
        f"**{md_cell(t.title)}**",
        "",
        "| " + " | ".join(md_cell(h) for h in t.header) + " |",
        "|" + "|".join("---" for _ in t.header) + "|",
    ]
    lines += ["| " + " | ".join(md_link(c) for c in r) + " |" for r in t.rows]
    if t.note:
        lines += ["", f"*{md_cell(t.note)}*"]
    return "\n".join(lines) + "\n"


def md_figure(f: Figure) -> str:
    note = f"\n*{md_cell(f.note)}*\n" if f.note else ""
    return f"**{md_cell(f.title)}**\n\n![{md_cell(f.title)}]({f.filename})\n{note}"


def _md_items(items: list[Item]) -> list[str]:
    return [t.markdown if isinstance(t, Fragment) else md_figure(t) if isinstance(t, Figure) else md_table(t)
            for t in items]


def render_markdown(page: Page) -> str:
    """Banners, every section's shown items, then (after the tables) the folded parts, the notes and
    the provenance."""
    parts = [f"# {page.title}", ""]
    parts += [f"> **{md_cell(b)}**\n" for b in page.banners]
    parts += [*(f"- {md_cell(c)}" for c in page.intro), ""] if page.intro else []
    sections = page.parts()
    for s in sections:
        parts += [f"## {md_cell(s.title)}", "", *_md_items(s.items)]
    for s in sections:
        if s.folded:
            parts += [f"## {md_cell(s.title)}: {md_cell(s.folded_title.lower())}", "", *_md_items(s.folded)]
    for title, lines in page.notes:
        parts += [f"## {md_cell(title)}", "", *(f"- {md_cell(c)}" for c in lines), ""]
    if page.provenance:
        parts += ["## Provenance", ""] + [md_table(t) for t in page.provenance]
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:80rem;
color:#1a1a1a;line-height:1.4;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #ccc;padding:.25rem .55rem;vertical-align:top}
th{background:#f2f2f2;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:nth-child(even){background:#fafafa}.note{color:#555;font-size:.85rem;margin-top:-1rem}
ul.caption{color:#333;font-size:.9rem}
figure{margin:.5rem 0 1.5rem}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-weight:600;padding:.3rem 0}
.banner{background:#fff4e5;border:1px solid #e8a33d;padding:.5rem .8rem;margin:.6rem 0;font-weight:600}
details{margin:.4rem 0 1rem}summary{cursor:pointer;font-weight:600;color:#333}
nav a{margin-right:.8rem}pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem}
"""


WRAP_CHARS = 80


def html_table(t: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in t.header)
    # value columns are right-aligned and kept on one line; long text (a method's deviations) wraps instead
    # of widening the page
    def text(c: str) -> str:
        return f'<a href="{esc(c.href)}">{esc(c)}</a>' if isinstance(c, Link) else esc(c)

    cell = lambda i, c: f'<td class="num">{text(c)}</td>' if i and len(c) <= WRAP_CHARS else f"<td>{text(c)}</td>"
    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(r)) + "</tr>" for r in t.rows)
    note = f'<p class="note">{esc(t.note)}</p>' if t.note else ""
    return (
        f"<table><caption>{esc(t.title)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>{note}\n"
    )


def html_figure(f: Figure) -> str:
    esc = html.escape
    data = base64.b64encode(f.png).decode("ascii")
    note = f'<p class="note">{esc(f.note)}</p>' if f.note else ""
    return (f'<figure><figcaption>{esc(f.title)}</figcaption>'
            f'<img alt="{esc(f.title)}" src="data:image/png;base64,{data}"></figure>{note}\n')


def _html_items(items: list[Item]) -> str:
    return "".join(t.html if isinstance(t, Fragment) else html_figure(t) if isinstance(t, Figure) else html_table(t)
                   for t in items)


def render_html(page: Page) -> str:
    """One self-contained page: banners, then each section's shown items with its folded part in a
    ``<details>`` below them, then the notes and the provenance, folded."""
    esc = html.escape
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(page.title)}</title><style>{_CSS}{page.style}</style></head><body>",
        f"<h1>{esc(page.title)}</h1>",
        *(f'<p class="banner">{esc(b)}</p>' for b in page.banners),
    ]
    if page.intro:
        out.append('<ul class="caption">' + "".join(f"<li>{esc(c)}</li>" for c in page.intro) + "</ul>")
    sections = page.parts()
    if page.nav:
        out.append("<nav>" + "".join(f'<a href="#{esc(s.id)}">{esc(s.nav or s.title)}</a>' for s in sections if s.id)
                   + "</nav>")
    for s in sections:
        folded = (f"<details><summary>{esc(s.folded_title)}</summary>{_html_items(s.folded)}</details>"
                  if s.folded else "")
        anchor = f' id="{esc(s.id)}"' if s.id else ""
        out.append(f"<section{anchor}><h2>{esc(s.title)}</h2>{_html_items(s.items)}{folded}</section>")
    for title, lines in page.notes:
        out.append(f'<details class="notes"><summary>{esc(title)}</summary><ul class="caption">'
                   + "".join(f"<li>{esc(c)}</li>" for c in lines) + "</ul></details>")
    if page.provenance:
        out.append('<details id="provenance"><summary>Provenance</summary>'
                   + "".join(html_table(t) for t in page.provenance) + "</details>")
    out.append("</body></html>\n")
    return "\n".join(out)
