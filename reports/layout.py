"""The reports' neutral table model (``Table``, ``Figure``) and its Markdown and HTML layout, with every
free text passed through ``safe``, which masks anything shaped like a credential: a report is meant
to be shared, and error messages or commands can echo keys."""

from __future__ import annotations

import base64
import html
import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .stats import format_p, stars

NA = "—"


_SECRET_PATTERNS = [
    # well-known key prefixes: OpenAI/Anthropic (sk-), Hugging Face, GitHub, Slack, AWS, Google
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\b(?:hf|ghp|gho|ghs|ghu|github_pat|xox[abpr])_[A-Za-z0-9_\-]{8,}"),
    re.compile(r"\bAKIA[0-9A-Z]{12,}\b"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
    # long random-looking strings mixing upper case, lower case and digits (hex hashes are spared)
    re.compile(r"\b(?=[A-Za-z0-9_\-]*[A-Z])(?=[A-Za-z0-9_\-]*[a-z])(?=[A-Za-z0-9_\-]*\d)[A-Za-z0-9_\-]{32,}"),
]
# "api_key=...", "--api-key ...", "Authorization: Bearer ...": keep the name, mask the value


_SECRET_ASSIGN = re.compile(
    r"(?i)((?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|secret|password|passwd)[\"']?\s*[:= ]\s*"
    r"[\"']?|authorization[\"']?\s*:\s*(?:bearer\s+)?|\bbearer\s+)(?!\*\*\*)[^\s\"',;]+"
)


def safe(value: Any) -> str:
    """Text with anything credential-shaped masked (``***``)."""
    text = "" if value is None else str(value)
    text = _SECRET_ASSIGN.sub(r"\1***", text)
    for pat in _SECRET_PATTERNS:
        text = pat.sub("***", text)
    return text


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


@dataclass
class Figure:
    """A PNG in a report section: written next to the report as ``filename``, linked from the
    Markdown and embedded in the HTML (which stays one self-contained file)."""

    title: str
    filename: str
    png: bytes
    note: str = ""


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


def md_table(t: Table) -> str:
    lines = [
        f"**{md_cell(t.title)}**",
        "",
        "| " + " | ".join(md_cell(h) for h in t.header) + " |",
        "|" + "|".join("---" for _ in t.header) + "|",
    ]
    lines += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in t.rows]
    if t.note:
        lines += ["", f"*{md_cell(t.note)}*"]
    return "\n".join(lines) + "\n"


def md_figure(f: Figure) -> str:
    note = f"\n*{md_cell(f.note)}*\n" if f.note else ""
    return f"**{md_cell(f.title)}**\n\n![{md_cell(f.title)}]({f.filename})\n{note}"


def render_markdown(title: str, cap: list[str], sections, provenance: list[Table]) -> str:
    parts = [f"# {title}", "", *(f"- {md_cell(c)}" for c in cap), ""]
    for name, tables in sections:
        parts += [f"## {md_cell(name)}", ""] + [md_figure(t) if isinstance(t, Figure) else md_table(t)
                                                 for t in tables]
    parts += ["## Provenance", ""] + [md_table(t) for t in provenance]
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
"""


WRAP_CHARS = 80


def html_table(t: Table) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in t.header)
    # value columns are right-aligned and kept on one line; long text (a method's deviations) wraps instead
    # of widening the page
    cell = lambda i, c: f'<td class="num">{esc(c)}</td>' if i and len(c) <= WRAP_CHARS else f"<td>{esc(c)}</td>"
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


def render_html(title: str, cap: list[str], sections, provenance: list[Table]) -> str:
    esc = html.escape
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        '<ul class="caption">' + "".join(f"<li>{esc(c)}</li>" for c in cap) + "</ul>",
    ]
    for name, tables in sections:
        out.append(f"<section><h2>{esc(name)}</h2>"
                   + "".join(html_figure(t) if isinstance(t, Figure) else html_table(t) for t in tables)
                   + "</section>")
    out.append(
        '<section id="provenance"><h2>Provenance</h2>'
        + "".join(html_table(t) for t in provenance)
        + "</section></body></html>\n"
    )
    return "\n".join(out)
