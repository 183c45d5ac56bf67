"""A ``Table`` (``reports.table``) as CSV (one line per data cell) and LaTeX (booktabs), the paper tables'
files beside their Markdown and HTML (``reports.layout``).

Layout only: every number, delta and mark was fixed in ``reports.grid``. LaTeX marks best in bold and
second best underlined; the delta is a subscript with an arrow (``\\sbup``/``\\sbdown`` macros defined at
the top of each .tex file with xcolor, the paper's green and red).
"""

from __future__ import annotations

import csv
import io
import math
import re

from .table import (
    DAGGER,
    INCOMPLETE_MARK,
    MARK,
    NA,
    NOT_RUN,
    Cell,
    Table,
    as_cell,
    cell_plain,
    ci_plain,
    footnotes,
    pct_text,
)

TEX_MARK = r"\S{}"


def _full_stubs(t: Table) -> list[list[str]]:
    """Stub labels with blanks (continuation rows) filled from the row above."""
    out, last = [], []
    for r in t.rows:
        cur = [s or (last[i] if i < len(last) else "") for i, s in enumerate(r.stub)]
        out.append(cur)
        last = cur
    return out


# ------------------------------------------------------------------------------------------ CSV

CSV_HEADER = ["table", "row", "column", "status", "accuracy_pct", "shown", "ci_lo_pct", "ci_hi_pct",
              "delta_shown_pp", "delta_exact_pp", "delta_ci_lo_pp", "delta_ci_hi_pp", "mark", "n_tasks",
              "degraded", "incomplete", "text", "reason"]


def _num(x: float | None, scale: float = 100.0) -> str:
    return "" if x is None or math.isnan(x) else f"{scale * x:.4f}"


def to_csv(t: Table) -> str:
    """One line per data cell; percentages in %, unrounded, empty where a number does not exist."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for stub, r in zip(_full_stubs(t), t.rows):
        for col, c in zip(t.columns, map(as_cell, r.cells)):
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
    if show_ci and ci_plain(c):
        num += r" {\scriptsize " + ci_plain(c) + "}"
    return num


def to_latex(t: Table) -> str:
    ns, nc = len(t.stub_header), len(t.columns)
    caption = tex_escape(" ".join(t.caption + footnotes(t)[len(t.notes):])).replace(
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
        lines.append(" & ".join([tex_escape(s) for s in r.stub] + [_tex_cell(as_cell(c), t.show_ci) for c in r.cells])
                     + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    lines += [f"% {n}".replace(INCOMPLETE_MARK, "++").replace(DAGGER, "+").replace(MARK, "S") for n in footnotes(t)]
    return "\n".join(lines) + "\n"


__all__ = ["CSV_HEADER", "LATEX_PREAMBLE", "TEX_MARK", "tex_escape", "to_csv", "to_latex"]
