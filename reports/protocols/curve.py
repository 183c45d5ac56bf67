"""The prequential curve as a PNG: cumulative accuracy along the test stream, online against stateless.

Plots only the numbers of ``prequential.json`` (the same ones the curve table shows): one colour per
method, online solid, stateless dashed, and the learning points as dotted verticals.
"""

from __future__ import annotations

import math
from typing import Any

from matplotlib.ticker import MaxNLocator

from ..figures import COLORS, plt, png_bytes

FILENAME = "prequential_curve.png"


def y_top(percents: list[float]) -> float:
    """The y axis' top: 100 %, or for low curves (a small model's few per cent) the next multiple of 5
    above 115 % of the highest point (at least 10), so that they are not flat lines at the bottom."""
    top = max(percents, default=0.0)
    return 100.0 if top > 50 else float(min(100, max(10, 5 * math.ceil(top * 1.15 / 5))))


def prequential_png(methods: list[dict[str, Any]], block_starts: list[int]) -> bytes:
    fig, ax = plt.subplots(1, 1, figsize=(7, 4))
    for i, m in enumerate(methods):
        xs = [c["n"] for c in m["curve"]]
        color = COLORS[i % len(COLORS)]
        ax.plot(xs, [100 * c["online"] for c in m["curve"]], color=color, label=f"{m['method']} online")
        ax.plot(xs, [100 * c["stateless"] for c in m["curve"]], color=color, linestyle="--",
                label=f"{m['method']} stateless")
    for s in block_starts:
        if s > 0:
            ax.axvline(s + 0.5, color="#999", linestyle=":", linewidth=1)
    ax.set_ylim(0, y_top([100 * c[k] for m in methods for c in m["curve"] for k in ("online", "stateless")]))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("test tasks answered (stream position)", fontsize=8)
    ax.set_ylabel("cumulative accuracy (%)", fontsize=8)
    ax.set_title("Prequential evaluation: answered before learning from the task", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return png_bytes(fig)
