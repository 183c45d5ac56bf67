"""Open information extraction per passage: named entities first, then triples conditioned on them.

Two structured calls per passage (stages ``openie_ner`` and ``openie_triples``). A failed call is
recorded by the model layer and simply yields nothing: a failed NER call leaves the entity list
empty (triples are still extracted, as the official package does), a failed triple call leaves the
passage without triples and hence without graph entities.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import BaseModel

from harness.data import Element
from harness.llm import bounded_list, bounded_text

from .prompts import ner_messages, triple_messages

if TYPE_CHECKING:
    from harness.llm import BoundLLM

Triple = tuple[str, str, str]

OPENIE_MAX_TOKENS = 2048  # output budget of each extraction call (the official default)
CONCURRENCY = 16  # passages in flight at once; the model layer caps connections itself

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


def passage_text(element: Element, max_chars: int) -> str:
    """What the extraction prompts see: the title line, then the element text up to ``max_chars``."""
    return f"{element.title}\n{element.excerpt(max_chars)}"


@dataclass
class PassageExtraction:
    element_id: str
    entities: list[str] = field(default_factory=list)  # NER output as written by the model
    triples: list[Triple] = field(default_factory=list)  # normalised
    ner_failed: bool = False
    triples_failed: bool = False

    def to_json(self) -> dict:
        return {"element_id": self.element_id, "entities": self.entities, "triples": [list(t) for t in self.triples],
                "ner_failed": self.ner_failed, "triples_failed": self.triples_failed}


async def extract_passage(llm: BoundLLM, element: Element, max_chars: int) -> PassageExtraction:
    text = passage_text(element, max_chars)
    out = PassageExtraction(element.id)
    ner = await llm.structured(ner_messages(text), NamedEntities, stage="openie_ner", max_tokens=OPENIE_MAX_TOKENS)
    if ner.failed or ner.value is None:
        out.ner_failed = True
    else:
        out.entities = list(dict.fromkeys(e.strip() for e in ner.value.named_entities if e.strip()))
    tri = await llm.structured(triple_messages(text, out.entities), Triples, stage="openie_triples",
                               max_tokens=OPENIE_MAX_TOKENS)
    if tri.failed or tri.value is None:
        out.triples_failed = True
    else:
        out.triples = normalise_triples(tri.value.triples)
    return out


async def extract_all(llm: BoundLLM, elements: list[Element], max_chars: int,
                      progress: Callable[[str], None] = lambda msg: None) -> list[PassageExtraction]:
    """OpenIE over all passages, concurrently; results come back in element order."""
    sem = asyncio.Semaphore(CONCURRENCY)
    done = 0

    async def one(e: Element) -> PassageExtraction:
        nonlocal done
        async with sem:
            res = await extract_passage(llm, e, max_chars)
        done += 1
        if done % 100 == 0 or done == len(elements):
            progress(f"hipporag2 openie: {done}/{len(elements)} passages")
        return res

    return list(await asyncio.gather(*(one(e) for e in elements)))
