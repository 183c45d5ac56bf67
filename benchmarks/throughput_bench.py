"""Test-phase throughput and harness overhead against the fault server at a fixed model latency.

Starts the OpenAI-compatible test server (``tests/hardening/fault_server.py``, no faults, 200 ms per
reply) in its own process, generates a seeded PhantomWiki-format instance large enough for 1,000
test tasks, and runs them through the real runner in this process (``Runner.run``, as the CLI
does) with ``--max-connections C`` (the model concurrency) and ``--max-samples`` a multiple of it
(default 2C, so that a connection never waits for a sample that is busy scoring). Printed:

* throughput: test tasks per second over the test phase (first answer request to last reply, as
  the server saw them), against the ceiling ``C / latency``; goal >= 80 %;
* harness time: the run's wall time minus the time during which at least one model call was in
  flight (union of the server's reply intervals), i.e. everything that is not waiting for the
  model: loading data, splits, learning, bookkeeping, writing rows, the report; goal <= 10 %.
  Library imports are paid once per process, not per run, so they are timed apart: ``import_s``
  (inspect-ai and the harness) and ``lazy_import_s`` (the OpenAI client and inspect's ACP server,
  which a cold process imports during its first run); ``harness_pct_incl_lazy_imports`` adds the
  latter back, as a process that runs a single cell pays it;
* CPU per task (this process), and the same numbers for inspect-ai alone (a solver that only
  sleeps for the latency, same concurrency and log settings) and for inspect-ai with its model
  API (one real call per sample to the same server, no SourceBench): the floors set by the engine.

    python benchmarks/throughput_bench.py                       # 1,000 tasks, C=10, 200 ms
    python benchmarks/throughput_bench.py --concurrency 5,10,20 # a sweep
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RELATIONS = ["mother", "father", "sister", "brother", "friend", "neighbour", "teacher", "doctor"]
ATTRIBUTES = ["hobby", "occupation", "favourite colour", "home town"]
WORDS = ["chess", "golf", "tennis", "rowing", "poetry", "dance", "botany", "pottery", "baker", "pilot", "nurse",
         "judge", "red", "teal", "amber", "violet", "Oslo", "Lima", "Quito", "Perth"]


def make_instance(root: Path, n_people: int, n_questions: int, seed: int) -> Path:
    """A seeded PhantomWiki-format universe: people with relations and attributes, one question per
    (person, relation or attribute), grouped into 100 templates so a 30/70 split is well balanced."""
    rng = np.random.default_rng(seed)
    first = ["Ada", "Bo", "Cy", "Di", "Ed", "Fay", "Gus", "Hal", "Ivy", "Jo", "Kit", "Lu", "Max", "Ned", "Oz", "Pia"]
    last = ["Lee", "Ray", "Cho", "Diaz", "Eze", "Fox", "Gill", "Hart", "Ito", "Jain", "Kahn", "Lund", "Moss"]
    names = sorted({f"{first[i % len(first)]} {last[(i // len(first)) % len(last)]}{'' if i < 208 else f' {i}'}"
                    for i in range(n_people)})
    facts: dict[str, dict[str, str]] = {}
    articles = []
    for i, name in enumerate(names):
        rel = {r: names[int(rng.integers(len(names)))] for r in RELATIONS}
        att = {a: WORDS[int(rng.integers(len(WORDS)))] for a in ATTRIBUTES}
        facts[name] = {**rel, **att}
        family = "\n".join(f"The {r} of {name} is {v}." for r, v in rel.items())
        attrs = "\n".join(f"The {a} of {name} is {v}." for a, v in att.items())
        articles.append({"title": name, "article": f"# {name}\n\n## Family\n{family}\n\n## Attributes\n{attrs}\n"})
    pairs = [(n, k) for n in names for k in RELATIONS + ATTRIBUTES]
    order = rng.permutation(len(pairs))[:n_questions]
    questions = []
    for qi, j in enumerate(sorted(order.tolist())):
        name, key = pairs[j]
        word = "Who" if key in RELATIONS else "What"
        questions.append({"id": f"q{qi:05d}", "question": f"{word} is the {key} of {name}?",
                          "answer": [facts[name][key]], "type": qi % 100, "difficulty": 1})
    inst = root / "phantomwiki" / "synthetic"
    inst.mkdir(parents=True, exist_ok=True)
    (inst / "articles.json").write_text(json.dumps(articles))
    (inst / "questions.json").write_text(json.dumps(questions))
    return root


class ServerProcess:
    """The fault server in its own interpreter (so it does not share this process's GIL)."""

    def __init__(self, latency: float):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "hardening" / "fault_server.py"),
                                      "--latency", str(latency), "--lifetime", "7200"],
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        m = re.search(r"listening (\S+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"fault server did not start: {line!r}")
        self.url = m.group(1)

    def request(self, path: str, method: str = "GET") -> dict:
        import urllib.request

        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def stats(self) -> dict:
        return self.request("/stats")

    def reset(self) -> None:
        self.request("/reset", "POST")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def union_seconds(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Total length of the union of intervals, clipped to [lo, hi]."""
    total, end = 0.0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def inspect_only(n: int, conc: int, latency: float, log_dir: Path) -> dict:
    """inspect-ai's own per-sample cost: the same eval loop with a solver that only waits."""
    import asyncio
    import resource

    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score, mean, scorer
    from inspect_ai.solver import solver

    @solver
    def wait():
        async def solve(state, generate):
            await asyncio.sleep(latency)
            state.output = ModelOutput.from_content(model="none", content="x")
            return state
        return solve

    @scorer(metrics=[mean()])
    def one():
        async def score(state, target):
            return Score(value=1.0)
        return score

    task = Task(dataset=MemoryDataset([Sample(id=str(i), input=f"q{i}", target="x") for i in range(n)]),
                solver=wait(), scorer=one(), name="inspect-only")
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    asyncio.run(eval_async(task, model="mockllm/model", log_dir=str(log_dir), max_samples=conc, log_realtime=False,
                           score_display=False))
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"inspect_only_tasks_per_s": round(n / wall, 2),
            "inspect_only_pct_of_ceiling": round(100 * n / wall / (conc / latency), 1),
            "inspect_only_cpu_ms_per_task": round(1000 * cpu / n, 1)}


def inspect_generate(n: int, conc: int, latency: float, log_dir: Path, model: str, samples: int) -> dict:
    """inspect-ai plus its model API, no SourceBench: each sample makes one real call to the test
    server through inspect's OpenAI-compatible provider (request building, HTTP, events, usage).
    This is the floor the harness's own per-task cost sits on."""
    import asyncio
    import resource

    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.scorer import Score, mean, scorer
    from inspect_ai.solver import generate

    @scorer(metrics=[mean()])
    def one():
        async def score(state, target):
            return Score(value=1.0)
        return score

    task = Task(dataset=MemoryDataset([Sample(id=str(i), input=f"Question {i}: who is the mother of person {i}?",
                                              target="x") for i in range(n)]),
                solver=generate(), scorer=one(), name="inspect-generate")
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    asyncio.run(eval_async(task, model=model, log_dir=str(log_dir), max_samples=samples, max_connections=conc,
                           log_realtime=False, score_display=False, max_tokens=64))
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"inspect_generate_tasks_per_s": round(n / wall, 2),
            "inspect_generate_pct_of_ceiling": round(100 * n / wall / (conc / latency), 1),
            "inspect_generate_cpu_ms_per_task": round(1000 * cpu / n, 1)}


def run_once(data: Path, out: Path, model: str, methods: list[str], n_tasks: int, conc: int,
             report: bool = False, samples: int | None = None, processes: int = 1) -> tuple[float, dict]:
    from sourcebench.harness.runner import RunConfig, Runner
    from sourcebench.reports.leaderboard import write_report

    cfg = RunConfig(benchmark="phantomwiki", methods=methods, model=model, out=out, seeds=[0], limit=n_tasks,
                    data_dir=data, embedder="hash", max_samples=samples or conc, max_connections=conc,
                    test_processes=processes)
    t0 = time.perf_counter()
    summary = Runner(cfg).run()
    if report:
        summary["report"] = write_report(out, data_dir=data)
    return time.perf_counter() - t0, summary


def measure(server: ServerProcess, data: Path, work: Path, methods: list[str], n_tasks: int, conc: int,
            latency: float, report: bool, samples: int, processes: int = 1) -> dict:
    import resource

    out = work / f"run-c{conc}"
    shutil.rmtree(out, ignore_errors=True)
    server.reset()
    def cpu_now() -> float:  # this process and its finished children (--test-processes workers)
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                      resource.getrusage(resource.RUSAGE_CHILDREN)))

    t_start, c0 = time.time(), cpu_now()
    wall, summary = run_once(data, out, "openai-api/fault/ok", methods, n_tasks, conc, report, samples, processes)
    t_end, cpu = time.time(), cpu_now() - c0
    st = server.stats()
    iv = [tuple(x) for x in st["intervals"]]
    answer_iv = sorted(iv)[1:]  # the first request is the endpoint probe
    first, last = answer_iv[0][0], max(b for _, b in answer_iv)
    n_rows = summary["rows_new"]
    model_busy = union_seconds(iv, t_start, t_end)
    thr = n_rows / (last - first)
    ceiling = conc / latency
    return {
        "tasks": n_rows, "methods": ",".join(methods), "concurrency": conc, "max_samples": samples,
        "test_processes": processes,
        "latency_s": latency,
        "requests": st["requests"], "max_in_flight": st["max_in_flight"],
        "test_phase_s": round(last - first, 2), "throughput_tasks_per_s": round(thr, 2),
        "ceiling_tasks_per_s": round(ceiling, 2), "throughput_pct_of_ceiling": round(100 * thr / ceiling, 1),
        "run_wall_s": round(wall, 2), "model_busy_s": round(model_busy, 2),
        "before_first_call_s": round(min(iv)[0] - t_start, 2), "after_last_reply_s": round(t_end - last, 2),
        "harness_s": round(wall - model_busy, 2), "harness_pct_of_wall": round(100 * (wall - model_busy) / wall, 1),
        "live_calls": summary["live_calls"], "cpu_s": round(cpu, 2),
        "cpu_ms_per_task": round(1000 * cpu / max(1, n_rows), 1),
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--concurrency", default="10", help="comma-separated values of C (max samples = max connections)")
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per model reply (default 0.2)")
    ap.add_argument("--samples-per-connection", type=int, default=2, help="max samples = this x C (default 2)")
    ap.add_argument("--test-processes", type=int, default=1, help="split the test tasks over N processes "
                    "(sourcebench run --test-processes); CPU includes the worker processes")
    ap.add_argument("--methods", default="no_source", help="methods to run (one model call per task each)")
    ap.add_argument("--report", action="store_true", help="also write the leaderboard (counted as harness time)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-inspect-baseline", action="store_true", help="skip the inspect-only measurement")
    ap.add_argument("--keep", type=Path, help="keep the data and run folders here")
    ap.add_argument("--json", type=Path, help="write the numbers to this file")
    args = ap.parse_args()

    os.environ.setdefault("INSPECT_DISPLAY", "none")
    os.environ.setdefault("INSPECT_LOG_LEVEL", "warning")
    work = args.keep or Path(tempfile.mkdtemp(prefix="sb-throughput-"))
    work.mkdir(parents=True, exist_ok=True)
    methods = [m for m in args.methods.split(",") if m]
    n_q = int(args.tasks / 0.7 / 0.95) + 50  # the test side of a 30/70 grouped split must hold --tasks
    data = make_instance(work / "data", n_people=max(60, n_q // 10 + 1), n_questions=n_q, seed=args.seed)
    t = time.perf_counter()
    import inspect_ai  # noqa: F401

    import sourcebench.harness.runner  # noqa: F401  (import time reported apart: paid once per process)

    import_s = time.perf_counter() - t
    # imported by a run's first model call (the OpenAI client) and first test phase (inspect's ACP
    # server): also once per process, however many cells it runs; timed apart and added back below
    t = time.perf_counter()
    import openai  # noqa: F401
    from inspect_ai.agent._acp import server as _acp  # noqa: F401

    lazy_import_s = time.perf_counter() - t
    server = ServerProcess(args.latency)
    os.environ["FAULT_BASE_URL"] = server.url
    os.environ["FAULT_API_KEY"] = "throughput-bench-key-not-secret"
    results = []
    try:
        for conc in [int(c) for c in args.concurrency.split(",")]:
            samples = conc * args.samples_per_connection
            res = measure(server, data, work, methods, args.tasks, conc, args.latency, args.report, samples,
                          args.test_processes)
            res["import_s"] = round(import_s, 2)
            res["lazy_import_s"] = round(lazy_import_s, 2)
            # a process that runs only this one cell pays the lazy imports inside the run
            res["harness_pct_incl_lazy_imports"] = round(
                100 * (res["harness_s"] + lazy_import_s) / (res["run_wall_s"] + lazy_import_s), 1)
            if not args.no_inspect_baseline:
                res.update(inspect_only(args.tasks, conc, args.latency, work / "inspect-only-logs"))  # C samples
                server.reset()
                res.update(inspect_generate(args.tasks, conc, args.latency, work / "inspect-generate-logs",
                                            "openai-api/fault/ok", samples))
            results.append(res)
            for k, v in res.items():
                print(f"{k:28s} {v}")
            print(f"throughput goal (>= 80% of C/latency): {'met' if res['throughput_pct_of_ceiling'] >= 80 else 'NOT met'}; "
                  f"harness goal (<= 10% of wall): {'met' if res['harness_pct_of_wall'] <= 10 else 'NOT met'} "
                  f"({'met' if res['harness_pct_incl_lazy_imports'] <= 10 else 'NOT met'} counting the lazy imports)")
            print()
    finally:
        server.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
