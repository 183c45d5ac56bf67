"""The ``sourcebench`` command: one module per built-in command, plus the commands other packages
register (``sourcebench.commands`` entry points: ``protocol`` and ``reproduce``, both of this tier, found
the same way another package's command is) and those registered methods bring (``Method.cli_commands``,
e.g. SourceLearn's ``audit``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..commands import method_commands, package_commands
from ..errors import SourceBenchError
from . import appworld, cache, check_method, compare, data, estimate, judge, report, run
from . import list as list_command
from .common import EPILOG, Parser

BUILTIN = (run, report, list_command, data, appworld, check_method, estimate, cache, judge, compare)


def build_parser(with_method_commands: bool = True) -> argparse.ArgumentParser:
    """The CLI; ``with_method_commands``: also the subcommands registered methods bring (``audit``, ...)."""
    p = Parser(
        prog="sourcebench",
        description="SourceBench: compare source-learning methods (SourceLearn and baselines) on seeded "
        "guidance/test splits of real benchmarks, with any inspect-ai model.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    for module in BUILTIN:
        module.add_parser(sub).set_defaults(command=module.run)
    for c in package_commands():
        c.add_parser(sub).set_defaults(command=c.run)
    if with_method_commands:
        _add_method_commands(sub)
    return p


def _add_method_commands(sub: Any) -> None:
    """The subcommands of registered methods, found through the registry; one that cannot be added
    is a warning, not a broken CLI."""
    found, problems = method_commands(reserved=set(sub.choices))
    for mc in found.values():
        parser = mc.command.add_parser(sub)
        if isinstance(parser, argparse.ArgumentParser):
            parser.set_defaults(command=mc.command.run)
        else:
            problems.append(f"method {mc.method}: command {mc.command.name!r}: add_parser returned no parser")
    for msg in problems:
        print(f"sourcebench: warning: {msg}", file=sys.stderr)


def stop_on_sigterm_as_on_ctrl_c() -> None:
    """Make ``kill`` (SIGTERM) stop a command the way Ctrl-C does. By default SIGTERM ends the
    process on the spot: the call counts of a build in progress and its half-built artifact folder
    are left behind. As a KeyboardInterrupt, the runner's cleanup runs (counts written, partial
    folders removed) and the same command resumes. Background jobs (``nohup ... &``) ignore
    Ctrl-C, so SIGTERM is how they are stopped (``harness.stopping``)."""
    from ..stopping import install

    install()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    if not a.cmd:
        parser.print_help()
        return 2
    os.environ.setdefault("INSPECT_LOG_LEVEL", "warning")
    stop_on_sigterm_as_on_ctrl_c()
    try:
        return a.command(a)
    except SourceBenchError as e:
        print(f"sourcebench: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # the environment, not the input: disk full, no permission, a file where a folder goes
        where = f"{e.filename}: " if e.filename else ""
        print(f"sourcebench: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sourcebench: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
