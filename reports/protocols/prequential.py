"""Prequential (online) evaluation: the statistics of the raw streams (seed 002, Discussion: "online
evaluation").

The streams themselves (stream order, blocks, the stateless reference, learning costs) are answered by
the core, ``harness/protocols/prequential.py``, which makes the model calls and whose docstring states
the protocol. Here: the macro online and stateless accuracy (leaderboard rule), the gain's paired test
on the same tasks and the mean cumulative curve, i.e. the ``protocols/prequential.json`` the report
renders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..stats import macro_accuracy, paired_test

NAME = "prequential"


def summarize_cells(cells: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Macro online and stateless accuracy (leaderboard rule), their paired test, and the mean curve."""
    def rows(kind: str) -> list[dict[str, Any]]:
        return [{"source": c["source"], "seed": c["seed"], "task_id": t["task_id"], "score": t[kind]}
                for c in cells for t in c["tasks"]]

    online, stateless = rows("online"), rows("stateless")
    if not online:
        return {"online": None, "stateless": None, "gain_pp": None, "p_value": None, "curve": []}
    test = paired_test(online, stateless, seed=seed)
    n = min(c["n"] for c in cells)
    curve = [{"n": i + 1,
              "online": float(np.mean([c["online_curve"][i] for c in cells])),
              "stateless": float(np.mean([c["stateless_curve"][i] for c in cells]))} for i in range(n)]
    acc_on, acc_off = macro_accuracy(online), macro_accuracy(stateless)
    return {"online": acc_on, "stateless": acc_off, "gain_pp": 100.0 * (acc_on - acc_off), "test": test["test"],
            "p_value": test["p_value"], "curve": curve,
            "block_starts": sorted({t["learned_from"] for c in cells for t in c["tasks"]})}


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """The protocol's result from the core's raw streams: each method's cells with its accuracies, gain, test and
    curve (``summarize_cells``, with the stream-order seed), keys in the order the report file has always had."""
    seed = int((raw.get("settings") or {}).get("seed", 0))
    methods = []
    for m in raw["methods"]:
        cells = m["cells"]
        methods.append({"method": m["method"], "mode": m["mode"], "reference": m["reference"],
                        "reference_cost": m["reference_cost"], "online_learning_cost": m["online_learning_cost"],
                        **summarize_cells(cells, seed), "cells": cells})
    out: dict[str, Any] = {"protocol": raw["protocol"], "settings": raw["settings"], "benchmark": raw["benchmark"],
                           "methods": methods}
    if "live_calls" in raw:
        out["live_calls"] = raw["live_calls"]
    return out
