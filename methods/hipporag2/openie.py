"""Open information extraction per passage: named entities first, then triples conditioned on them.

The passage is read whole, as the official package reads each passage. A passage longer than one
call's budget (``chunk_chars``) is read in consecutive line-aligned chunks that together are its text;
each chunk gets the two structured calls (stages ``openie_ner`` and ``openie_triples``), and the
entities and triples of all chunks are merged for the passage. A failed call is recorded by the model
layer and simply yields nothing: a failed NER call leaves that chunk's entity list empty (triples are
still extracted, as the official package does), a failed triple call leaves the chunk without
triples; the passage records how many of its chunks failed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel

from sourcebench.harness.data import Element
from sourcebench.harness.schema_limits import bounded_list, bounded_text

from .prompts import ner_messages, triple_messages

if TYPE_CHECKING:
    from sourcebench.harness.llm import BoundLLM

Triple = tuple[str, str, str]

OPENIE_MAX_TOKENS = 2048  # output budget of each extraction call (the official default)
CHUNK_TOKENS = 1000  # passage text per extraction call (characters / 4); longer passages are read in chunks

_NON_ALNUM = re.compile(r"[\W_]+", re.UNICODE)


# decoder bounds only (the official extraction has none): a phrase of 120 characters, 40 per passage
Phrase = bounded_text(120)
PER_PASSAGE = 40


class NamedEntities(BaseModel):
    named_entities: bounded_list(Phrase, PER_PASSAGE)


class TripleItem(BaseModel):
    subject: Phrase
    relation: Phrase
    object: Phrase


class Triples(BaseModel):
    triples: bounded_list(TripleItem, PER_PASSAGE)


def normalise(text: str) -> str:
    """Lowercase; every run of non-alphanumeric characters becomes one space (entity node keys)."""
    return _NON_ALNUM.sub(" ", str(text).lower()).strip()


def normalise_triples(items: list[TripleItem]) -> list[Triple]:
    """Normalised, de-duplicated triples in reply order; triples without subject or object are dropped."""
    out: dict[Triple, None] = {}
    for t in items:
        triple = (normalise(t.subject), normalise(t.relation), normalise(t.object))
        if triple[0] and triple[2]:
            out.setdefault(triple, None)
    return list(out)


def passage_chunks(text: str, max_chars: int) -> list[str]:
    """``text`` in consecutive pieces of at most ``max_chars`` whose concatenation is ``text``: whole lines
    packed greedily, a longer line cut at its last space before the limit (else at the limit)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    chunks: list[str] = []
    cur = ""
    for line in text.splitlines(keepends=True):
        while len(line) > max_chars:
            cut = line.rfind(" ", 0, max_chars) + 1 or max_chars
            if cur:
                chunks.append(cur)
                cur = ""
            chunks.append(line[:cut])
            line = line[cut:]
        if cur and len(cur) + len(line) > max_chars:
            chunks.append(cur)
            cur = ""
        cur += line
    if cur:
        chunks.append(cur)
    return [c for c in chunks if c.strip()]


def passage_texts(element: Element, chunk_chars: int) -> list[str]:
    """What the extraction prompts see, one text per call: the title line, then the passage's next chunk."""
    return [f"{element.title}\n{c.strip()}" for c in passage_chunks(element.text, chunk_chars)]


@dataclass
class PassageExtraction:
    element_id: str
    entities: list[str] = field(default_factory=list)  # NER output as written by the model, all chunks
    triples: list[Triple] = field(default_factory=list)  # normalised, all chunks, first occurrence order
    ner_failed: bool = False  # some chunk's NER call failed
    triples_failed: bool = False  # some chunk's triple call failed
    chunks: int = 1
    ner_failed_chunks: int = 0
    triple_failed_chunks: int = 0

    def to_json(self) -> dict:
        return {"element_id": self.element_id, "entities": self.entities, "triples": [list(t) for t in self.triples],
                "ner_failed": self.ner_failed, "triples_failed": self.triples_failed, "chunks": self.chunks,
                "ner_failed_chunks": self.ner_failed_chunks, "triple_failed_chunks": self.triple_failed_chunks}


async def _extract_chunk(llm: BoundLLM, text: str) -> tuple[list[str] | None, list[Triple] | None]:
    """(entities, triples) of one chunk; None where that call failed."""
    entities: list[str] | None = None
    ner = await llm.structured(ner_messages(text), NamedEntities, stage="openie_ner", max_tokens=OPENIE_MAX_TOKENS)
    if not (ner.failed or ner.value is None):
        entities = list(dict.fromkeys(e.strip() for e in ner.value.named_entities if e.strip()))
    tri = await llm.structured(triple_messages(text, entities or []), Triples, stage="openie_triples",
                               max_tokens=OPENIE_MAX_TOKENS)
    triples = None if tri.failed or tri.value is None else normalise_triples(tri.value.triples)
    return entities, triples


async def extract_passage(llm: BoundLLM, element: Element, chunk_chars: int) -> PassageExtraction:
    texts = passage_texts(element, chunk_chars) or [element.title]
    out = PassageExtraction(element.id, chunks=len(texts))
    entities: dict[str, None] = {}
    triples: dict[Triple, None] = {}
    # the chunks of a passage are independent (each its own NER -> triples chain): all at once, merged in order
    for ents, tris in await asyncio.gather(*(_extract_chunk(llm, text) for text in texts)):
        if ents is None:
            out.ner_failed_chunks += 1
        else:
            entities.update(dict.fromkeys(ents))
        if tris is None:
            out.triple_failed_chunks += 1
        else:
            triples.update(dict.fromkeys(tris))
    out.entities, out.triples = list(entities), list(triples)
    out.ner_failed, out.triples_failed = out.ner_failed_chunks > 0, out.triple_failed_chunks > 0
    return out


async def extract_all(llm: BoundLLM, elements: list[Element], chunk_chars: int,
                      progress: Callable[[str], None] = lambda msg: None) -> list[PassageExtraction]:
    """OpenIE over all passages (each read whole, in chunks of ``chunk_chars``), concurrently; results
    come back in element order. Every passage starts at once: the run's connection budget
    (``--max-connections``) bounds the calls in flight."""
    done = 0

    async def one(e: Element) -> PassageExtraction:
        nonlocal done
        res = await extract_passage(llm, e, chunk_chars)
        done += 1
        if done % 100 == 0 or done == len(elements):
            progress(f"hipporag2 openie: {done}/{len(elements)} passages")
        return res

    return list(await asyncio.gather(*(one(e) for e in elements)))
