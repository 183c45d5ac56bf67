"""Benchmark adapters: each casts a benchmark into sources, tasks and splits, with its scorer.

One folder per benchmark (``<benchmark>/``: its adapter, fetcher, data files and README); what they
share is ``fetch/`` (downloads, the fetch manifest, venvs, the ``FetchedData`` mixin) and
``availability.py`` (local folders and the Hugging Face Hub).
"""
