"""A run's whole configuration, as typed groups: what is evaluated (``data``), which model answers
and how its calls are made (``backend``), where and how concurrently the work runs (``execution``),
and what a run may spend or lose (``budget``).

``run.json`` holds it verbatim (``to_dict``), and whatever re-enters the folder later (a resume, a
protocol run that calls the model again) reloads it validated (``load``), so it runs with exactly
the settings, cache and data folder of the run. A ``config`` written by earlier versions, one flat
object, loads too: flat names are sorted into their groups (``RunConfig(model=...)`` works the same
way, and ``cfg.model`` reads ``cfg.backend.model``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import ArgsKwargs

from .errors import DataError
from .options import check_epochs, check_seeds

_GROUP = ConfigDict(frozen=True, extra="forbid")


class DataConfig(BaseModel):
    """What is evaluated: the benchmark and its data, the sources, the seeded splits and the methods."""

    model_config = _GROUP

    benchmark: str
    methods: list[str]
    method_configs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    options: dict[str, str] = Field(default_factory=dict)
    data_dir: Path | None = None
    sources: list[str] | None = None
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    limit: int | None = None
    guidance_limit: int | None = None

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds_as_given(cls, v: Any, info: ValidationInfo) -> Any:
        """Seeds given in code or on the command line must be integers as given (``"0"`` or ``True`` is a
        mistake, not a seed); a recorded configuration is type-checked by validation first."""
        return v if (info.context or {}).get("recorded") else check_seeds(v, "seeds")

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, v: list[int]) -> list[int]:
        return check_seeds(v, "seeds")


class BackendConfig(BaseModel):
    """The models, their sampling and reasoning settings, their calls' retries and the call cache."""

    model_config = _GROUP

    model: str
    judge_model: str | None = None
    embedder: str = "auto"
    max_tokens: int = 512
    temperature: float = 0.0
    # answers per test task (inspect-ai epochs, temperature > 0): the task's score is their mean
    epochs: int = 1
    context_window: int | None = None
    reasoning_effort: str | None = None  # the solver's (inspect-ai GenerateConfig); None: the provider's default
    judge_reasoning_effort: str | None = None  # the judge's; None: the provider's default
    # reasoning allowance added to every reply bound on a reasoning backend (None: the effort's default,
    # llm.UNLIMITED: no cap sent), for the solver and the judge
    reasoning_tokens: int | None = None
    judge_reasoning_tokens: int | None = None
    # model-call robustness: bounded retries make a persistent fault a scored failure (see ModelSpec)
    max_retries: int | None = 5
    timeout: int | None = None
    attempt_timeout: int | None = None
    # model-call and embedding caches; None: OUT/cache. A folder shared by several runs answers a call
    # that any of them made (same model, settings, messages) without asking the model again
    cache_dir: Path | None = None

    @model_validator(mode="after")
    def _epochs_need_sampling(self) -> BackendConfig:
        check_epochs(self.epochs, self.temperature, self.model)  # repeats at temperature 0 would be copies
        return self


class ExecutionConfig(BaseModel):
    """Where the cells run and how much at once; none of it changes a result."""

    model_config = _GROUP

    executor: str = "local"  # local | ray (harness/executors.py)
    ray_address: str | None = None
    # local executor: test tasks of every cell split over this many processes (one event loop each)
    test_processes: int = 1
    task_shard: tuple[int, int] | None = None  # (i, n): a worker tests only the tasks of shard i of n
    # cells learned at the same time; None: every pending cell at once for a served model (the connection
    # budget bounds their calls), one at a time for a local/ one (see Runner.learn_concurrency)
    learn_concurrency: int | None = None
    max_connections: int | None = None
    max_samples: int | None = None
    display: str = "none"


class BudgetConfig(BaseModel):
    """What a run may spend (--max-cost, with per-million-token prices) and lose before a cell is degraded."""

    model_config = _GROUP

    max_cost: float | None = None
    price_input: float | None = None
    price_output: float | None = None
    # a cell whose learning stage (or test phase) failed more than this share of its calls is degraded
    max_failure_share: float = 0.10


GROUPS: dict[str, type[BaseModel]] = {"data": DataConfig, "backend": BackendConfig, "execution": ExecutionConfig,
                                      "budget": BudgetConfig}
GROUP_OF = {name: group for group, cls in GROUPS.items() for name in cls.model_fields}


def _nest(data: dict[str, Any]) -> dict[str, Any]:
    """Flat names (an earlier run.json's ``config``, or ``RunConfig(model=...)``) sorted into their groups,
    over whatever the groups already hold; unknown names are left for validation to name."""
    if not any(k in GROUP_OF for k in data):
        return data
    out = {k: v for k, v in data.items() if k not in GROUP_OF}
    for group in GROUPS:
        flat = {k: v for k, v in data.items() if GROUP_OF.get(k) == group}
        if not flat:
            continue
        given = out.get(group) or {}
        if isinstance(given, BaseModel):
            given = given.model_dump()
        out[group] = {**given, **flat} if isinstance(given, dict) else given  # not a mapping: validation names it
    return out


@dataclass(config=ConfigDict(extra="forbid"))
class RunConfig:
    """Every setting of a run (see the module docstring)."""

    out: Path
    data: DataConfig
    backend: BackendConfig
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    rerun: list[str] = Field(default_factory=list)  # methods whose artifacts and rows are made again

    @model_validator(mode="before")
    @classmethod
    def _flat_names(cls, data: Any) -> Any:
        if isinstance(data, ArgsKwargs):
            return ArgsKwargs(data.args, _nest(dict(data.kwargs or {})))
        return _nest(data) if isinstance(data, dict) else data

    def evolve(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (group fields by their own names, e.g. ``max_connections=4``)."""
        whole: dict[str, Any] = {"out": self.out, "rerun": list(self.rerun),
                                 **{g: getattr(self, g).model_dump() for g in GROUPS}}
        return RunConfig(**_nest({**whole, **changes}))

    def to_dict(self) -> dict[str, Any]:
        """Every setting, JSON-ready, in its group. Saved whole in ``run.json`` so that whatever runs on the
        folder later (a protocol that calls the model again, a resume) rebuilds exactly this configuration."""
        return _adapter().dump_python(self, mode="json")

    @classmethod
    def from_dict(cls, data: Any, where: str = "run configuration") -> RunConfig:
        """The configuration ``to_dict`` wrote (or an earlier version's flat one), validated: a bad value is
        a one-line DataError naming ``where`` and the field."""
        try:
            return _adapter().validate_python(dict(data) if isinstance(data, dict) else data,
                                              context={"recorded": True})
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err.get("loc", ())) or "config"
            raise DataError(f"{where}: {loc}: {err.get('msg')}") from None

    @classmethod
    def load(cls, path: Path) -> RunConfig:
        """The configuration a run folder's ``run.json`` records, validated; a one-line error naming the file."""
        from .io import read_json

        run = read_json(path)
        if not isinstance(run, dict) or "config" not in run:
            raise DataError(f"{path}: no run configuration recorded ('config')")
        if not isinstance(run["config"], dict):
            raise DataError(f"{path}: config: expected an object, got {type(run['config']).__name__}")
        return cls.from_dict(run["config"], f"{path}: config")


def _flat_view(group: str, name: str) -> property:
    return property(lambda self: getattr(getattr(self, group), name),
                    doc=f"``{group}.{name}``, read by its flat name")


# read-only flat views: cfg.model is cfg.backend.model (set a field with ``evolve``)
for _name, _group in GROUP_OF.items():
    setattr(RunConfig, _name, _flat_view(_group, _name))


@functools.cache
def _adapter() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(RunConfig)


def recorded_data_dir(run: dict[str, Any]) -> Path | None:
    """The ``--data-dir`` a run folder's ``run.json`` (a dict) records in its configuration, either form;
    None when it records none (the command line it recorded is never parsed for one)."""
    config = run.get("config")
    if not isinstance(config, dict):
        return None
    data = config.get("data")
    value = data.get("data_dir") if isinstance(data, dict) else config.get("data_dir")
    return Path(value) if value else None
