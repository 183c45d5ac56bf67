"""OpenAI's size limits for strict structured outputs, checked, and met by relaxing id sets.

OpenAI rejects (HTTP 400) a strict ``json_schema`` response format past these limits, documented in
its Structured Outputs guide, section "Supported schemas"
(https://platform.openai.com/docs/guides/structured-outputs#supported-schemas). The numbers were
raised since the 2024 launch (then 100 properties, 5 levels, 500 enum values); the ones below were
checked against a February 2026 summary of that section (jsonschemaprofiles.unitvectorylabs.com,
"OpenAI Structured Outputs Profile"), the guide itself not being readable from here:

* at most 5,000 object properties in all, and at most 10 levels of nesting;
* at most 1,000 enum values across all enum properties;
* a single string enum of more than 250 values: at most 15,000 characters in all its values;
* at most 120,000 characters in all property names, definition names, enum values and const values.

The guide does not say how levels are counted; here every object and every array on the way down
is a level (the root object is level 1), which can only overcount.

The enums that pass these limits on a large source are id sets (``with_choices`` below: the
element, unit, entity or region ids shown in a prompt). :func:`within_limits` turns such a field
back into a plain string, largest sets first, until the schema is within every limit; that is safe
because every caller checks the ids it gets back (against the ids it showed, or those the source or
model has) and drops the others: what is lost is only the decoder's guarantee that none is invented. Too many properties or levels are the schema's own fault and
are reported by :func:`violations`, never relaxed.
"""

from __future__ import annotations

import collections
import copy
import functools
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, Field

DOCS = "https://platform.openai.com/docs/guides/structured-outputs#supported-schemas"
MAX_PROPERTIES = 5_000
MAX_NESTING = 10
MAX_ENUM_VALUES = 1_000
LARGE_ENUM = 250  # a string enum with more values than this ...
MAX_LARGE_ENUM_CHARS = 15_000  # ... may have at most this many characters in all its values
MAX_TOTAL_CHARS = 120_000

RELAXED_STRING = "one of the ids shown in the prompt, copied exactly"
RELAXED_ARRAY = "ids shown in the prompt, each copied exactly"

_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_DEFS = ("$defs", "definitions")


@dataclass
class _Stats:
    properties: int = 0
    depth: int = 0
    deepest: str = ""
    enum_values: int = 0
    chars: int = 0
    large_enums: list[tuple[str, int, int]] | None = None  # (path, values, characters) over the limit


def _value_chars(v: Any) -> int:
    return len(v) if isinstance(v, str) else len(json.dumps(v, ensure_ascii=False))


def _is_level(node: dict[str, Any]) -> bool:
    t = node.get("type")
    types = t if isinstance(t, list) else [t]
    return "object" in types or "array" in types or "properties" in node or "items" in node


def _children(node: dict[str, Any], path: str) -> Iterator[tuple[dict[str, Any], str]]:
    props = node.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            if isinstance(sub, dict):
                yield sub, f"{path}.{name}"
    items = node.get("items")
    if isinstance(items, dict):
        yield items, f"{path}[]"
    elif isinstance(items, list):
        yield from ((x, f"{path}[{i}]") for i, x in enumerate(items) if isinstance(x, dict))
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        yield extra, f"{path}.*"
    for key in _LISTS:
        if isinstance(node.get(key), list):
            yield from ((x, f"{path}|{key}{i}") for i, x in enumerate(node[key]) if isinstance(x, dict))


def _walk(node: dict[str, Any], path: str, level: int, st: _Stats) -> None:
    level += 1 if _is_level(node) else 0
    if level > st.depth:
        st.depth, st.deepest = level, path
    props = node.get("properties")
    if isinstance(props, dict):
        st.properties += len(props)
        st.chars += sum(len(n) for n in props)
    for key in _DEFS:
        defs = node.get(key)
        if isinstance(defs, dict):  # a definition is measured from its own root; $ref is not followed
            for name, sub in defs.items():
                st.chars += len(name)
                if isinstance(sub, dict):
                    _walk(sub, f"{key}.{name}", 0, st)
    enum = node.get("enum")
    if isinstance(enum, list):
        st.enum_values += len(enum)
        chars = sum(_value_chars(v) for v in enum)
        st.chars += chars
        if len(enum) > LARGE_ENUM and all(isinstance(v, str) for v in enum) and chars > MAX_LARGE_ENUM_CHARS:
            st.large_enums = [*(st.large_enums or []), (path, len(enum), chars)]
    if "const" in node:
        st.chars += _value_chars(node["const"])
    for sub, sub_path in _children(node, path):
        _walk(sub, sub_path, level, st)


def _measure(schema: dict[str, Any]) -> _Stats:
    st = _Stats()
    _walk(schema, "$", 0, st)
    return st


def _relaxable(st: _Stats) -> list[str]:
    out = []
    if st.enum_values > MAX_ENUM_VALUES:
        out.append(f"{st.enum_values:,} enum values in all (at most {MAX_ENUM_VALUES:,})")
    for path, n, chars in st.large_enums or []:
        out.append(f"string enum at {path} has {n:,} values of {chars:,} characters in all (an enum of more "
                   f"than {LARGE_ENUM} values may have at most {MAX_LARGE_ENUM_CHARS:,})")
    if st.chars > MAX_TOTAL_CHARS:
        out.append(f"{st.chars:,} characters of property names, definition names, enum and const values "
                   f"(at most {MAX_TOTAL_CHARS:,})")
    return out


def violations(schema: dict[str, Any]) -> list[str]:
    """Every OpenAI strict-mode limit ``schema`` passes, each with its numbers (empty when within)."""
    st = _measure(schema)
    out = []
    if st.properties > MAX_PROPERTIES:
        out.append(f"{st.properties:,} object properties in all (at most {MAX_PROPERTIES:,})")
    if st.depth > MAX_NESTING:
        out.append(f"{st.depth} levels of nesting at {st.deepest} (at most {MAX_NESTING}; objects and arrays "
                   "count as levels)")
    return out + _relaxable(st)


@dataclass
class _IdField:
    """One property carrying an enum of strings (on itself, or on its array's items)."""

    name: str
    holder: list[Any]  # the keys from the root down to the property's schema
    array: bool
    values: int
    chars: int


def _id_fields(node: Any, at: list[Any], names: set[str] | None) -> Iterator[_IdField]:
    if isinstance(node, list):
        for i, x in enumerate(node):
            yield from _id_fields(x, [*at, i], names)
        return
    if not isinstance(node, dict):
        return
    props = node.get("properties")
    for k, v in node.items():
        if k == "properties" and isinstance(props, dict):
            for name, sub in props.items():
                where = [*at, "properties", name]
                if isinstance(sub, dict) and (names is None or name in names):
                    target, array = sub, False
                    if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
                        target, array = sub["items"], True
                    enum = target.get("enum")
                    if target.get("type") == "string" and isinstance(enum, list) and enum:
                        yield _IdField(name, where, array, len(enum), sum(_value_chars(x) for x in enum))
                yield from _id_fields(sub, where, names)
        elif isinstance(v, (dict, list)):
            yield from _id_fields(v, [*at, k], names)


def _relax(field: _IdField, root: dict[str, Any]) -> None:
    node: Any = root
    for k in field.holder:
        node = node[k]
    target = node["items"] if field.array else node
    del target["enum"]
    note = RELAXED_ARRAY if field.array else RELAXED_STRING
    desc = node.get("description") or ""
    if note not in desc:
        node["description"] = f"{desc}; {note}" if desc else note


def within_limits(schema: dict[str, Any], fields: Iterable[str] | None = None) -> dict[str, Any]:
    """``schema`` with id sets turned back into plain strings until it is within OpenAI's limits.

    ``fields``: the names of the properties that carry id sets (the keys of ``with_choices``'
    ``choices``); None takes every property whose schema, or whose array items' schema, is a string
    enum. Properties of one name are relaxed together (``choices`` gives them one set), the set with
    the most values first (then the most characters, then by name), and only while an enum limit or
    the character limit is passed. ``schema`` itself is returned when it is within the limits, a
    relaxed copy otherwise (the input is never changed); a schema still over a limit after that has
    too many properties or levels, which :func:`violations` reports.
    """
    if not _relaxable(_measure(schema)):
        return schema
    names = None if fields is None else set(fields)
    groups: dict[str, list[_IdField]] = {}
    for f in _id_fields(schema, [], names):
        groups.setdefault(f.name, []).append(f)
    order = sorted(groups.items(), key=lambda g: (-sum(f.values for f in g[1]), -sum(f.chars for f in g[1]), g[0]))
    out = json.loads(json.dumps(schema))  # a copy that shares no node, not even where ``schema`` does
    for _, group in order:
        for f in group:
            _relax(f, out)
        if not _relaxable(_measure(out)):
            break
    return out

# -- the schemas the model layer sends ------------------------------------------------------------------
# What a method's pydantic model becomes on the wire: OpenAI's strict form (with the keywords it refuses
# turned into words), the array bounds and one-value literals inspect's ``JSONSchema`` type drops, the
# registry of full schemas an in-process decoder reads back, and the form llama.cpp's grammar converter
# handles best.

# keywords OpenAI's strict mode refuses; on its API they become words in the field's description
_UNPORTABLE = {"maxLength": "at most {} characters", "minLength": "at least {} characters",
               "maximum": "at most {}", "minimum": "at least {}",
               "maxItems": "at most {} items", "minItems": "at least {} items"}


def strict_schema(node: Any, portable: bool = False) -> Any:
    """A JSON schema in the strict form structured-output APIs accept (OpenAI's ``strict: true``):
    every object with properties lists all of them as required and forbids others, and ``default``
    is dropped (it means nothing to a decoder). A field with a default must then be written out
    (an empty list, say); the reply still validates against the pydantic model. Constrained
    decoders (llama.cpp, vLLM) benefit too: with optional keys a grammar lets a weak model answer
    ``{}`` and skip the task. ``portable`` also turns length and range limits, which OpenAI's
    strict mode rejects, into words in the description (pydantic still checks them)."""
    if isinstance(node, list):
        return [strict_schema(x, portable) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    limits: list[str] = []
    for k, v in node.items():
        if k == "default":
            continue
        if portable and k in _UNPORTABLE and not isinstance(v, (dict, list)):
            limits.append(_UNPORTABLE[k].format(v))
        elif k == "properties" and isinstance(v, dict):
            out[k] = {n: strict_schema(sub, portable) for n, sub in v.items()}
        else:
            out[k] = strict_schema(v, portable)
    if limits:
        out["description"] = "; ".join([*([out["description"]] if out.get("description") else []), *limits])
    if isinstance(out.get("properties"), dict) and out["properties"]:
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def with_bound_words(node: Any) -> Any:
    """The schema with its length, range and count limits kept *and* written into the descriptions
    (as ``portable`` writes them): an OpenAI-compatible server whose decoder enforces ``maxLength`` and
    ``maxItems`` (vLLM, llama.cpp's server) reads the keys, one that ignores them shows the model the words."""
    if isinstance(node, list):
        return [with_bound_words(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: ({n: with_bound_words(sub) for n, sub in v.items()} if k in ("properties", "$defs") and isinstance(v, dict)
               else with_bound_words(v)) for k, v in node.items()}
    limits = [_UNPORTABLE[k].format(v) for k, v in node.items() if k in _UNPORTABLE and not isinstance(v, (dict, list))]
    if limits:
        out["description"] = "; ".join([*([out["description"]] if out.get("description") else []), *limits])
    return out


@functools.lru_cache(maxsize=512)
def schema_json(schema: type[BaseModel], portable: bool = False) -> dict[str, Any]:
    """The strict JSON schema sent for a model class (inlined ``$defs``), made once per class; it
    is also part of the cache key, so a change to it is a cache miss, never a stale reply."""
    from inspect_ai.util import json_schema as to_json_schema

    reduced = to_json_schema(schema).model_dump(exclude_none=True)
    return strict_schema(_with_array_bounds(reduced, _pydantic_schema(schema)), portable)


_ARRAY_BOUNDS = ("minItems", "maxItems")


def _pydantic_schema(schema: type[BaseModel]) -> dict[str, Any]:
    return prepare_json_schema(schema.model_json_schema())


def _with_array_bounds(node: Any, full: Any) -> Any:
    """``node`` (inspect's reading of a model's schema) with the array bounds pydantic's own schema
    has (``Field(max_length=...)`` on a list), which inspect's ``JSONSchema`` type drops, and with
    the value of a one-value ``Literal`` (pydantic's ``const``, which inspect reads as any string):
    the branches of a union told apart by such a field stay apart for the decoder."""
    if not isinstance(node, dict) or not isinstance(full, dict):
        return node
    out = dict(node)
    for k in _ARRAY_BOUNDS:
        if k in full and k not in out:
            out[k] = full[k]
    if "enum" not in out and "const" in full and out.get("type") == "string":
        out["enum"] = [full["const"]]
    props, full_props = node.get("properties"), full.get("properties")
    if isinstance(props, dict) and isinstance(full_props, dict):
        out["properties"] = {n: _with_array_bounds(sub, full_props.get(n)) for n, sub in props.items()}
    if isinstance(node.get("items"), dict):
        out["items"] = _with_array_bounds(node["items"], full.get("items"))
    if isinstance(node.get("anyOf"), list) and isinstance(full.get("anyOf"), list) \
            and len(node["anyOf"]) == len(full["anyOf"]):
        out["anyOf"] = [_with_array_bounds(a, b) for a, b in zip(node["anyOf"], full["anyOf"], strict=True)]
    return out


def bounded_text(chars: int) -> Any:
    """A ``str`` field type whose schema says ``maxLength: chars`` but whose validation does not.

    A grammar-constrained decoder (llama.cpp, vLLM) enforces the bound, so a weak model that starts
    repeating a phrase inside one string ("the daughter of the daughter of ...") is made to close it
    instead of running on to ``max_tokens`` (in a SmolLM2 SourceLearn construction, 32 of 151 calls
    did, 58% of all generated tokens). OpenAI's strict mode gets the bound as words in the description
    (:func:`strict_schema`); a longer reply from any model still validates."""
    return Annotated[str, Field(json_schema_extra={"maxLength": int(chars)})]


def bounded_list(item: Any, items: int) -> Any:
    """A ``list[item]`` field type whose schema says ``maxItems: items``, again for the decoder only
    (a small model under a grammar also repeats list entries until ``max_tokens``). inspect's schema
    type cannot carry ``maxItems``: in-process decoders get it through :func:`full_schema`, OpenAI
    (``openai/``) as words in the description; other servers (vLLM, llama.cpp server) never see it."""
    return Annotated[list[item], Field(json_schema_extra={"maxItems": int(items)})]


def with_choices(schema: dict[str, Any], choices: dict[str, list[str]]) -> dict[str, Any]:
    """``schema`` with every property named in ``choices`` (a string, or an array of strings)
    limited to those values by an ``enum``. Used for ids the model must copy from its prompt
    (element ids, excerpt ids): a constrained decoder then cannot invent or garble one, and an
    API with structured outputs is told the closed set. Properties with an empty choice list
    are left as they are (an empty enum would make the schema unsatisfiable)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {k: walk(v) for k, v in node.items() if k != "properties"}
        if isinstance(node.get("properties"), dict):
            props = {}
            for name, sub in node["properties"].items():
                sub = walk(sub)
                values = list(dict.fromkeys(choices.get(name) or []))
                if values and isinstance(sub, dict):
                    if sub.get("type") == "string":
                        sub = {**sub, "enum": values}
                    elif sub.get("type") == "array" and isinstance(sub.get("items"), dict) \
                            and sub["items"].get("type") == "string":
                        sub = {**sub, "items": {**sub["items"], "enum": values}}
                props[name] = sub
            out["properties"] = props
        return out

    return walk(schema)


# Schemas as the harness built them, by the reduced form inspect's ``JSONSchema`` type keeps (it has
# no minItems/maxItems). A decoder running in this process (``local/`` models) looks its response
# schema up here, so it enforces array bounds that no request to a server could carry through inspect.
_FULL_SCHEMAS: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
_FULL_SCHEMAS_MAX = 4096
_FULL_SCHEMAS_LOCK = threading.Lock()


def _reduced_key(reduced: dict[str, Any]) -> str:
    return json.dumps(reduced, sort_keys=True, ensure_ascii=False)


def json_schema_model(schema: dict[str, Any]) -> Any:
    from inspect_ai.util import JSONSchema

    model = JSONSchema.model_validate(schema)
    reduced = model.model_dump(exclude_none=True)
    if reduced != schema:
        key = _reduced_key(reduced)
        with _FULL_SCHEMAS_LOCK:
            _FULL_SCHEMAS[key] = schema
            _FULL_SCHEMAS.move_to_end(key)
            while len(_FULL_SCHEMAS) > _FULL_SCHEMAS_MAX:
                _FULL_SCHEMAS.popitem(last=False)
    return model


def full_schema(reduced: dict[str, Any]) -> dict[str, Any]:
    """The schema the harness built whose reduced form (inspect's ``JSONSchema`` dumped) is
    ``reduced``, with the keys that form lost; ``reduced`` itself if the harness built none."""
    with _FULL_SCHEMAS_LOCK:
        return _FULL_SCHEMAS.get(_reduced_key(reduced), reduced)


def inspect_schema(schema: type[BaseModel], portable: bool = False) -> Any:
    return json_schema_model(schema_json(schema, portable))  # not cached: it (re)registers the full form


# JSON schema for "any JSON value": llama-cpp's converter reads an empty schema {} as "any *object*"
_ANY_VALUE: dict[str, Any] = {"type": ["string", "number", "integer", "boolean", "array", "object", "null"]}
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "not")
_SUBSCHEMA_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_DICT_KEYS = ("properties", "$defs", "definitions")


def prepare_json_schema(schema: BaseModel | dict[str, Any]) -> dict[str, Any]:
    """A JSON schema as llama-cpp-python's grammar converter handles it best.

    * accepts inspect's ``JSONSchema`` (dumped without ``None`` fields) or a plain dict such as
      pydantic's ``model_json_schema()``;
    * inlines local ``$ref``s (``#/$defs/...``, ``#/definitions/...``); a recursive reference is left in
      place (the converter resolves it) and ``$defs`` is kept only for those;
    * merges a single-element ``allOf`` (pydantic's wrapper for a described ``$ref``) into its parent,
      since the converter treats ``allOf`` as object composition only;
    * turns an empty sub-schema ``{}`` (any value) into an explicit union of all JSON types, because
      the converter reads ``{}`` as "any object".
    """
    if isinstance(schema, BaseModel):
        raw: dict[str, Any] = schema.model_dump(exclude_none=True)
    else:
        raw = copy.deepcopy(dict(schema))
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        for name, sub in (raw.pop(key, None) or {}).items():
            defs[f"#/{key}/{name}"] = sub
    kept: dict[str, Any] = {}  # definitions still referenced (recursive ones)

    def resolve(node: Any, expanding: frozenset[str]) -> Any:
        if isinstance(node, list):
            return [resolve(x, expanding) for x in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref in defs:
            extra = {k: v for k, v in node.items() if k != "$ref"}
            if ref in expanding:  # recursion: keep the reference
                kept[ref] = defs[ref]
                return {"$ref": ref, **extra}
            target = resolve(copy.deepcopy(defs[ref]), expanding | {ref})
            return {**target, **resolve(extra, expanding)}  # the referring node's keys win
        out: dict[str, Any] = {}
        for k, v in node.items():
            if k in _SUBSCHEMA_DICT_KEYS and isinstance(v, dict):
                out[k] = {name: _fix_any(resolve(sub, expanding)) for name, sub in v.items()}
            elif k in _SUBSCHEMA_LIST_KEYS and isinstance(v, list):
                out[k] = [_fix_any(resolve(sub, expanding)) for sub in v]
            elif k in _SUBSCHEMA_KEYS and isinstance(v, dict):
                out[k] = _fix_any(resolve(v, expanding))
            else:
                out[k] = v
        all_of = out.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
            single = out.pop("allOf")[0]
            out = {**single, **out}
        return out

    result = resolve(raw, frozenset())
    # recursive definitions stay referenced: put them back where the converter looks them up
    done: set[str] = set()
    while set(kept) - done:
        for ref in sorted(set(kept) - done):
            done.add(ref)
            section, name = ref[2:].split("/", 1)
            result.setdefault(section, {})[name] = resolve(copy.deepcopy(defs[ref]), frozenset({ref}))
    return result


def _fix_any(sub: Any) -> Any:
    if isinstance(sub, dict) and not sub:
        return dict(_ANY_VALUE)
    return sub
