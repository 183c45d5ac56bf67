"""The AppWorld API specifications as a SourceBench source: one element per API, apps as regions.

An element's text is the specification exactly as the package prepares it (the dict
``apis.api_docs.show_api_doc`` would return), as indented JSON, so what a method retrieves is what
the original documentation app would have shown. Paths are ``app/api`` so methods that carve a
source into folders get one region per app.
"""

from __future__ import annotations

import json
from typing import Any

from sourcebench.harness.data import Element, Source
from sourcebench.harness.errors import DataError

DOCS_APP = "api_docs"


def spec_element(spec: dict[str, Any]) -> Element:
    app, api = str(spec["app_name"]), str(spec["api_name"])
    return Element(
        id=f"{app}.{api}", title=f"{app}.{api}: {str(spec.get('description', '')).strip()}",
        text=json.dumps(spec, indent=1, ensure_ascii=False), path=f"{app}/{api}", kind="api",
        metadata={"app": app, "api_name": api, "domain": app, "method": spec.get("method"), "path": spec.get("path")},
    )


def docs_source(data: dict[str, Any], origin: str, source_id: str = "appworld") -> Source:
    """The source from the prepared docs, without the documentation app (the agent cannot call it)."""
    docs = data["docs"]
    elements, seen = [], set()
    for app, specs in docs.items():
        if app == DOCS_APP:
            continue
        if not isinstance(specs, list):
            raise DataError(f"{origin}: docs of app '{app}' is not a list of API specifications")
        for spec in specs:
            el = spec_element(spec)
            if el.id in seen:
                raise DataError(f"{origin}: API {el.id} appears twice")
            seen.add(el.id)
            elements.append(el)
    if not elements:
        raise DataError(f"{origin}: no API specifications")
    apps = {a: d for a, d in (data.get("apps") or {}).items() if a != DOCS_APP}
    n_all = sum(len(v) for v in docs.values())
    return Source(
        id=source_id, kind="api_docs", elements=elements, origin=origin,
        description=("API documentation of the AppWorld apps (" + ", ".join(apps or [a for a in docs if a != DOCS_APP])
                     + "), one element per API"),
        metadata={"appworld_version": data.get("appworld_version"), "apps": apps,
                  "n_specs_with_docs_app": n_all, "n_specs": len(elements)},
    )
