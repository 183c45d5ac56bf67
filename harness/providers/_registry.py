"""Register SourceBench's inspect-ai model providers (``local/...``, ``scripted/...``).

This module is the target of the ``[project.entry-points.inspect_ai]`` entry point, so an installed
SourceBench makes ``get_model("local/smollm2")`` work in any process: when inspect cannot find a
model API by name it loads every entry point of group ``inspect_ai`` (which imports this module)
and looks again. Importing it directly has the same effect and is harmless to repeat.

Importing is cheap: the providers import llama-cpp-python and friends only when a model is created.
"""

from __future__ import annotations

from . import local_llama, scripted  # noqa: F401  (imported for their @modelapi registration)
