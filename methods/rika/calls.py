"""Concurrency for the per-claim model calls, with results in input order (deterministic)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

A = TypeVar("A")
R = TypeVar("R")


async def bounded_map(fn: Callable[[A], Awaitable[R]], items: Sequence[A], limit: int | None) -> list[R]:
    """``fn`` over ``items``, at most ``limit`` at once; None: all at once (the run's connection budget
    bounds the model calls in flight)."""
    if limit is None:
        return list(await asyncio.gather(*(fn(x) for x in items)))
    gate = asyncio.Semaphore(max(1, limit))

    async def one(x: A) -> R:
        async with gate:
            return await fn(x)

    return list(await asyncio.gather(*(one(x) for x in items)))
