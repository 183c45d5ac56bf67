"""Documentation generated from the code, so that it cannot drift from it.

``python -m sourcebench.harness.docgen methods > docs/methods.md`` writes the methods page from the method
registry: each method's description, docstrings, version, whether it learns from guidance tasks,
its ``Config`` fields (type, bounds, default, the field's description or its trailing source
comment) and its declared ``deviations``. ``tests/test_docs.py`` regenerates the page and fails when
the committed file differs.

By default only the methods shipped in this repository (classes in the ``methods`` package) are
documented, so the page does not depend on which plugins are installed; ``--all`` adds every
registered method.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import json
import re
import sys
import tokenize
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from . import registry

REFRESH = "python -m sourcebench.harness.docgen methods > docs/methods.md"
BUILTIN_PACKAGE = "sourcebench.methods"

_BOUNDS = (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"), ("min_length", "min length"),
           ("max_length", "max length"))


def markdown_text(doc: str | None) -> str:
    """A docstring as Markdown: common indentation removed, RST ``literals`` as `code`."""
    return re.sub(r"``(.+?)``", r"`\1`", inspect.cleandoc(doc)) if doc else ""


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, one line)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def field_comments(model: type[BaseModel]) -> dict[str, str]:
    """Trailing ``# comments`` of the annotated fields in the class bodies of ``model`` and its bases.

    Config fields are documented by such comments in this code base; pydantic does not keep them,
    so they are read from the source. A subclass's comment wins over a base's.
    """
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            src = inspect.getsource(cls)
        except (OSError, TypeError):
            continue
        src = inspect.cleandoc("\n" + src) if src[:1].isspace() else src
        comments: dict[int, str] = {}
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
        body = ast.parse(src).body[0]
        for node in getattr(body, "body", []):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                text = comments.get(node.end_lineno or node.lineno)
                if text:
                    out[node.target.id] = text
    return out


def type_name(annotation: Any) -> str:
    """A readable type: ``int``, ``str | None``, ``"a" | "b"`` for a Literal, ``list[str]``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if annotation is type(None):
        return "None"
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def bounds(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)


def default_value(field: FieldInfo) -> str:
    """The default as JSON (the form ``--method-config METHOD.KEY=VALUE`` and configs take)."""
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return repr(value)


def settings_table(config: type[BaseModel]) -> list[str]:
    fields = config.model_fields
    if not fields:
        return ["No settings."]
    comments = field_comments(config)
    task_time = set(getattr(config, "TASK_TIME_OPTIONS", ()))
    lines = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for name, f in fields.items():
        kind = type_name(f.annotation) + (f", {bounds(f)}" if bounds(f) else "")
        meaning = f.description or comments.get(name, "")
        if name in task_time:
            meaning = (meaning + " " if meaning else "") + "(task-time: learning uses the default)"
        lines.append(f"| `{name}` | `{cell(kind)}` | `{cell(default_value(f))}` | {cell(meaning)} |")
    return lines


def builtin_method_names() -> list[str]:
    """Registered methods whose class lives in this repository's ``methods`` package."""
    out = []
    for name in registry.method_names():
        module = registry.get_method_class(name).__module__
        if module == BUILTIN_PACKAGE or module.startswith(BUILTIN_PACKAGE + "."):
            out.append(name)
    return out


def _anchor(name: str) -> str:
    return "#" + re.sub(r"[^\w\- ]", "", name.lower()).replace(" ", "-")


def methods_markdown(names: list[str]) -> str:
    classes = {n: registry.get_method_class(n) for n in names}
    out = [
        "# Methods",
        "",
        f"_Generated from the method registry by `{REFRESH}`: edit the methods' code, not this page._",
        "",
        ("Every method answers through the same answer prompt (`harness/benchmark.py`, `Benchmark.solve`); methods "
         "differ only in the context they add (evidence and notes). `sourcebench list` shows what is installed, "
         "with versions. A setting is changed with `--method-config METHOD.KEY=VALUE` on `sourcebench run` "
         "(values parsed as JSON when possible) or with a method's `config` in a `sourcebench reproduce` config; "
         "unknown keys are an error. Declared deviations (where an implementation departs from the published "
         "method) are also written to `run.json` and shown in every report."),
        "",
        "| method | version | learns from guidance | what |",
        "|---|---|---|---|",
    ]
    for n, c in classes.items():
        guided = "yes (one artifact per split)" if c.uses_guidance else "no (one artifact per source)"
        out.append(f"| [`{n}`]({_anchor(n)}) | {cell(c.version)} | {guided} | {cell(c.description)} |")
    module_of: dict[str, str] = {}
    config_of: dict[type, str] = {}
    deviations_of: dict[tuple[str, ...], str] = {}
    for n, c in classes.items():
        learns = "yes" if c.uses_guidance else "no"
        out += ["", f"## `{n}`", "",
                f"`{c.__module__}:{c.__qualname__}` · version {c.version} · learns from guidance tasks: {learns}"]
        if c.description:
            out += ["", markdown_text(c.description[:1].upper() + c.description[1:]) + "."]
        if c.__doc__:
            out += ["", markdown_text(c.__doc__)]
        module_doc = sys.modules[c.__module__].__doc__
        if c.__module__ in module_of:
            first = module_of[c.__module__]
            out += ["", f"Module `{c.__module__}`: see [`{first}`]({_anchor(first)})."]
        elif module_doc:
            module_of[c.__module__] = n
            out += ["", f"From `{c.__module__}`:", "", markdown_text(module_doc)]
        out += ["", f"### Settings of `{n}`", ""]
        if c.Config in config_of:
            out.append(f"As [`{config_of[c.Config]}`]({_anchor(config_of[c.Config])}) (`{c.Config.__name__}`).")
        else:
            config_of[c.Config] = n
            out += [f"`{c.Config.__name__}`:", "", *settings_table(c.Config)]
        out += ["", f"### Deviations of `{n}`", ""]
        devs = tuple(c.deviations)
        if not devs:
            out.append("None declared.")
        elif devs in deviations_of:
            out.append(f"As [`{deviations_of[devs]}`]({_anchor(deviations_of[devs])}).")
        else:
            deviations_of[devs] = n
            out += [f"- {' '.join(markdown_text(d).split())}" for d in devs]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.docgen", description=__doc__.split("\n\n")[0])
    p.add_argument("page", choices=["methods"], help="the page to write to stdout")
    p.add_argument("--all", action="store_true", help="every registered method, installed plugins included")
    a = p.parse_args(argv)
    names = registry.method_names() if a.all else builtin_method_names()
    sys.stdout.write(methods_markdown(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
