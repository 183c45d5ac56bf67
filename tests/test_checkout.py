"""The suite tests this checkout's code, not another copy: an editable install of another checkout (as in
CI's bare-clone run, which shares the venv) must not shadow it (tests/conftest.py links this root as
``sourcebench`` first on the path)."""

import importlib
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("package", ["sourcebench", *(f"sourcebench.{p}" for p in
                                                    ("harness", "adapters", "methods", "judges", "reports"))])
def test_imports_this_checkout(package):
    where = Path(importlib.import_module(package).__file__).resolve()
    assert where.is_relative_to(ROOT.resolve()), f"{package} imported from {where}, not from {ROOT}"
