"""The ``sourcebench`` subcommands that methods bring (``Method.cli_commands``).

They are found through the method registry, so the CLI and the reports import no method and a
third-party package's analysis is registered exactly as SourceLearn's ``audit`` is. Problems (a
method that cannot be imported, a hook that returns something else than ``Command`` objects, two
methods claiming one name, a name the CLI already uses) are returned as one-line messages: the CLI
warns and goes on without that command, ``sourcebench check-method`` reports them as failures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .errors import ConfigError
from .method import Command


@dataclass(frozen=True)
class MethodCommand:
    """A command and the registered method (the first, by name) that provides it."""

    method: str
    command: Command


def commands_of(name: str, cls: type) -> tuple[list[Command], list[str]]:
    """The commands one method class declares, and what is wrong with its declaration."""
    try:
        cmds = list(cls.cli_commands())
    except Exception as e:  # noqa: BLE001 - a third-party hook's bug becomes a named problem
        return [], [f"method {name}: cli_commands() raised {type(e).__name__}: {e}"]
    bad = [c for c in cmds if not isinstance(c, Command)]
    if bad:
        return [], [f"method {name}: cli_commands() must return Command objects, got {type(bad[0]).__name__}"]
    unnamed = [c for c in cmds if not c.name or c.name.startswith("-") or " " in c.name]
    if unnamed:
        return [], [f"method {name}: command name {unnamed[0].name!r} is not a subcommand name"]
    return cmds, []


def method_commands(reserved: Iterable[str] = ()) -> tuple[dict[str, MethodCommand], list[str]]:
    """Every registered method's commands by name (methods in name order), and the problems found.

    ``reserved``: names the CLI defines itself, which a method may not take.
    """
    from .registry import get_method_class, method_names

    taken = set(reserved)
    found: dict[str, MethodCommand] = {}
    problems: list[str] = []
    for name in method_names():
        try:
            cls = get_method_class(name)
        except Exception as e:  # noqa: BLE001 - an uninstallable plugin must not take the CLI down
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            if isinstance(e, ConfigError):  # the registry's own line already names the method and the cause
                problems.append(f"{first}; its commands are not available")
                continue
            problems.append(f"method {name} cannot be loaded ({type(e).__name__}: {first}); its commands "
                            "are not available")
            continue
        cmds, bad = commands_of(name, cls)
        problems += bad
        for c in cmds:
            if c.name in taken:
                problems.append(f"method {name}: command {c.name!r} is a built-in sourcebench command; not added")
            elif c.name in found and found[c.name].command != c:
                problems.append(f"method {name}: command {c.name!r} is already provided by method "
                                f"{found[c.name].method}; not added")
            elif c.name not in found:
                found[c.name] = MethodCommand(name, c)
    return found, problems


def find_command(name: str) -> Command:
    """The command a registered method provides under ``name``; a one-line error when none does."""
    found, problems = method_commands()
    if name not in found:
        why = f" ({'; '.join(problems)})" if problems else ""
        raise ConfigError(f"no registered method provides the command {name!r}{why}")
    return found[name].command


def package_commands() -> list[Command]:
    """The subcommands other packages register (``sourcebench.commands`` entry points), name order."""
    from .registry import command_targets, resolve

    out = []
    for name, target in sorted(command_targets().items()):
        cmd = resolve(target)
        if not isinstance(cmd, Command) or cmd.name != name:
            raise ConfigError(f"sourcebench.commands entry point {name!r} must name a Command called {name!r}")
        out.append(cmd)
    return out
