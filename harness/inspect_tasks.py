"""The test phase of one cell as an inspect-ai Task.

The solver asks the method for an answer from its frozen artifact; the scorer applies the
benchmark's judge and appends the result row (and the call counts of that task) to the run folder
immediately, which is what makes runs resumable at task granularity.
"""

from __future__ import annotations

import contextlib
import re
import struct
import traceback
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspect_ai import Epochs
from inspect_ai import Task as InspectTask
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Score as InspectScore
from inspect_ai.scorer import Target, mean, scorer
from inspect_ai.solver import Generate, TaskState, solver

from . import callscope
from .data import Answer, Evidence, Task
from .errors import BudgetExceeded, ModelUnavailableError
from .io import redact_secrets, secret_values
from .method import Context, answering

if TYPE_CHECKING:
    from .runner import LearnedCell, Runner


# inspect's full-screen display is a Textual app that only inspect's own eval() can host (it owns the
# event loop); the test phase runs eval_async inside the harness's loop, so "full" shows the rich display
HOSTED_DISPLAY = {"full": "rich"}


def settle_inspect_display(mode: str) -> str:
    """Fix inspect-ai's display to ``mode`` before anything asks for it, and return the mode in use.

    inspect settles its display type the first time anything reads it (any model call outside eval(),
    such as the preflight's probe or a learning call), from ``INSPECT_DISPLAY`` or its default "full",
    and keeps it and the display object it made for the process. Set at the start of every run, the
    mode asked for is the one used, and a later run in the same process with another mode gets its own.
    """
    import os

    from inspect_ai._display.core import active
    from inspect_ai.util._display import display_type as current
    from inspect_ai.util._display import display_type_initialized, init_display_type

    mode = HOSTED_DISPLAY.get(mode, mode)
    os.environ["INSPECT_DISPLAY"] = mode
    if not display_type_initialized() or current() != mode:
        init_display_type(mode)
        active._active_display = None  # made under the earlier type; the next display() makes the right one
    return mode


NOTES_SHOWN_CHARS = 4000  # of a method's own context kept per result row (a whole source model can be huge)


@dataclass
class _Showing(Context):
    """A test-phase context that remembers what the method put into the shared prompt (its evidence
    and its own notes), so each result row says what the answer was based on (``sourcebench compare``)."""

    shown: list[tuple[list[Evidence], str]] = field(default_factory=list)

    async def solve(self, task: Task, evidence: list[Evidence], notes: str = "", stage: str = "answer") -> Answer:
        if self.capture is None:
            self.shown.append((list(evidence), notes or ""))
        return await super().solve(task, evidence, notes, stage)


def shown_context(ctx: Context) -> _Showing:
    return _Showing(**{f.name: getattr(ctx, f.name) for f in fields(ctx)}, shown=[])


def shown_metadata(shown: list[tuple[list[Evidence], str]]) -> dict[str, Any]:
    """The last prompt's evidence titles and notes (cut to ``NOTES_SHOWN_CHARS``, saying so)."""
    if not shown:
        return {}
    evidence, notes = shown[-1]
    cut = f" [... {len(notes) - NOTES_SHOWN_CHARS} more characters]" if len(notes) > NOTES_SHOWN_CHARS else ""
    return {"evidence_titles": [e.title for e in evidence], "notes": notes[:NOTES_SHOWN_CHARS] + cut}


def sample_id(benchmark: str, source: str, task: Task) -> str:
    """A task's id across methods, seeds and runs: the same question of the same item has the same id."""
    import hashlib

    key = f"{benchmark}\0{source}\0{task.id}\0{task.item_hash}"
    return hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


def cell_task(runner: Runner, cell: LearnedCell, todo: list[Task]) -> InspectTask:
    by_id = {t.id: t for t in todo}
    ctx = runner.context(Context, cell.method, cell.source, cell.split, cell.ledger, "answer")
    state_holder: dict[str, object] = {}
    epochs = max(1, int(getattr(runner.cfg, "epochs", 1) or 1))
    tallies: dict[tuple[str, int], callscope.TaskUsage] = {}  # (task, epoch) -> its calls, answer and judge
    scored: dict[str, dict[int, dict[str, Any]]] = {}  # task -> epoch -> its row, until every epoch is in

    def loaded() -> object:
        if "state" not in state_holder:  # verified by the runner just before the test phase
            state_holder["state"] = cell.method.load(cell.artifact, ctx)
        return state_holder["state"]

    @solver(name="sourcebench_method")
    def method_solver():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            task = by_id[str(state.sample_id)]
            tally = tallies[(task.id, state.epoch)] = callscope.TaskUsage()
            try:
                state_ = loaded()
                showing = shown_context(answering(ctx, cell.method, state_))
                with callscope.scope(tally, state.epoch):
                    answer = await cell.method.answer(task, state_, showing)
                answer.metadata.setdefault("shown", shown_metadata(showing.shown))
            except (ModelUnavailableError, BudgetExceeded):  # the run stops (resumably), not this task
                raise
            except Exception as e:  # a method bug must not stop the other tasks: scored failure
                tb = traceback.format_exc(limit=3)
                answer = Answer(text="", failed=True, failure_reason=f"method error: {type(e).__name__}: {e}",
                                metadata={"traceback": tb[-2000:]})
            state.output = ModelOutput.from_content(model=runner.spec.name, content=answer.text)
            state.metadata["sourcebench_answer"] = answer.model_dump()
            return state

        return solve

    @scorer(metrics=[mean()], name="sourcebench_score")
    def cell_scorer():
        async def score(state: TaskState, target: Target) -> InspectScore:
            task = by_id[str(state.sample_id)]
            answer = Answer.model_validate(state.metadata["sourcebench_answer"])
            tally = tallies.pop((task.id, state.epoch), None) or callscope.TaskUsage()
            with callscope.scope(tally):
                s = await ctx.judge(task, answer)  # type: ignore[misc]
            row = runner.result_row(cell, task, answer, s)
            row["usage"] = tally.as_dict()
            if epochs > 1:
                done = scored.setdefault(task.id, {})
                done[state.epoch] = {**row, "epoch": state.epoch}
                merged = merge_epochs(done, epochs) if len(done) == epochs else None
                if merged is not None:
                    del scored[task.id]
            else:
                merged = row
            if merged is not None:
                await runner.append_row(merged)  # on disk before inspect counts the sample as done
            runner.flush_usage(cell.ledger, cell.source.id, cell.split.seed)
            return InspectScore(value=row["score"], answer=answer.text,
                                explanation=row["failure_reason"] or str(s.details.get("reasoning", "")),
                                metadata={"correct": row["correct"], "failed": row["failed"], "judge": s.judge})

        return score

    # the method and the stable sample id in every sample's metadata: inspect-ai's samples_df and
    # `inspect view` filters line the methods' samples of one question up
    samples = [Sample(id=t.id, input=t.question, target=_target(t),
                      metadata={"group": t.group, "method": cell.method.name, "source": cell.source.id,
                                "seed": cell.split.seed, "sample_id": sample_id(runner.bench.name, cell.source.id, t)})
               for t in todo]
    name = f"{runner.bench.name}-{cell.source.id}-{cell.method.name}-seed{cell.split.seed}"
    return InspectTask(dataset=MemoryDataset(samples, name=name), solver=method_solver(), scorer=cell_scorer(),
                       name=name, version=1, epochs=Epochs(epochs, "mean") if epochs > 1 else None,
                       metadata={"method": cell.method.describe(), "source": cell.source.id, "seed": cell.split.seed,
                                 "artifact": cell.artifact.name})


EPOCH_FIELDS = ("score", "correct", "failed", "failure_reason", "answer", "evidence_ids", "context_tokens",
                "usage")


def merge_epochs(by_epoch: dict[int, dict[str, Any]], epochs: int) -> dict[str, Any]:
    """One result row for a task answered ``epochs`` times (``--epochs``): the unit stays the task.

    score = the mean of the epochs' scores; a task with a failed epoch is a failed row (score 0, as any
    failed row, the first failed epoch's reason), never a mean over the epochs that worked; correct = a
    strict majority of the epochs correct; usage = the epochs' calls and tokens summed; ``epochs`` = each
    epoch's score, answer and usage (the within-task variation the reports show). The other fields are
    epoch 1's.
    """
    rows = [by_epoch[e] for e in sorted(by_epoch)]
    first = rows[0]
    failed = [r for r in rows if r["failed"]]
    merged = dict(first)
    merged.update(
        score=0.0 if failed else sum(float(r["score"]) for r in rows) / len(rows),
        correct=False if failed else sum(bool(r["correct"]) for r in rows) * 2 > len(rows),
        failed=bool(failed),
        failure_reason=(f"epoch {failed[0]['epoch']} of {epochs}: {failed[0]['failure_reason']}" if failed
                        else first["failure_reason"]),
        usage=callscope.summed([r.get("usage") or {} for r in rows]),
        epochs=[{"epoch": r["epoch"], **{k: r.get(k) for k in EPOCH_FIELDS}} for r in rows],
    )
    merged.pop("epoch", None)
    return merged


def _target(t: Task) -> str:
    r = t.reference
    if isinstance(r, list):
        return ", ".join(str(x) for x in r)[:2000]
    if isinstance(r, dict):
        return str(r.get("api_call", ""))[:2000]
    return str(r or "")[:2000]


@contextlib.contextmanager
def single_threaded_log_compression() -> Iterator[None]:
    """Compress inspect's log members on the calling thread while the test phase runs.

    inspect-ai (pinned) writes every finished sample into its ``.eval`` zip through a new
    ``zstandard.ZstdCompressor(threads=12)``, and a multi-threaded compressor starts its worker pool
    for each member: about 4 ms of event-loop time per sample for members of a few kB that one
    thread compresses in 0.1 ms. Those flushes stalled every model call (harness time 11.7 % of
    wall at C = 10 on the throughput benchmark, see README "Performance"). The bytes written are
    ordinary zstd frames either way. Restored on exit; a no-op if inspect's module changes shape.
    """
    try:
        from inspect_ai._util import zipfile as inspect_zip
    except ImportError:  # pragma: no cover - only with another inspect-ai than the pinned one
        yield
        return
    old = getattr(inspect_zip, "_ZSTD_THREADS", None)
    if old is None:
        yield
        return
    inspect_zip._ZSTD_THREADS = 0
    try:
        yield
    finally:
        inspect_zip._ZSTD_THREADS = old


def scrub_logs(paths: Iterable[str | Path]) -> int:
    """Rewrite the inspect logs among ``paths`` that contain a credential, with it masked.

    inspect records a failed model call's error, traceback and raw reply in the transcript, so a
    server that echoes the request's ``Authorization`` header (or a base URL with credentials in
    it) would put a key into the log; the harness's own files are masked when written, inspect's
    are checked here after each test phase: a fast byte scan of the decompressed archive members,
    and only a log that holds a credential is read, masked and written again. A log that cannot be
    read (cut off by a crash) is left as it is. Returns the number of logs rewritten.
    """
    from inspect_ai.log import EvalLog, read_eval_log, write_eval_log

    n = 0
    for path in paths:
        if not _mentions_secret(Path(path)):
            continue
        try:
            text = read_eval_log(str(path)).model_dump_json()
        except Exception:  # a truncated log of a killed run: inspect cannot read it either
            continue
        masked = redact_secrets(text, bearer=True)
        if masked != text:
            write_eval_log(EvalLog.model_validate_json(masked), str(path))
            n += 1
    return n


_SECRET_BYTES = re.compile(rb"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}|://[^/\s@:\"]+:[^/\s@\"]+@")


def _mentions_secret(path: Path) -> bool:
    """Whether any member of an ``.eval`` archive holds a credential (True when unsure)."""
    needles = [v.encode() for v in secret_values()]
    zstd = None
    try:
        with open(path, "rb") as f, zipfile.ZipFile(f) as z:
            for info in z.infolist():
                f.seek(info.header_offset + 26)
                name_len, extra_len = struct.unpack("<HH", f.read(4))
                f.seek(info.header_offset + 30 + name_len + extra_len)
                raw = f.read(info.compress_size)
                if info.compress_type == zipfile.ZIP_STORED:
                    data = raw
                elif info.compress_type == zipfile.ZIP_DEFLATED:
                    data = zlib.decompress(raw, -15)
                elif info.compress_type == _ZIP_ZSTD:
                    if zstd is None:
                        import zstandard

                        zstd = zstandard.ZstdDecompressor()
                    data = zstd.decompress(raw, max_output_size=max(1, info.file_size))
                else:
                    return True
                if any(x in data for x in needles) or _SECRET_BYTES.search(data):
                    return True
    except Exception:  # unreadable here (cut off by a crash, zstandard.ZstdError, ...): the full reader decides
        return True
    return False


_ZIP_ZSTD = 93  # the zip method id of Zstandard, which inspect uses for .eval members


def unfinished_logs(log_dir: Path) -> list[Path]:
    """Logs left in state "started" by a run that was killed (checked again on resume)."""
    from inspect_ai.log import read_eval_log

    out = []
    for p in sorted(Path(log_dir).glob("*.eval")):
        try:
            if read_eval_log(str(p), header_only=True).status == "started":
                out.append(p)
        except Exception:
            out.append(p)
    return out
