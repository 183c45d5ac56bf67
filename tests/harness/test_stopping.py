"""A SIGTERM whose KeyboardInterrupt lands where Python swallows exceptions still stops the run."""

from __future__ import annotations

import asyncio

import pytest

from sourcebench.harness import stopping
from sourcebench.harness.llm import LLM, CallCache, ModelSpec, UsageLedger


def test_a_swallowed_stop_is_raised_again_at_the_next_model_call(tmp_path):
    llm = LLM(ModelSpec(name="scripted/unit"), CallCache(tmp_path / "c.sqlite"), UsageLedger())
    assert asyncio.run(llm.generate("hello", method="m", phase="learn")).text is not None
    try:
        try:
            stopping._on_sigterm(15, None)  # as if delivered inside a __del__: raised, then swallowed
        except KeyboardInterrupt:
            pass
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(llm.generate("hello again", method="m", phase="learn"))
        assert llm.ledger.calls("live") == 1  # the call after the stop was never made
    finally:
        stopping.install()  # a new command starts with no stop requested
    assert asyncio.run(llm.generate("hello again", method="m", phase="learn")).text is not None
