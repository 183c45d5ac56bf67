"""The application tier: the ``sourcebench`` command line and the conformance checks.

It may import every layer (core, judges, methods and adapters, reports); nothing imports it but
the package's public API (``sourcebench.assert_conforms``). One module per command.
"""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
