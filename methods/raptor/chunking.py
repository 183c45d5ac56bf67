"""RAPTOR leaf chunks: sentences packed greedily into chunks of at most ``max_tokens`` tokens.

The official code takes one text, splits it into sentences and packs them without overlap. Here the
text is the source's elements in order (the method passes ``harness.elements.disjoint_pieces``, so no
text is chunked twice), so a chunk may run across an element boundary; each chunk records the ids of
the elements its sentences came from, so evidence can cite the source.

Choices (tokens are ``harness.data.estimate_tokens``, i.e. characters / 4, as everywhere in the
harness):

- a sentence ends at ``.``, ``!`` or ``?`` followed by whitespace, or at a line break; the
  punctuation stays with the sentence, and a sentence that started a new line is joined to its
  chunk with a line break (code and key/value records keep their layout), otherwise with a space;
- a sentence longer than a chunk is cut at ``,;:``, then at whitespace, then every ``4 * max_tokens``
  characters, so no chunk exceeds the limit (the official code lets such a fragment through whole).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from sourcebench.harness.data import Element, estimate_tokens

_LINE_SPLIT = re.compile(r"\r?\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CLAUSE_END = re.compile(r"(?<=[,;:])\s*")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Chunk:
    """A leaf of the tree: packed sentences and the elements they came from (in source order)."""

    text: str
    element_ids: tuple[str, ...]

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


@dataclass(frozen=True)
class _Piece:
    text: str
    element_id: str
    new_line: bool  # the piece starts a line of its element


def split_sentences(text: str) -> Iterator[tuple[str, bool]]:
    """Sentences of ``text`` (stripped, non-empty) with whether each starts a new line."""
    for line in _LINE_SPLIT.split(text):
        first = True
        for s in _SENTENCE_END.split(line):
            s = s.strip()
            if s:
                yield s, first
                first = False


def _cut(text: str, max_chars: int) -> list[str]:
    """Cut an over-long sentence into parts of at most ``max_chars``, at the coarsest boundary that works."""
    if len(text) <= max_chars:
        return [text]
    for pattern in (_CLAUSE_END, _SPACE):
        parts = [p.strip() for p in pattern.split(text) if p.strip()]
        if len(parts) > 1:
            out: list[str] = []
            cur = ""
            for p in parts:
                for q in _cut(p, max_chars):
                    if cur and len(cur) + 1 + len(q) <= max_chars:
                        cur = cur + " " + q
                    else:
                        if cur:
                            out.append(cur)
                        cur = q
            if cur:
                out.append(cur)
            return out
    return [text[i : i + max_chars] for i in range(0, len(text), max_chars)]


def _pieces(elements: Iterable[Element], max_chars: int) -> Iterator[_Piece]:
    for e in elements:
        for sentence, new_line in split_sentences(e.text):
            for j, part in enumerate(_cut(sentence, max_chars)):
                yield _Piece(part, e.id, new_line and j == 0)


def chunk_elements(elements: Sequence[Element], max_tokens: int = 100) -> list[Chunk]:
    """Pack the sentences of ``elements`` (in order) into chunks of at most ``max_tokens`` tokens, no overlap."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    max_chars = 4 * max_tokens  # estimate_tokens(s) <= max_tokens  <=>  len(s) <= 4 * max_tokens
    chunks: list[Chunk] = []
    text = ""
    ids: list[str] = []
    prev_element = None
    for piece in _pieces(elements, max_chars):
        sep = "\n" if (piece.new_line or piece.element_id != prev_element) else " "
        if text and len(text) + len(sep) + len(piece.text) > max_chars:
            chunks.append(Chunk(text, tuple(ids)))
            text, ids = "", []
        text = piece.text if not text else text + sep + piece.text
        if piece.element_id not in ids:
            ids.append(piece.element_id)
        prev_element = piece.element_id
    if text:
        chunks.append(Chunk(text, tuple(ids)))
    return chunks
