"""``ReportTable`` -> Markdown, CSV (one line per cell), LaTeX (booktabs) and HTML.

Layout only: every number, delta and mark was fixed in ``reports.grid``. Best is bold, second best
underlined (Markdown uses ``<u>``, which GitHub renders), the delta is a subscript with an arrow
(LaTeX: ``\\sbup``/``\\sbdown`` macros defined at the top of each .tex file with xcolor, the paper's
green and red).
"""

from __future__ import annotations

import csv
import html
import io
import math
import re

from .grid import DAGGER, INCOMPLETE_MARK, NA, NOT_RUN, Cell, ReportTable, degraded_notes, pct_text
from .provenance_marks import MARK, TEX_MARK, table_notes


def _notes(t: ReportTable) -> list[str]:
    """The table's notes, the DEGRADED note, then the footnotes of substitute sources (``MARK``)."""
    return degraded_notes(t) + table_notes(c for r in t.rows for c in r.cells)

ARROW_UP, ARROW_DOWN, ARROW_ZERO = "↑", "↓", "±"


def _delta_plain(d: float) -> str:
    arrow = ARROW_UP if d > 0 else ARROW_DOWN if d < 0 else ARROW_ZERO
    return f"{arrow}{abs(d):.1f}"


def _ci_plain(c: Cell) -> str:
    if not c.ci or math.isnan(c.ci[0]):
        return ""
    return f"[{100 * c.ci[0]:.1f}, {100 * c.ci[1]:.1f}]"


def cell_plain(c: Cell, show_ci: bool = False) -> str:
    """Unformatted text of a cell (CSV ``shown`` column, figure labels)."""
    if c.status == NOT_RUN:
        return NOT_RUN
    if c.value is None:
        return c.text or NA
    out = (pct_text(c.shown) + (DAGGER if c.degraded else "") + (INCOMPLETE_MARK if c.incomplete else "")
           + (MARK if c.substitute else ""))
    if c.delta is not None:
        out += " " + _delta_plain(c.delta)
    if show_ci and _ci_plain(c):
        out += " " + _ci_plain(c)
    return out


def _full_stubs(t: ReportTable) -> list[list[str]]:
    """Stub labels with blanks (continuation rows) filled from the row above."""
    out, last = [], []
    for r in t.rows:
        cur = [s or (last[i] if i < len(last) else "") for i, s in enumerate(r.stub)]
        out.append(cur)
        last = cur
    return out


# ------------------------------------------------------------------------------------ Markdown

def _md_escape(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return re.sub(r"([*_`])", r"\\\1", text)


def _md_cell(c: Cell, show_ci: bool) -> str:
    if c.status == NOT_RUN or c.value is None:
        return _md_escape(cell_plain(c))
    num = pct_text(c.shown)
    num = f"**{num}**" if c.mark == "best" else f"<u>{num}</u>" if c.mark == "second" else num
    num += (DAGGER if c.degraded else "") + (INCOMPLETE_MARK if c.incomplete else "") + (MARK if c.substitute else "")
    if c.delta is not None:
        num += f"<sub>{_delta_plain(c.delta)}</sub>"
    if show_ci and _ci_plain(c):
        num += f" {_ci_plain(c)}"
    return num


def to_markdown(t: ReportTable) -> str:
    header = t.stub_header + [f"{g} / {c}" if g else c for g, c in zip(_group_per_column(t), t.columns)]
    lines = [f"### {_md_escape(t.title)}", ""]
    lines += ["| " + " | ".join(_md_escape(h) for h in header) + " |",
              "|" + "|".join(":---" for _ in t.stub_header) + "|" + "|".join("---:" for _ in t.columns) + "|"]
    for r in t.rows:
        lines.append("| " + " | ".join([_md_escape(s) for s in r.stub] + [_md_cell(c, t.show_ci) for c in r.cells])
                     + " |")
    lines.append("")
    lines += [f"*{_md_escape(c)}*" if i == 0 else _md_escape(c) for i, c in enumerate(t.caption)]
    if _notes(t):
        lines += [""] + [f"- {_md_escape(n)}" for n in _notes(t)]
    return "\n".join(lines) + "\n"


def _group_per_column(t: ReportTable) -> list[str]:
    out: list[str] = []
    for label, span in t.groups:
        out += [label] * span
    return out + [""] * (len(t.columns) - len(out))


# ------------------------------------------------------------------------------------------ CSV

CSV_HEADER = ["table", "row", "column", "status", "accuracy_pct", "shown", "ci_lo_pct", "ci_hi_pct",
              "delta_shown_pp", "delta_exact_pp", "delta_ci_lo_pp", "delta_ci_hi_pp", "mark", "n_tasks",
              "degraded", "incomplete", "text", "reason"]


def _num(x: float | None, scale: float = 100.0) -> str:
    return "" if x is None or math.isnan(x) else f"{scale * x:.4f}"


def to_csv(t: ReportTable) -> str:
    """One line per data cell; percentages in %, unrounded, empty where a number does not exist."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for stub, r in zip(_full_stubs(t), t.rows):
        for col, c in zip(t.columns, r.cells):
            w.writerow([t.id, " / ".join(s for s in stub if s), col, c.status, _num(c.value), cell_plain(c),
                        _num(c.ci[0] if c.ci else None), _num(c.ci[1] if c.ci else None),
                        "" if c.delta is None else f"{c.delta:.1f}", _num(c.delta_exact, 1.0),
                        _num(c.delta_ci[0] if c.delta_ci else None, 1.0),
                        _num(c.delta_ci[1] if c.delta_ci else None, 1.0), c.mark,
                        "" if c.n is None else c.n, int(bool(c.degraded)), c.incomplete, c.text, c.reason])
    return buf.getvalue()


# ---------------------------------------------------------------------------------------- LaTeX

LATEX_PREAMBLE = r"""% Requires \usepackage{booktabs} and \usepackage{xcolor}.
\providecommand{\sbup}[1]{\ensuremath{_{\textcolor[rgb]{0,0.65,0.31}{\uparrow #1}}}}
\providecommand{\sbdown}[1]{\ensuremath{_{\textcolor[rgb]{0.91,0.59,0.48}{\downarrow #1}}}}
\providecommand{\sbzero}[1]{\ensuremath{_{\pm #1}}}
"""
_TEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}
_TEX_UNICODE = {"—": "--", "→": r"$\to$", "×": r"$\times$", "Π": r"$\Pi$", "≤": r"$\leq$", "Δ": r"$\Delta$",
                "↑": r"$\uparrow$", "↓": r"$\downarrow$", "±": r"$\pm$", "…": "..."}


def tex_escape(text: str) -> str:
    out = "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)
    for k, v in _TEX_UNICODE.items():
        out = out.replace(k, v)
    return re.sub(r"\bM(0|S|T)\b", r"$M_{\1}$", out)


def _tex_cell(c: Cell, show_ci: bool) -> str:
    if c.status == NOT_RUN:
        return r"\textit{not run}"
    if c.value is None:
        return tex_escape(c.text or NA)
    num = pct_text(c.shown)
    num = rf"\textbf{{{num}}}" if c.mark == "best" else rf"\underline{{{num}}}" if c.mark == "second" else num
    num += r"\textsuperscript{\dag}" if c.degraded else ""
    num += r"\textsuperscript{\ddag}" if c.incomplete else ""
    num += rf"\textsuperscript{{{TEX_MARK}}}" if c.substitute else ""
    if c.delta is not None:
        macro = r"\sbup" if c.delta > 0 else r"\sbdown" if c.delta < 0 else r"\sbzero"
        num += f"{macro}{{{abs(c.delta):.1f}}}"
    if show_ci and _ci_plain(c):
        num += r" {\scriptsize " + _ci_plain(c) + "}"
    return num


def to_latex(t: ReportTable) -> str:
    ns, nc = len(t.stub_header), len(t.columns)
    caption = tex_escape(" ".join(t.caption + _notes(t)[len(t.notes):])).replace(
        INCOMPLETE_MARK, r"\ddag{}").replace(DAGGER, r"\dag{}").replace(MARK, TEX_MARK)
    lines = [LATEX_PREAMBLE, r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{tex_escape(t.title)}. {caption}}}",
             rf"\label{{tab:{t.id}}}", rf"\begin{{tabular}}{{{'l' * ns}{'r' * nc}}}", r"\toprule"]
    if t.groups:
        head, rules, col = [""] * ns, [], ns + 1
        for label, span in t.groups:
            head.append(rf"\multicolumn{{{span}}}{{c}}{{{tex_escape(label)}}}" if span > 1 else tex_escape(label))
            if label:
                rules.append(rf"\cmidrule(lr){{{col}-{col + span - 1}}}")
            col += span
        lines.append(" & ".join(head) + r" \\")
        lines.append(" ".join(rules))
    lines.append(" & ".join(tex_escape(h) for h in t.stub_header + t.columns) + r" \\")
    lines.append(r"\midrule")
    for r in t.rows:
        if r.rule:
            lines.append(r"\midrule")
        lines.append(" & ".join([tex_escape(s) for s in r.stub] + [_tex_cell(c, t.show_ci) for c in r.cells])
                     + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    lines += [f"% {n}".replace(INCOMPLETE_MARK, "++").replace(DAGGER, "+").replace(MARK, "S") for n in _notes(t)]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------- HTML

def _html_cell(c: Cell, show_ci: bool) -> str:
    esc = html.escape
    if c.status == NOT_RUN:
        return f'<td class="nr" title="{esc(c.reason)}">not run</td>'
    if c.value is None:
        return f'<td class="num">{esc(c.text or NA)}</td>'
    num = pct_text(c.shown)
    num = f"<strong>{num}</strong>" if c.mark == "best" else f"<u>{num}</u>" if c.mark == "second" else num
    num += f'<span class="degraded" title="{esc("; ".join(c.degraded))}">{DAGGER}</span>' if c.degraded else ""
    num += f'<span class="degraded" title="{esc(c.incomplete)}">{INCOMPLETE_MARK}</span>' if c.incomplete else ""
    num += f'<span class="substitute" title="{esc("; ".join(c.substitute))}">{MARK}</span>' if c.substitute else ""
    if c.delta is not None:
        cls = "up" if c.delta > 0 else "down" if c.delta < 0 else "zero"
        num += f'<sub class="{cls}">{esc(_delta_plain(c.delta))}</sub>'
    tip = []
    if _ci_plain(c):
        tip.append(f"95% CI {_ci_plain(c)}")
    if c.delta_ci:
        tip.append(f"Δ 95% CI [{c.delta_ci[0]:+.1f}, {c.delta_ci[1]:+.1f}]")
        if show_ci:
            num += f' <span class="ci">{esc(_ci_plain(c))}</span>'
    if c.n is not None:
        tip.append(f"{c.n} test tasks")
    title = f' title="{esc("; ".join(tip))}"' if tip else ""
    return f'<td class="num {c.mark}"{title}>{num}</td>'


def to_html(t: ReportTable) -> str:
    esc = html.escape
    out = [f'<table class="paper" id="{esc(t.id)}"><caption>{esc(t.title)}</caption><thead>']
    if t.groups:
        out.append("<tr>" + f'<th colspan="{len(t.stub_header)}"></th>'
                   + "".join(f'<th colspan="{span}" class="group">{esc(label)}</th>' for label, span in t.groups)
                   + "</tr>")
    out.append("<tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.stub_header + t.columns) + "</tr></thead><tbody>")
    for r in t.rows:
        cls = ' class="rule"' if r.rule else ""
        out.append(f"<tr{cls}>" + "".join(f"<th scope=\"row\">{esc(s)}</th>" for s in r.stub)
                   + "".join(_html_cell(c, t.show_ci) for c in r.cells) + "</tr>")
    out.append("</tbody></table>")
    out.append('<div class="caption">' + "".join(f"<p>{esc(c)}</p>" for c in t.caption) + "</div>")
    if _notes(t):
        out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in _notes(t)) + "</ul>")
    return "\n".join(out) + "\n"
