"""inspect-ai model providers shipped with SourceBench.

``local/...`` (:mod:`harness.providers.local_llama`) runs a GGUF model in-process with llama-cpp-python
(``local/smollm2`` is the embedded default); ``scripted/...`` (:mod:`harness.providers.scripted`) is a
deterministic fake for tests. Importing :mod:`harness.providers._registry` registers them all; inspect
does so itself through the ``inspect_ai`` entry point once the project is installed.
"""
