"""An OpenAI-compatible chat server that injects faults, for the hardening tests and benchmarks.

It answers ``POST .../chat/completions`` like the scripted model (``harness/providers/scripted.py``):
a minimal schema-valid JSON instance for structured calls, else the extractive reply, so a run
against it scores exactly like a run with ``scripted/extractive``. Faults are chosen by the model
name, so one server serves every scenario: ``--model openai-api/fault/<plan>`` with
``FAULT_BASE_URL`` and ``FAULT_API_KEY`` set. A plan is ``_``-joined tokens:

* ``lat<ms>``: answer after this many milliseconds (default: the server's ``latency``);
* ``pass<n>``: the first ``n`` distinct requests of this model get no fault (a run's first
  request is its endpoint probe, which must pass for the run to start);
* ``<fault>x<n>``: the first ``n`` attempts of every distinct request get this fault, ``xall``
  every attempt; faults listed one after the other apply to successive attempts;
* a ``p<percent>`` suffix (``e500xallp30``) limits a fault to that share of distinct requests
  (chosen by a hash of the request, so the same requests fail in every run).

Faults: ``e429``, ``e500`` (HTTP status), ``hang`` (reply after ``hang`` seconds, longer than any
sane attempt timeout), ``drop`` (close the connection without a reply), ``trunc`` (send half the
body, then close), ``badjson`` (HTTP 200 with a body that is not JSON), ``badcontent`` (a valid
reply whose content is not the requested JSON), ``echo401`` (HTTP 401 whose body repeats the
``Authorization`` header, as some gateways do, to prove the harness redacts it).

The server binds 127.0.0.1 only and every loop is bounded: requests per connection, header lines,
body size, idle time, the ``hang`` time and the server's lifetime. ``stats()`` reports attempts per
request, faults served and the time intervals of successful replies (for throughput and harness-
overhead measurements). Run it standalone with ``python tests/hardening/fault_server.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.backends.json_http import JsonHttpServer

FAULTS = ("e429", "e500", "hang", "drop", "trunc", "badjson", "badcontent", "echo401")
_TOKEN = re.compile(r"^(lat|pass)(\d+)$|^(" + "|".join(FAULTS) + r")x(\d+|all)(?:p(\d+))?$")


@dataclass(frozen=True)
class Step:
    fault: str
    count: int | None  # None: every attempt
    percent: int = 100


@dataclass(frozen=True)
class Plan:
    latency_s: float | None
    steps: tuple[Step, ...]
    passed: int = 0

    @classmethod
    def parse(cls, model: str) -> Plan:
        latency, steps, passed = None, [], 0
        for tok in [t for t in model.split("_") if t and t != "ok"]:
            m = _TOKEN.match(tok)
            if not m:
                raise ValueError(f"fault plan token {tok!r} not understood")
            if m.group(1) == "lat":
                latency = int(m.group(2)) / 1000
            elif m.group(1) == "pass":
                passed = int(m.group(2))
            else:
                n = None if m.group(4) == "all" else int(m.group(4))
                steps.append(Step(m.group(3), n, int(m.group(5)) if m.group(5) else 100))
        return cls(latency, tuple(steps), passed)

    def fault_for(self, attempt: int, key: str, order: int = 10**9) -> str | None:
        """The fault of the ``attempt``-th (0-based) try of the request with hash ``key``, the
        ``order``-th distinct request of its model."""
        if order < self.passed:
            return None
        bucket = int(key[:8], 16) % 100
        start = 0
        for s in self.steps:
            if bucket >= s.percent:
                continue
            if s.count is None or attempt < start + s.count:
                return s.fault
            start += s.count
        return None


@dataclass
class Stats:
    attempts: dict[str, list[float]] = field(default_factory=dict)  # request hash -> arrival time of each attempt
    fault_of: dict[str, list[str]] = field(default_factory=dict)  # request hash -> what each attempt got
    faults: dict[str, int] = field(default_factory=dict)  # fault -> times served
    ok: int = 0
    intervals: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each OK reply
    in_flight: int = 0
    max_in_flight: int = 0
    auth_headers: set[str] = field(default_factory=set)
    order: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> request hash -> arrival rank

    def as_dict(self) -> dict[str, Any]:
        return {"attempts": {k: len(v) for k, v in self.attempts.items()},
                "attempt_times": {k: list(v) for k, v in self.attempts.items()},
                "fault_of": {k: list(v) for k, v in self.fault_of.items()}, "faults": dict(self.faults),
                "ok": self.ok, "requests": sum(len(v) for v in self.attempts.values()), "distinct": len(self.attempts),
                "intervals": list(self.intervals), "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight, "auth_seen": len(self.auth_headers)}


def reply_text(messages: list[dict[str, Any]], schema: dict[str, Any] | None) -> str:
    """The scripted model's default policy, so results match a ``scripted/extractive`` run."""
    from sourcebench.harness.providers.scripted import extractive_reply, instance_from_schema

    prompt = "\n".join(_text(m.get("content")) for m in messages)
    if schema is not None:
        return json.dumps(instance_from_schema(schema, prompt))
    return extractive_reply(prompt)


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


class FaultServer(JsonHttpServer):
    """The server, in a background thread with its own event loop (``with FaultServer() as s``)."""

    thread_name = "fault-server"
    stats_type = Stats

    def __init__(self, latency: float = 0.0, hang: float = 30.0, port: int = 0, lifetime: float = 3600.0):
        super().__init__(port=port, lifetime=lifetime)
        self.latency = latency
        self.hang = hang

    def _warm_up(self) -> None:
        # the reply policy's imports cost seconds: pay them before listening, so that the first
        # request takes the configured latency like every other (the benchmarks time it)
        reply_text([{"role": "user", "content": "warm up"}], None)

    # -- stats ------------------------------------------------------------------------------------
    # -- HTTP -------------------------------------------------------------------------------------
    async def _route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                     writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path.rstrip("/").endswith("/stats"):
            await self._send(writer, 200, self.stats())
            return True
        if method == "POST" and path.rstrip("/").endswith("/reset"):
            self.reset()
            await self._send(writer, 200, {"ok": True})
            return True
        if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
            await self._send(writer, 404, {"error": {"message": f"no route {method} {path}"}})
            return True
        return await self._chat(headers, json.loads(body or b"{}"), writer)

    async def _chat(self, headers: dict[str, str], req: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        model = str(req.get("model", ""))
        messages = req.get("messages") or []
        rf = req.get("response_format") or {}
        schema = (rf.get("json_schema") or {}).get("schema") if rf.get("type") == "json_schema" else None
        key = hashlib.sha256(json.dumps([model, messages, rf], sort_keys=True).encode()).hexdigest()
        try:
            plan = Plan.parse(model)
        except ValueError as e:
            await self._send(writer, 404, {"error": {"message": str(e), "type": "invalid_request_error"}})
            return True
        t0 = time.time()
        with self._lock:
            st = self.stats_
            attempt = len(st.attempts.setdefault(key, []))
            st.attempts[key].append(t0)
            ranks = st.order.setdefault(model, {})
            order = ranks.setdefault(key, len(ranks))
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            if "authorization" in headers:
                st.auth_headers.add(headers["authorization"])
        fault = plan.fault_for(attempt, key, order)
        with self._lock:
            st.fault_of.setdefault(key, []).append(fault or "ok")
        try:
            delay = self.hang if fault == "hang" else (plan.latency_s if plan.latency_s is not None else self.latency)
            if delay:
                await asyncio.sleep(delay)
            if fault is not None:
                with self._lock:
                    st.faults[fault] = st.faults.get(fault, 0) + 1
            if fault == "drop":
                return False
            if fault in ("e429", "e500"):
                status = int(fault[1:])
                await self._send(writer, status, {"error": {"message": f"injected HTTP {status}",
                                                            "type": "server_error" if status == 500 else "rate_limit"}})
                return True
            if fault == "echo401":
                await self._send(writer, 401, {"error": {"message": "invalid credentials: "
                                                         + headers.get("authorization", ""), "type": "auth"}})
                return True
            if fault == "badjson":
                await self._send(writer, 200, None, raw=b'{"id": "x", "choices": [ {"message": oops')
                return True
            text = "this is not the JSON you asked for" if fault == "badcontent" else reply_text(messages, schema)
            n_in = max(1, sum(len(_text(m.get("content"))) for m in messages) // 4)
            n_out = max(1, len(text) // 4)
            reply = {"id": "chatcmpl-" + key[:12], "object": "chat.completion", "created": int(t0), "model": model,
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}],
                     "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}}
            await self._send(writer, 200, reply, keep=fault != "trunc", cut=fault == "trunc")
            if fault is None:
                with self._lock:
                    st.ok += 1
                    st.intervals.append((t0, time.time()))
            return fault != "trunc"
        finally:
            with self._lock:
                st.in_flight -= 1


def main() -> None:
    ap = argparse.ArgumentParser(description="OpenAI-compatible fault-injecting test server (127.0.0.1 only)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds before each reply (default 0)")
    ap.add_argument("--hang", type=float, default=30.0, help="seconds a 'hang' fault waits (default 30)")
    ap.add_argument("--lifetime", type=float, default=3600.0, help="exit after this many seconds (default 3600)")
    a = ap.parse_args()
    asyncio.run(FaultServer(a.latency, a.hang, a.port, a.lifetime).serve(announce=True))


if __name__ == "__main__":
    main()
