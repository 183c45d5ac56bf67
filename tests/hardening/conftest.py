"""Fixtures: one fault-injecting OpenAI-compatible server (127.0.0.1) for the whole session."""

from __future__ import annotations

import pytest

from tests.hardening.common import PLANTED_KEY
from tests.hardening.fault_server import FaultServer


@pytest.fixture(scope="session")
def fault_server():
    with FaultServer(hang=20) as server:
        yield server


@pytest.fixture
def fault_env(fault_server, monkeypatch):
    """``openai-api/fault/<plan>`` models point at the server; its key is the planted secret."""
    monkeypatch.setenv("FAULT_BASE_URL", fault_server.url)
    monkeypatch.setenv("FAULT_API_KEY", PLANTED_KEY)
    fault_server.reset()
    return fault_server
