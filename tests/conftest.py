"""Shared fixtures: the real data under ../shared/data (skip when absent), and the scripted model."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def _this_checkout_as_sourcebench() -> None:
    """Make ``import sourcebench`` mean this checkout, here and in the subprocesses tests start.

    The repository root is the ``sourcebench`` package (pyproject's package-dir), but a checkout's
    folder has any name, and an editable install of another checkout (CI's bare-clone run shares the
    venv) would otherwise answer ``import sourcebench``. A link named ``sourcebench`` to this root, in a
    folder put first on sys.path and PYTHONPATH, wins over the install's finder.
    """
    loaded = sys.modules.get("sourcebench")
    if loaded is not None and Path(loaded.__file__).resolve().parent == ROOT:
        return  # already done (this file is also imported as tests.conftest)
    shim = Path(tempfile.mkdtemp(prefix="sourcebench-checkout-"))
    atexit.register(shutil.rmtree, shim, True)  # the link only: rmtree does not follow it
    (shim / "sourcebench").symlink_to(ROOT, target_is_directory=True)
    sys.path.insert(0, str(shim))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(shim), *filter(None, [os.environ.get("PYTHONPATH")])])
    for name in [m for m in sys.modules if m == "sourcebench" or m.startswith("sourcebench.")]:
        del sys.modules[name]  # imported from elsewhere before this conftest ran


_this_checkout_as_sourcebench()

# The API-like test backend, one server for the whole session: a fixture imported into two conftests
# would be two session fixtures, two servers, and a test could read the stats of the one it did not call.
from tests.backends.fixtures import api_env, api_server  # noqa: E402,F401

os.environ.setdefault("INSPECT_LOG_LEVEL", "warning")
os.environ.setdefault("INSPECT_DISPLAY", "none")


def need_data(sub: str) -> Path:
    p = SHARED_DATA / sub
    if not p.is_dir():
        pytest.skip(f"real data not available at {p}")
    return p


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _reset_scripted():
    from sourcebench.harness.providers import scripted

    scripted.reset()
    yield
    scripted.reset()


def pytest_terminal_summary(terminalreporter):
    """One line instead of a copy per model call for the deprecation pyproject filters (see there)."""
    try:
        import inspect

        from inspect_ai.model import _retry

        still = "wait_exponential_jitter(initial=" in inspect.getsource(_retry)
    except (ImportError, OSError):
        return
    if still:
        terminalreporter.write_line("note: inspect-ai calls tenacity's wait_exponential_jitter with the deprecated "
                                    "'initial' argument on every model call; that DeprecationWarning is filtered "
                                    "(pyproject.toml filterwarnings)")
