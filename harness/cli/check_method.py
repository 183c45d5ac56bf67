"""``sourcebench check-method``: the conformance checks on a registered method (see ``conformance``)."""

from .conformance import add_parser
from .conformance import main as run

__all__ = ["add_parser", "run"]
