"""Guidance-task experience as RIKA's trajectories, and the check that a quoted span is feedback.

A trajectory is one guidance task solved with the normal task-time interface: the question, the
Hybrid RAG excerpts (the environment's observations), the answer (the agent's action) and the
run judge's verdict (the task outcome). The excerpts and the verdict are the *environment
feedback* every claim must be grounded in; the question and the answer give context only. The
reference answer is never read: only the judge's verdict enters a trajectory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sourcebench.harness.data import Evidence, normalise_ws, stable_hash

MIN_SPAN_CHARS = 4  # shorter quotes would match almost any text


def verdict_line(correct: bool, value: float, judged: bool = True) -> str:
    if not judged:
        return "Grader verdict: none (the grader failed on this answer)."
    return f"Grader verdict: the answer was judged {'correct' if correct else 'incorrect'} (score {value:.2f})."


@dataclass(frozen=True)
class Trajectory:
    """One solved guidance task. ``label`` (T1, T2, ...) is how prompts refer to it within a batch;
    ``task_id`` is its immutable id in the claim store's provenance."""

    label: str
    task_id: str
    question: str
    evidence: tuple[Evidence, ...]
    answer: str
    correct: bool
    value: float
    failed: bool = False  # the answer call itself failed (no answer was produced)
    judged: bool = True  # False when the judge failed: the record then carries no outcome feedback

    def excerpts(self, excerpt_chars: int) -> list[str]:
        out = []
        for ev in self.evidence:
            text = normalise_ws(ev.text)
            if len(text) > excerpt_chars:
                text = text[:excerpt_chars].rstrip() + " ..."
            out.append(f"[{ev.element_id}] {ev.title}: {text}")
        return out

    def render(self, excerpt_chars: int) -> str:
        answer = "(no answer: the answer call failed)" if self.failed else normalise_ws(self.answer)
        return "\n".join([f"### Trajectory {self.label}", f"Question: {normalise_ws(self.question)}",
                          "Observations (retrieved source excerpts):", *self.excerpts(excerpt_chars),
                          f"Answer given: {answer}", verdict_line(self.correct, self.value, self.judged)])

    def feedback(self, excerpt_chars: int) -> str:
        """The text a feedback span must be quoted from: the excerpts as shown, and the verdict."""
        return norm_span("\n".join([*self.excerpts(excerpt_chars), verdict_line(self.correct, self.value, self.judged)]))

    def record(self, batch: int) -> dict:
        """What the artifact keeps of a trajectory (never the reference)."""
        return {"task_id": self.task_id, "batch": batch, "question": self.question,
                "evidence_ids": [e.element_id for e in self.evidence], "answer": self.answer,
                "correct": self.correct, "score": self.value, "answer_failed": self.failed,
                "judged": self.judged}


def norm_span(text: str) -> str:
    """Lowercase, whitespace collapsed, surrounding quotes, ellipses and punctuation stripped."""
    t = normalise_ws(str(text)).lower()
    t = re.sub(r"^(\.\.\.|[\s\"'`“”‘’.,;:])+|(\.\.\.|[\s\"'`“”‘’.,;:])+$", "", t)
    return t


def grounded_spans(spans: list[str], feedback: str) -> list[str]:
    """The spans that occur verbatim (after normalisation) in ``feedback``, deduplicated, in order."""
    out: list[str] = []
    for s in spans:
        n = norm_span(s)
        if len(n) >= MIN_SPAN_CHARS and n in feedback and normalise_ws(s) not in out:
            out.append(normalise_ws(s))
    return out


def stream_order(task_ids: list[str], seed: int) -> list[str]:
    """The guidance tasks as a stream: a seeded, process-independent permutation of their ids."""
    return sorted(task_ids, key=lambda t: stable_hash("rika-stream", seed, t))
