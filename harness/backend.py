"""The run's model backend: the solver's and the judge's specs, the call cache, the cost budget and
the connection gate, and the preflight that settles what the specs do not say (the context window,
whether the backend reasons, the structured-output form) before any work starts.

One ``Backend`` per process: every call of the run goes through ``llm`` (one cache, one budget, one
gate), so concurrency never changes what is asked and the run never holds more connections than its
budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .budget import Budget, CallGate, default_max_connections
from .errors import ConfigError, ModelUnavailableError
from .io import atomic_write_json, read_json
from .llm import LLM, UNLIMITED, CallCache, ModelSpec, UsageLedger
from .providers.discovery import ORIGIN_OPTION, discover_context_window

if TYPE_CHECKING:
    from .config import RunConfig

# errors of a request the server refused (inspect passes the OpenAI client's exception names on)
REFUSALS = ("BadRequestError", "InternalServerError", "UnprocessableEntityError", "NotFoundError", "APIStatusError")


class ProbeReply(BaseModel):
    """The preflight's structured probe: the least schema a server must honour."""

    ok: bool


class Backend:
    """Model specs, cache, budget and connection gate of one run (see the module docstring)."""

    def __init__(self, cfg: RunConfig, needs_judge: bool, out: Path, log: Callable[[str], None] = lambda _: None):
        self.log = log
        b = cfg.backend
        # the run's connection budget (--max-connections, else the provider's default): one gate for every
        # call of this process; inspect's own per-model limit is set to the same number so that it never
        # binds tighter than the gate
        self.connections = cfg.execution.max_connections or default_max_connections(b.model)
        self.gate = CallGate(self.connections)
        retry = {"max_retries": b.max_retries, "timeout": b.timeout, "attempt_timeout": b.attempt_timeout,
                 "max_connections": self.connections}
        self.spec = ModelSpec(name=b.model, role="solver", temperature=b.temperature, max_tokens=b.max_tokens,
                              context_window=b.context_window, reasoning_effort=b.reasoning_effort,
                              reasoning_tokens=b.reasoning_tokens, **retry)
        judge_name = b.judge_model or (b.model if needs_judge else None)
        self.judge_spec = (ModelSpec(name=judge_name, role="judge", temperature=0.0, max_tokens=256,
                                     context_window=b.context_window if judge_name == b.model else None,
                                     reasoning_effort=b.judge_reasoning_effort,
                                     reasoning_tokens=b.judge_reasoning_tokens, **retry)
                           if judge_name else None)
        self.cache_dir = Path(b.cache_dir) if b.cache_dir else Path(out) / "cache"
        if self.cache_dir.exists() and not self.cache_dir.is_dir():
            raise ConfigError(f"--cache-dir {self.cache_dir}: not a directory")
        self.cache = CallCache(self.cache_dir / "llm_calls.sqlite")
        bu = cfg.budget
        self.budget = Budget.create(bu.max_cost, bu.price_input, bu.price_output, Path(out) / "usage.jsonl")

    def llm(self, spec: ModelSpec, ledger: UsageLedger) -> LLM:
        """A client for ``spec`` on the run's cache, budget and gate, counting into ``ledger``."""
        return LLM(spec, self.cache, ledger, self.budget, self.gate)

    def use_connections(self, max_connections: int | None, model: str) -> None:
        """A new connection budget for this process (a share of the run's, or the whole again)."""
        self.connections = max_connections or default_max_connections(model)
        self.gate = CallGate(self.connections)
        self.spec = replace(self.spec, max_connections=self.connections)
        if self.judge_spec:
            self.judge_spec = replace(self.judge_spec, max_connections=self.connections)

    # -- preflight -------------------------------------------------------------------------------
    async def preflight(self, ledger: UsageLedger) -> None:
        """One tiny (cached) call per model role, so an unreachable endpoint fails before any work.

        A probe whose usage reports reasoning tokens marks that role's backend as reasoning, so its
        reply caps get the reasoning allowance from then on (a model of an unknown family that
        reasons by default would otherwise have every bounded reply eaten by its reasoning)."""
        roles = ["solver"] + (["judge"] if self.judge_spec and self.judge_spec.name != self.spec.name else [])
        for role in roles:
            spec = self.spec if role == "solver" else self.judge_spec
            assert spec is not None
            spec = self.known_window(spec)
            if role == "solver":
                self.spec = spec
                if self.judge_spec and self.judge_spec.name == spec.name and not self.judge_spec.context_window:
                    self.judge_spec = replace(self.judge_spec, context_window=spec.context_window,
                                              context_window_origin=spec.context_window_origin)
            else:
                self.judge_spec = spec
            res = await self._probe(spec, ledger)
            if res.reasoning_tokens and not spec.is_reasoning():
                spec = replace(spec, reasons=True)
                self.log(f"{spec.name} reasons ({res.reasoning_tokens} reasoning tokens for a 16-token probe): "
                         f"reply caps get a reasoning allowance of {spec.reasoning_allowance():,} tokens")
                if role == "solver":
                    self.spec = spec
                    if self.judge_spec and self.judge_spec.name == spec.name:
                        self.judge_spec = replace(self.judge_spec, reasons=True)
                else:
                    self.judge_spec = spec
                res = await self._probe(spec, ledger)
            if res.failed and res.error.startswith("output_cap"):  # reachable; its budget is the user's choice
                self.log(f"[yellow]{spec.name}: the 16-token probe ran out of output cap ({res.error}); bounded "
                         f"replies will fail the same way unless --reasoning-tokens is raised[/]")
            elif res.failed:
                where = spec.resolved_base_url() or spec.name
                raise ModelUnavailableError(f"model {spec.name} ({where}) failed a test call: {res.error}")
            await self._probe_structured(spec, ledger)
            spec = self.spec if role == "solver" else self.judge_spec
            assert spec is not None
            if spec.wanted_reasoning_allowance() not in (spec.reasoning_allowance(), UNLIMITED):
                self.log(f"{spec.name}: the reasoning allowance of {spec.wanted_reasoning_allowance():,} tokens does "
                         f"not fit the {spec.effective_context_window() or 0:,}-token window: {spec.reasoning_allowance():,} (half "
                         "the window) is sent")

    def known_window(self, spec: ModelSpec) -> ModelSpec:
        """The spec with its context window and where it came from: ``--context-window``, else what
        the server says (``harness.providers.discovery``), else none."""
        if spec.context_window:
            return spec if spec.context_window_origin else replace(spec, context_window_origin=ORIGIN_OPTION)
        found = discover_context_window(spec.name, spec.resolved_base_url())
        if found is None:
            return spec
        self.log(f"{spec.name}: context window {found[0]:,} tokens ({found[1]})")
        return replace(spec, context_window=found[0], context_window_origin=found[1])

    def adopt_preflight(self, meta: dict[str, Any]) -> None:
        """A worker takes what the driver's preflight settled and recorded in run.json (the window and
        its origin, the structured-output form, whether the backend reasons): its calls and artifact
        keys are then the driver's."""
        for attr, entry in (("spec", "model"), ("judge_spec", "judge_model")):
            spec, m = getattr(self, attr), meta.get(entry)
            if spec is None or not isinstance(m, dict) or m.get("name") != spec.name:
                continue
            setattr(self, attr, replace(spec, context_window=m.get("context_window") or spec.context_window,
                                        context_window_origin=m.get("context_window_origin") or spec.context_window_origin,
                                        structured_format=m.get("structured_format") or spec.structured_format,
                                        reasons=True if m.get("reasons") else spec.reasons))

    def record_window(self, path: Path) -> None:
        """run.json's model entries with the window the preflight settled and its origin."""
        if not path.exists():
            return
        meta = read_json(path)
        for entry, spec in (("model", self.spec), ("judge_model", self.judge_spec)):
            if spec is not None and isinstance(meta.get(entry), dict):
                meta[entry] = {**spec.settings(), "context_window_origin": spec.context_window_origin}
        atomic_write_json(path, meta)

    async def _probe_structured(self, spec: ModelSpec, ledger: UsageLedger) -> None:
        """One schema-constrained call on a served model: a server that refuses structured outputs
        (llama-cpp-python's answers ``json_schema`` with HTTP 500) stops the run here, in one line,
        instead of failing every structured call of every method."""
        if spec.name.split("/", 1)[0] in ("local", "scripted"):
            return
        async def probe(s: ModelSpec) -> Any:
            return await self.llm(s, ledger).structured('Reply with the JSON object {"ok": true}.', ProbeReply,
                                                        method="harness", phase="probe", max_tokens=16,
                                                        max_retries=s.max_retries, timeout=60)

        res = await probe(spec)
        # only the server's refusal of the request (an HTTP error status) says the format is unsupported; a
        # reply cut, unparsable or invalid, or a dropped connection, is a failure of that call, not of the format
        if not res.failed or not res.error.startswith(REFUSALS):
            return
        other = replace(spec, structured_format="json_object")  # llama-cpp-python's server form
        if not (await probe(other)).failed:
            self.log(f"{spec.name}: the server refused response_format json_schema ({res.error[:160]}) and takes "
                     "the schema as response_format json_object: structured calls use that form")
            if spec.name == self.spec.name:
                self.spec = replace(self.spec, structured_format="json_object")
            if self.judge_spec and self.judge_spec.name == spec.name:
                self.judge_spec = replace(self.judge_spec, structured_format="json_object")
            return
        where = spec.resolved_base_url() or spec.name
        raise ModelUnavailableError(
            f"model {spec.name} ({where}) refused a structured-output request (response_format json_schema): "
            f"{res.error}. Serve the model with a server that supports json_schema structured outputs "
            "(vLLM, llama.cpp's llama-server, LM Studio, Ollama; see docs/backends.md)")

    async def _probe(self, spec: ModelSpec, ledger: UsageLedger) -> Any:
        # 16: the least output cap OpenAI's Responses API accepts (a 4-token probe was refused with HTTP 400)
        # the run's own retries: a transient fault (429, 5xx, a dropped connection) must not stop the run here
        return await self.llm(spec, ledger).generate("Reply with the word OK.", method="harness", phase="probe",
                                                     max_tokens=16, max_retries=spec.max_retries, timeout=30)
