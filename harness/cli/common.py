"""What the commands of the CLI share: the epilogs, one-line usage errors, the console."""

from __future__ import annotations

import argparse

EPILOG = """examples:
  sourcebench run --benchmark phantomwiki --methods hybrid_rag,no_source --model local/smollm2 --limit 20
  sourcebench run --benchmark swe_qa --sources flask --opt flask=./flask-3.1.1 --methods hybrid_rag \\
      --model openai/gpt-4o-mini --judge-model openai/gpt-4o
  sourcebench report runs/phantomwiki
  sourcebench judge apibench --hub torchhub --responses responses.jsonl

models are inspect-ai model names: local/smollm2 (embedded, offline), openai/<model> (OPENAI_API_KEY),
openai-api/<service>/<model> for any OpenAI-compatible server (<SERVICE>_BASE_URL, <SERVICE>_API_KEY),
vllm/<model>, scripted/extractive (deterministic test model)."""


FETCH_EPILOG = """what each benchmark gets:
  apibench       the Gorilla repository's API databases, eval sets and 0-shot questions (pinned commit)
  swe_qa         SWE-QA-Bench's question files; the six repositories cloned at their pinned commits
                 (--opt repos=none: questions only; repos=flask,pytest: those)
  multidoc2dial  the official multidoc2dial.zip, unpacked
  narrativeqa    the test split's rows of the paper's 12 stories (--opt stories=ID,...), from the Hub
  phantomwiki    a fresh universe from the official generator (Python >= 3.12 and SWI-Prolog needed):
                 --seed N, --opt size=N (people), depth=N, questions_per_type=N, name=DIR
AppWorld is set up with `sourcebench appworld-setup`."""


# The names of the commands in main.BUILTIN, for the checks that must know them without building the
# CLI (conformance: a method's command may not take one); tests/harness/test_cli.py keeps them equal.
BUILTIN_COMMANDS = ("run", "report", "list", "data", "appworld-setup", "check-method", "estimate", "cache", "judge",
                    "compare")


class Parser(argparse.ArgumentParser):
    """Usage errors as one line (naming the option), not a usage dump."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def console():
    from rich.console import Console

    return Console(stderr=False, highlight=False)
