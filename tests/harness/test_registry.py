"""The registry: built-ins, installed entry points and run-time registrations, without silent replacement."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from sourcebench.harness import registry
from sourcebench.harness.errors import ConfigError


def _with_entry_points(monkeypatch, *eps: EntryPoint) -> None:
    monkeypatch.setattr(registry, "entry_points", lambda group: [e for e in eps if e.group == group])


def test_another_package_cannot_take_a_builtin_name(monkeypatch):
    _with_entry_points(monkeypatch, EntryPoint("raptor", "my_pkg.methods:Raptor", registry.METHOD_GROUP))
    with pytest.raises(ConfigError, match="'raptor' is a built-in"):
        registry.get_method_class("hybrid_rag")


def test_our_own_entry_point_for_a_builtin_is_the_builtin(monkeypatch):
    ep = EntryPoint("raptor", registry.BUILTINS[registry.METHOD_GROUP]["raptor"], registry.METHOD_GROUP)
    _with_entry_points(monkeypatch, ep)
    assert registry.get_method_class("raptor").__module__ == "sourcebench.methods.raptor"


def test_our_own_stale_entry_point_for_a_moved_builtin_is_the_builtin(monkeypatch):
    """An editable install keeps the entry points of its install time: after a built-in command moved
    (``reproduce``: reports/ to harness/cli/), its old target must not break the CLI; another package's
    entry point under that name still does."""
    from types import SimpleNamespace

    from sourcebench.harness.commands import package_commands

    old = "sourcebench.reports.reproduce:COMMAND"
    ep = EntryPoint("reproduce", old, registry.COMMAND_GROUP)._for(SimpleNamespace(name=registry.DISTRIBUTION))
    _with_entry_points(monkeypatch, ep)
    assert registry.command_targets()["reproduce"] == "sourcebench.harness.cli.reproduce:COMMAND"
    assert [c.name for c in package_commands()] == ["protocol", "reproduce"]
    other = EntryPoint("reproduce", old, registry.COMMAND_GROUP)._for(SimpleNamespace(name="my-pkg"))
    _with_entry_points(monkeypatch, other)
    with pytest.raises(ConfigError, match="my-pkg registers .* 'reproduce' is a built-in"):
        registry.command_targets()


def test_our_own_stale_entry_point_for_a_builtin_is_the_builtin(monkeypatch):
    """An editable install keeps the entry points of the day it was installed: a built-in moved since (the
    protocol command moved to harness/cli/) is still the built-in, not a conflict; another package under the
    same name with the same target is still refused."""
    class Dist:
        name = "sourcebench"

    ep = EntryPoint("protocol", "sourcebench.reports.protocols.cli:COMMAND", registry.COMMAND_GROUP)._for(Dist())
    _with_entry_points(monkeypatch, ep)
    from sourcebench.harness.commands import package_commands

    assert [c.name for c in package_commands()] == ["protocol", "reproduce"]
    Dist.name = "my_pkg"
    with pytest.raises(ConfigError, match="my_pkg registers .* 'protocol' is a built-in"):
        package_commands()


def test_a_new_name_from_another_package_is_added(monkeypatch):
    ep = EntryPoint("my_method", "sourcebench.methods.no_source:NoSource", registry.METHOD_GROUP)
    _with_entry_points(monkeypatch, ep)
    assert "my_method" in registry.method_names() and "raptor" in registry.method_names()


def test_package_commands_are_commands():
    from sourcebench.harness.commands import package_commands

    assert [c.name for c in package_commands()] == ["protocol", "reproduce"]
