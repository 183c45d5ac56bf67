"""Pytest fixtures for the API-like test backend; tests/conftest.py imports them for every test."""

from __future__ import annotations

import pytest

from tests.backends.api_server import ApiServer


@pytest.fixture(scope="session")
def api_server():
    """One backend for the session, on a free port of 127.0.0.1 (stops by itself within the hour)."""
    with ApiServer() as server:
        yield server


@pytest.fixture
def api_env(api_server, monkeypatch):
    """The backend with fresh stats, and the environment pointing ``openai-api/testapi/*``, ``openai/*``
    and the ``openai/<model>`` embedder at it."""
    for k, v in api_server.env().items():
        monkeypatch.setenv(k, v)
    api_server.reset()
    return api_server
