"""Fixtures of the method tests: the API-like test backend (tests/backends/fixtures.py)."""

from tests.backends.fixtures import api_env, api_server  # noqa: F401
