"""Answer-set exact match and F1, as PhantomWiki's phantom_eval defines them.

Prediction and gold are split on ",", stripped and lowercased, and compared as sets.
"""

from __future__ import annotations

from collections.abc import Iterable


def answer_set(text: str | Iterable[str]) -> set[str]:
    items = text.split(",") if isinstance(text, str) else [str(x) for x in text]
    return {s.strip().lower() for s in items if s.strip()}


def exact_f1(prediction: str | Iterable[str], gold: str | Iterable[str]) -> dict[str, float]:
    pred, ref = answer_set(prediction), answer_set(gold)
    em = float(pred == ref)
    inter = len(pred & ref)
    precision = inter / len(pred) if pred else 0.0
    recall = inter / len(ref) if ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"em": em, "precision": precision, "recall": recall, "f1": f1}
