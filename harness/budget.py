"""``--max-cost``: stop a run before a model call would take its spending past the budget.

Spending is priced from the tokens of live calls (cached calls are free): input tokens at the input
price, visible output and reasoning tokens at the output price, per million. Before each live call
the layer adds the call's expected price (its prompt at characters / 4, its visible reply bound;
plus the mean reasoning of the calls so far; calls in flight book their expected price, so concurrent
calls cannot all pass one check) and stops the run when the total would pass the budget. A call's
actual reasoning can exceed the mean, so a run can pass the budget by that excess of the calls in
flight. What a run folder spent in
earlier invocations counts (read from its usage.jsonl), so a resumed run keeps to the same budget.

``--max-connections``: ``CallGate``, the run's one budget of model calls in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BudgetExceeded, ConfigError
from .io import read_jsonl


@dataclass
class Budget:
    max_cost: float
    price_input: float  # USD per million input tokens
    price_output: float  # USD per million output (visible and reasoning) tokens
    spent: float = 0.0
    reserved: float = 0.0  # booked by calls in flight
    calls: int = 0  # live calls charged (for the mean reasoning of a call)
    reasoning: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def create(cls, max_cost: float | None, price_input: float | None, price_output: float | None,
               usage_path: Path | None = None) -> Budget | None:
        if max_cost is None:
            return None
        if price_input is None or price_output is None:
            raise ConfigError("--max-cost needs --price-input and --price-output (USD per million tokens)")
        b = cls(max_cost, price_input, price_output)
        if usage_path is not None and usage_path.is_file():
            for u in read_jsonl(usage_path, tolerate_torn_tail=True):
                if u.get("status") == "live":  # a usage row sums many calls
                    r = int(u.get("reasoning_tokens") or 0)
                    b.spent += b.price(int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0) + r)
                    b.calls += int(u.get("calls") or 0)
                    b.reasoning += r
        return b

    def price(self, inp: float, out: float) -> float:
        return (inp * self.price_input + out * self.price_output) / 1e6

    def reserve(self, expected_input: int, expected_output: int) -> float:
        """Book a call of this expected size, or raise ``BudgetExceeded`` if it would pass the budget
        with what is spent and what calls in flight have booked (concurrent calls all pass a check
        that ignores each other). The expected output adds the mean reasoning of the calls so far.
        Returns the amount booked, for ``release``."""
        with self._lock:
            mean_reasoning = self.reasoning / self.calls if self.calls else 0.0
            nxt = self.price(expected_input, expected_output + mean_reasoning)
            if self.spent + self.reserved + nxt > self.max_cost:
                raise BudgetExceeded(
                    f"--max-cost {self.max_cost:g} USD: {self.spent:.4f} spent, {self.reserved:.4f} booked by calls "
                    f"in flight, the next call (~{nxt:.4f}) would pass it; the run stopped here and resumes with "
                    "the same command and a larger --max-cost")
            self.reserved += nxt
            return nxt

    def release(self, amount: float) -> None:
        with self._lock:
            self.reserved = max(0.0, self.reserved - amount)

    def charge(self, inp: int, out: int, reasoning: int = 0) -> None:
        """A live call's actual price (``out`` visible, ``reasoning`` apart, both at the output price)."""
        with self._lock:
            self.spent += self.price(inp, out + reasoning)
            self.calls += 1
            self.reasoning += reasoning


# --max-connections default for a hosted API (any provider but an in-process ``local/`` model): enough
# calls in flight to hide a reasoning backend's seconds-long latency, well within the concurrent
# requests the hosted providers serve per key at their first paid tiers; raise it for a higher tier.
DEFAULT_API_CONNECTIONS = 32


def default_max_connections(model: str) -> int | None:
    """The run's connection budget when ``--max-connections`` is not given: ``DEFAULT_API_CONNECTIONS``
    for a served model; None for an in-process ``local/`` model, whose pool of contexts (one call per
    context) is its own bound."""
    return None if model.startswith("local/") else DEFAULT_API_CONNECTIONS


class CallGate:
    """The run's connection budget: at most ``limit`` live model calls in flight, across every cell,
    stage and phase (learning, the learning judge, answering, judging) of this process.

    One gate per run, shared by every ``LLM`` the runner makes, so cells learned at the same time
    share the budget instead of each bringing its own. Methods may therefore start all their
    independent calls at once: the gate, not the method, decides how many reach the backend. Cached
    calls never take a slot. ``limit`` None counts but does not bound (a ``local/`` model's pool).
    Counters (``in_flight``, ``done``, ``peak``) feed the progress display and the benchmarks; an
    ``asyncio.Semaphore`` belongs to one event loop, so one is made per loop that uses the gate."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.in_flight = 0
        self.peak = 0
        self.done = 0
        self._loop: Any = None
        self._sem: asyncio.Semaphore | None = None
        self._keys: dict[str, asyncio.Event] = {}  # cache keys of the calls in flight (single_flight)

    @contextlib.asynccontextmanager
    async def single_flight(self, key: str) -> AsyncIterator[None]:
        """Enter after any call with this cache key already in flight has ended (its reply is then in
        the cache), so concurrent twins make one live call."""
        while (twin := self._keys.get(key)) is not None:
            await twin.wait()
        done = self._keys[key] = asyncio.Event()
        try:
            yield
        finally:
            del self._keys[key]
            done.set()

    def _semaphore(self) -> asyncio.Semaphore | None:
        if self.limit is None:
            return None
        loop = asyncio.get_running_loop()
        if self._sem is None or self._loop is not loop:
            self._loop, self._sem = loop, asyncio.Semaphore(max(1, self.limit))
        return self._sem

    @contextlib.asynccontextmanager
    async def slot(self, ledger: Any = None) -> AsyncIterator[None]:
        """Hold one connection for a live call; ``ledger`` (a ``UsageLedger``) counts it in flight too."""
        sem = self._semaphore()
        if sem is not None:
            await sem.acquire()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if ledger is not None:
            ledger.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self.done += 1
            if ledger is not None:
                ledger.in_flight -= 1
            if sem is not None:
                sem.release()
