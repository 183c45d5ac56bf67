"""SourceBench: an evaluation harness and benchmark suite for source-learning methods.

Installed as one namespace (``sourcebench.harness``, ``sourcebench.methods``, ``sourcebench.adapters``,
``sourcebench.judges``, ``sourcebench.reports``) so that nothing of ours collides with a user's own
folders. A method author needs only the names below::

    from sourcebench import Method, MethodConfig, Context, Source, Task, Answer, Evidence, assert_conforms
"""

from sourcebench.harness.cli.conformance import Problem, assert_conforms, check_method
from sourcebench.harness.data import Answer, Element, Evidence, Score, Source, Split, Task
from sourcebench.harness.method import (
    Command,
    Context,
    Entry,
    LearnContext,
    Method,
    MethodConfig,
    NotApplicable,
)
from sourcebench.harness.registry import register_benchmark, register_method

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "Command",
    "Context",
    "Element",
    "Entry",
    "Evidence",
    "LearnContext",
    "Method",
    "MethodConfig",
    "NotApplicable",
    "Problem",
    "Score",
    "Source",
    "Split",
    "Task",
    "assert_conforms",
    "check_method",
    "register_benchmark",
    "register_method",
]
