"""Agents on the embedded model: what handing a step the context that evaluated its prefix saves.

Two agents (the test phase runs two samples at once on a 2-core machine, one llama.cpp context
each) take alternating steps; each step's prompt is the previous one plus a tool result, as in the
KB-curation reader and the book navigator until their memory windows slide. Printed: wall time and
seconds per step with the pool choosing by shared prefix (the default) and choosing the most
recently returned context (the pool's choice before), plus the replies' equality (the choice of
context never changes an output). Run it on a quiet machine.

    python benchmarks/local_agents_bench.py [--agents 2] [--steps 6] [--result-words 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from sourcebench.harness.providers import local_llama

# inspect-ai's display may take over sys.stdout while models run: print through our own copy of fd 1
OUT = os.fdopen(os.dup(1), "w", buffering=1)


def say(text: str) -> None:
    print(text, file=OUT, flush=True)


_affinity_borrow = local_llama.LlamaPool.borrow


def _lifo_borrow(self, prompt: str = ""):
    """The pool's earlier choice: the most recently returned free context."""
    with self._cond:
        while not self._free and len(self._loaded) + self._loading >= self.size:
            self._cond.wait()
        if self._free:
            return self._free.pop()
    return _affinity_borrow(self, prompt)  # loads a new context, as both versions do


async def episode(model, agent: int, steps: int, words: int) -> list[str]:
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser, GenerateConfig

    history = [ChatMessageSystem(content="You are a research agent. Reply with the next action in one short line.")]
    replies = []
    for step in range(steps):
        result = " ".join(f"fact{agent}_{step}_{i} holds" for i in range(words // 2))
        history.append(ChatMessageUser(content=f"Agent {agent}, step {step}. Tool result: {result}\nNext action?"))
        out = await model.generate(history, config=GenerateConfig(max_tokens=12, temperature=0.0))
        replies.append(out.completion)
    return replies


async def trial(agents: int, steps: int, words: int, tag: str) -> tuple[float, list[list[str]]]:
    from inspect_ai.model import get_model

    model = get_model("local/smollm2", instances=agents, n_threads=1, memoize=False)
    t = time.perf_counter()
    replies = await asyncio.gather(*(episode(model, a, steps, words) for a in range(agents)))
    wall = time.perf_counter() - t
    say(f"{tag:>20}: {wall:6.1f} s wall, {wall / steps:5.1f} s per round of {agents} steps")
    return wall, list(replies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--result-words", type=int, default=200)
    a = ap.parse_args()
    import sourcebench.harness.providers  # noqa: F401  (registers local/)

    say(f"load average {os.getloadavg()[0]:.2f}; {a.agents} agents x {a.steps} steps, "
          f"~{a.result_words} words per tool result")
    aff, r1 = asyncio.run(trial(a.agents, a.steps, a.result_words, "prefix affinity"))
    local_llama._POOLS.clear()  # fresh contexts: nothing evaluated carries over
    local_llama.LlamaPool.borrow = _lifo_borrow  # type: ignore[method-assign]
    lifo, r2 = asyncio.run(trial(a.agents, a.steps, a.result_words, "last returned"))
    say(f"speed-up {lifo / aff:.2f}x; identical replies: {r1 == r2}")


if __name__ == "__main__":
    main()
