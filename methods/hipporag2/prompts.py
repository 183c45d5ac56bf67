"""The three prompts HippoRAG 2 sends: entity recognition, entity-conditioned triple extraction,
and the recognition-memory fact filter.

Written for this project (the official package's prompts are not reused). Each extraction prompt
carries one worked example as a user/assistant exchange, as the official package does, because
small models follow a shown reply far better than a described one.
"""

from __future__ import annotations

import json

Message = dict[str, str]

_EXAMPLE_PASSAGE = (
    "Lake Tovel\n"
    "Lake Tovel lies in the Brenta Dolomites of Trentino, Italy. Until 1964 its water turned red "
    "every summer; the colour came from an alga, Tovellia sanguinea."
)
_EXAMPLE_ENTITIES = ["Lake Tovel", "Brenta Dolomites", "Trentino", "Italy", "1964", "Tovellia sanguinea"]
_EXAMPLE_TRIPLES = [
    {"subject": "Lake Tovel", "relation": "lies in", "object": "Brenta Dolomites"},
    {"subject": "Lake Tovel", "relation": "is located in", "object": "Trentino"},
    {"subject": "Trentino", "relation": "is a region of", "object": "Italy"},
    {"subject": "Lake Tovel", "relation": "turned red every summer until", "object": "1964"},
    {"subject": "Tovellia sanguinea", "relation": "coloured the water of", "object": "Lake Tovel"},
    {"subject": "Tovellia sanguinea", "relation": "is", "object": "alga"},
]

NER_SYSTEM = (
    "You pick out the named entities of a passage so they can become nodes of a knowledge graph. "
    "List every distinct thing the passage names: people, organisations, places, works, dates, "
    "quantities, and technical names such as modules, functions, classes, parameters or models. "
    "Write each entity as it appears in the passage and list it once. "
    'Reply with JSON only: {"named_entities": ["...", "..."]}.'
)

TRIPLES_SYSTEM = (
    "You turn a passage into knowledge-graph facts. A fact is a triple of subject, relation and "
    "object. Build the triples around the named entities listed with the passage: every triple "
    "should contain at least one of them, preferably two. Replace pronouns and other references "
    "with the name they stand for, and keep relations to a short verb phrase. "
    'Reply with JSON only: {"triples": [{"subject": "...", "relation": "...", "object": "..."}]}.'
)

FILTER_SYSTEM = (
    "You are the recognition-memory step of a retrieval system. You get a question and candidate "
    "facts that a search returned for it. Keep only the facts that help answer the question, "
    "including facts needed for an intermediate step when the question takes several hops. Keep "
    "at most {max_keep} facts. Copy every kept fact exactly as it is written among the candidates; "
    "never edit or invent a fact. If no candidate is relevant, keep none. "
    'Reply with JSON only: {{"facts": [{{"subject": "...", "relation": "...", "object": "..."}}]}}.'
)

_EXAMPLE_QUESTION = "In which country is the lake whose water an alga used to turn red?"
_EXAMPLE_CANDIDATES = [
    ["tovellia sanguinea", "coloured the water of", "lake tovel"],
    ["lake garda", "is the largest lake of", "italy"],
    ["lake tovel", "is located in", "trentino"],
    ["1964", "was the year of", "tokyo olympics"],
    ["trentino", "is a region of", "italy"],
]
_EXAMPLE_KEPT = [_EXAMPLE_CANDIDATES[0], _EXAMPLE_CANDIDATES[2], _EXAMPLE_CANDIDATES[4]]


def _triple_objects(triples: list[list[str]]) -> list[dict[str, str]]:
    return [{"subject": s, "relation": r, "object": o} for s, r, o in triples]


def _passage_block(passage: str) -> str:
    return f"Passage:\n```\n{passage}\n```"


def ner_messages(passage: str) -> list[Message]:
    return [
        {"role": "system", "content": NER_SYSTEM},
        {"role": "user", "content": _passage_block(_EXAMPLE_PASSAGE)},
        {"role": "assistant", "content": json.dumps({"named_entities": _EXAMPLE_ENTITIES})},
        {"role": "user", "content": _passage_block(passage)},
    ]


def triple_messages(passage: str, entities: list[str]) -> list[Message]:
    def ask(p: str, ents: list[str]) -> str:
        return _passage_block(p) + "\n\nNamed entities: " + json.dumps({"named_entities": ents}, ensure_ascii=False)

    return [
        {"role": "system", "content": TRIPLES_SYSTEM},
        {"role": "user", "content": ask(_EXAMPLE_PASSAGE, _EXAMPLE_ENTITIES)},
        {"role": "assistant", "content": json.dumps({"triples": _EXAMPLE_TRIPLES})},
        {"role": "user", "content": ask(passage, entities)},
    ]


def filter_messages(question: str, candidates: list[tuple[str, str, str]], max_keep: int) -> list[Message]:
    def ask(q: str, facts: list) -> str:
        return f"Question: {q}\n\nCandidate facts: " + json.dumps({"facts": _triple_objects(facts)}, ensure_ascii=False)

    return [
        {"role": "system", "content": FILTER_SYSTEM.format(max_keep=max_keep)},
        {"role": "user", "content": ask(_EXAMPLE_QUESTION, _EXAMPLE_CANDIDATES)},
        {"role": "assistant", "content": json.dumps({"facts": _triple_objects(_EXAMPLE_KEPT)})},
        {"role": "user", "content": ask(question, [list(c) for c in candidates])},
    ]
