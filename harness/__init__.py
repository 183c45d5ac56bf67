"""SourceBench harness: data model, Method protocol, registry, splits, model layer, retrieval, runner, CLI."""

__version__ = "0.1.0"
