"""The reports' page model (``Page`` of ``Section``s holding ``Table``s, ``Figure``s and ``Preformatted``
text) and its one Markdown and HTML renderer, for every report: the leaderboard, the comparison of run
folders, the reproduction page and the paper tables' own files. Tables are ``reports.table``'s one
model; free text passes through ``safe`` (the core's credential redaction) where it is built."""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass, field
from urllib.parse import quote

from .stats import format_p, stars
from .table import (
    DAGGER,
    INCOMPLETE_MARK,
    MARK,
    NA,
    NOT_RUN,
    Cell,
    CellValue,
    Link,
    Table,
    ci_plain,
    delta_plain,
    footnotes,
    marks,
    pct_text,
)


@dataclass
class Figure:
    """A PNG in a report section: written next to the report as ``filename``, linked from the
    Markdown and embedded in the HTML (which stays one self-contained file)."""

    title: str
    filename: str
    png: bytes
    note: str = ""


@dataclass
class Preformatted:
    """Text shown as is (a config file): ``<pre>`` in HTML, a fenced block in Markdown."""

    title: str
    text: str


Item = Table | Figure | Preformatted


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


# ------------------------------------------------------------------------------------ Markdown

def md_cell(text: str) -> str:
    """Cell text that cannot break the table or open an HTML tag ('<' before a letter, '/', '!')."""
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return re.sub(r"<(?=[A-Za-z/!?])", r"\\<", text)


def md_value(c: CellValue, show_ci: bool = False) -> str:
    """A cell as Markdown: a ``Link`` as ``[text](href)``; a value bold when best, underlined when second,
    with its marks, its Δ as a subscript with an arrow and, with ``show_ci``, its interval."""
    if isinstance(c, Link):
        return f"[{md_cell(c)}]({quote(c.href, safe=':/#?=&%@+~.,-_')})"
    if not isinstance(c, Cell):
        return md_cell(c)
    if c.status == NOT_RUN:
        return NOT_RUN
    if c.value is None:
        return md_cell(c.text or NA)
    num = pct_text(c.shown)
    num = f"**{num}**" if c.mark == "best" else f"<u>{num}</u>" if c.mark == "second" else num
    num += marks(c)
    if c.delta is not None:
        num += f"<sub>{delta_plain(c.delta)}</sub>"
    if show_ci and ci_plain(c):
        num += f" {ci_plain(c)}"
    return num


def _numeric(t: Table) -> list[bool]:
    """Per data column: does it hold values (right-aligned) rather than text."""
    return [any(isinstance(r.cells[j], Cell) for r in t.rows if j < len(r.cells)) for j in range(len(t.columns))]


def md_table(t: Table) -> str:
    header = t.stub_header + [f"{g} / {c}" if g else c for g, c in zip(t.group_per_column(), t.columns)]
    align = [":---"] * t.stub + ["---:" if n else "---" for n in _numeric(t)]
    lines = [f"**{md_cell(t.title)}**", "",
             "| " + " | ".join(md_cell(h) for h in header) + " |",
             "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join([md_cell(s) for s in r.stub] + [md_value(c, t.show_ci) for c in r.cells]) + " |"
              for r in t.rows]
    below = [f"*{md_cell(c)}*" if i == 0 else md_cell(c) for i, c in enumerate(t.caption)]
    below += [f"*{md_cell(t.note)}*"] if t.note else []
    lines += ["", *below] if below else []
    notes = footnotes(t)
    lines += ["", *(f"- {md_cell(n)}" for n in notes)] if notes else []
    return "\n".join(lines) + "\n"


def md_figure(f: Figure) -> str:
    note = f"\n*{md_cell(f.note)}*\n" if f.note else ""
    return f"**{md_cell(f.title)}**\n\n![{md_cell(f.title)}]({f.filename})\n{note}"


def md_item(t: Item) -> str:
    if isinstance(t, Figure):
        return md_figure(t)
    if isinstance(t, Preformatted):
        return f"**{md_cell(t.title)}**\n\n```\n{t.text.rstrip()}\n```\n"
    return md_table(t)


def render_markdown(page: Page) -> str:
    """Banners, every section's shown items, then (after the tables) the folded parts, the notes and
    the provenance."""
    parts = [f"# {page.title}", ""]
    parts += [f"> **{md_cell(b)}**\n" for b in page.banners]
    parts += [*(f"- {md_cell(c)}" for c in page.intro), ""] if page.intro else []
    sections = page.parts()
    for s in sections:
        parts += [f"## {md_cell(s.title)}", "", *map(md_item, s.items)]
    for s in sections:
        if s.folded:
            parts += [f"## {md_cell(s.title)}: {md_cell(s.folded_title.lower())}", "", *map(md_item, s.folded)]
    for title, lines in page.notes:
        parts += [f"## {md_cell(title)}", "", *(f"- {md_cell(c)}" for c in lines), ""]
    if page.provenance:
        parts += ["## Provenance", ""] + [md_table(t) for t in page.provenance]
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:80rem;
color:#1a1a1a;line-height:1.4;padding:0 1rem}
h2{border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}
caption{text-align:left;font-weight:600;padding:.3rem 0}
th,td{border:1px solid #ccc;padding:.25rem .55rem;vertical-align:top}
th{background:#f2f2f2;text-align:left}tbody th{font-weight:normal;background:#fafafa}
th.group{text-align:center}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.nr{color:#999;font-style:italic;text-align:center}tr.rule td,tr.rule th{border-top:2px solid #888}
tbody tr:nth-child(even){background:#fafafa}.note{color:#555;font-size:.85rem;margin-top:-1rem}
sub.up{color:#00a64f}sub.down{color:#e8967a}sub.zero{color:#777}span.ci{color:#777;font-size:.8em}
.caption p{margin:.15rem 0;color:#444;font-size:.85rem}ul.notes{color:#8a5a00;font-size:.82rem}
ul.caption{color:#333;font-size:.9rem}
figure{margin:.5rem 0 1.5rem}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-weight:600;padding:.3rem 0}
.banner{background:#fff4e5;border:1px solid #e8a33d;padding:.5rem .8rem;margin:.6rem 0;font-weight:600}
details{margin:.4rem 0 1rem}summary{cursor:pointer;font-weight:600;color:#333}
nav a{margin-right:.8rem}pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem}
"""

WRAP_CHARS = 80  # text longer than this (a method's deviations) wraps instead of widening the page


def html_value(c: CellValue, show_ci: bool = False, first: bool = False) -> str:
    """A data cell as ``<td>``: short text and values right-aligned on one line (``num``), long text (and a
    label-less table's first column) as text; a value with the marks, Δ and interval ``md_value`` shows,
    its interval, Δ interval and task count in the tooltip."""
    esc = html.escape
    if not isinstance(c, Cell):
        text = f'<a href="{esc(c.href)}">{esc(c)}</a>' if isinstance(c, Link) else esc(c)
        return f"<td>{text}</td>" if first or len(c) > WRAP_CHARS else f'<td class="num">{text}</td>'
    if c.status == NOT_RUN:
        return f'<td class="nr" title="{esc(c.reason)}">{NOT_RUN}</td>'
    if c.value is None:
        return f'<td class="num">{esc(c.text or NA)}</td>'
    num = pct_text(c.shown)
    num = f"<strong>{num}</strong>" if c.mark == "best" else f"<u>{num}</u>" if c.mark == "second" else num
    for on, mark, why, cls in ((c.degraded, DAGGER, "; ".join(c.degraded), "degraded"),
                               (c.incomplete, INCOMPLETE_MARK, c.incomplete, "degraded"),
                               (c.substitute, MARK, "; ".join(c.substitute), "substitute")):
        num += f'<span class="{cls}" title="{esc(why)}">{mark}</span>' if on else ""
    if c.delta is not None:
        cls = "up" if c.delta > 0 else "down" if c.delta < 0 else "zero"
        num += f'<sub class="{cls}">{esc(delta_plain(c.delta))}</sub>'
    tip = []
    if ci_plain(c):
        tip.append(f"95% CI {ci_plain(c)}")
    if c.delta_ci:
        tip.append(f"Δ 95% CI [{c.delta_ci[0]:+.1f}, {c.delta_ci[1]:+.1f}]")
        if show_ci:
            num += f' <span class="ci">{esc(ci_plain(c))}</span>'
    if c.n is not None:
        tip.append(f"{c.n} test tasks")
    title = f' title="{esc("; ".join(tip))}"' if tip else ""
    return f'<td class="num {c.mark}"{title}>{num}</td>'


def html_table(t: Table) -> str:
    esc = html.escape
    anchor = f' id="{esc(t.id)}"' if t.id else ""
    out = [f"<table{anchor}><caption>{esc(t.title)}</caption><thead>"]
    if t.groups:
        out.append("<tr>" + (f'<th colspan="{t.stub}"></th>' if t.stub else "")
                   + "".join(f'<th colspan="{span}" class="group">{esc(label)}</th>' for label, span in t.groups)
                   + "</tr>")
    out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.header) + "</tr></thead><tbody>")
    for r in t.rows:
        cls = ' class="rule"' if r.rule else ""
        out.append(f"<tr{cls}>" + "".join(f'<th scope="row">{esc(s)}</th>' for s in r.stub)
                   + "".join(html_value(c, t.show_ci, first=not t.stub and j == 0) for j, c in enumerate(r.cells))
                   + "</tr>")
    out.append("</tbody></table>")
    if t.caption:
        out.append('<div class="caption">' + "".join(f"<p>{esc(c)}</p>" for c in t.caption) + "</div>")
    if t.note:
        out.append(f'<p class="note">{esc(t.note)}</p>')
    notes = footnotes(t)
    if notes:
        out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return "".join(out) + "\n"


def html_figure(f: Figure) -> str:
    esc = html.escape
    data = base64.b64encode(f.png).decode("ascii")
    note = f'<p class="note">{esc(f.note)}</p>' if f.note else ""
    return (f'<figure><figcaption>{esc(f.title)}</figcaption>'
            f'<img alt="{esc(f.title)}" src="data:image/png;base64,{data}"></figure>{note}\n')


def html_item(t: Item) -> str:
    if isinstance(t, Figure):
        return html_figure(t)
    if isinstance(t, Preformatted):
        return f"<h3>{html.escape(t.title)}</h3><pre>{html.escape(t.text)}</pre>\n"
    return html_table(t)


def render_html(page: Page) -> str:
    """One self-contained page: banners, then each section's shown items with its folded part in a
    ``<details>`` below them, then the notes and the provenance, folded."""
    esc = html.escape
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(page.title)}</title><style>{CSS}</style></head><body>",
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
        folded = (f"<details><summary>{esc(s.folded_title)}</summary>{''.join(map(html_item, s.folded))}</details>"
                  if s.folded else "")
        anchor = f' id="{esc(s.id)}"' if s.id else ""
        out.append(f"<section{anchor}><h2>{esc(s.title)}</h2>{''.join(map(html_item, s.items))}{folded}</section>")
    for title, lines in page.notes:
        out.append(f'<details class="notes"><summary>{esc(title)}</summary><ul class="caption">'
                   + "".join(f"<li>{esc(c)}</li>" for c in lines) + "</ul></details>")
    if page.provenance:
        out.append('<details id="provenance"><summary>Provenance</summary>'
                   + "".join(html_table(t) for t in page.provenance) + "</details>")
    out.append("</body></html>\n")
    return "\n".join(out)


__all__ = ["CSS", "Figure", "Item", "Page", "Preformatted", "Section", "fmt_p", "html_item", "html_table",
           "html_value", "md_cell", "md_item", "md_table", "md_value", "pct", "render_html", "render_markdown"]
