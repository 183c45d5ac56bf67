"""Scale benchmark: each method built on the paper's largest sources against an instant API.

Every (method, source) pair runs as its own ``sourcebench run ... --seeds 0 --limit 2`` subprocess
against the API-like test backend (``tests/backends/api_server.py``), started here, in this process,
on 127.0.0.1 (a few ms a call), with ``openai-api/testapi/gpt-oss-120b`` at medium reasoning effort
and ``openai/text-embedding-3-large``. A subprocess per pair keeps the measures honest: its wall time,
its CPU seconds (user + sys from ``os.wait4``; the backend runs in this parent, so the child's CPU is
the harness's own), its peak memory (the process tree's RSS, polled, and the child's ``ru_maxrss``),
and no cache or warm import shared between methods. Model calls and model seconds (summed live-call
latencies) come from the run's ``usage.jsonl``, per phase and stage; the backend's request count
covers a run that was stopped before it flushed. Wall time per stage is not recorded by the harness,
so the per-stage rows give calls and model seconds only.

Sources: SWE-QA trees (sdists: ``pip download --no-deps --no-binary :all: sphinx==8.1.3`` and
extract, the folder given with ``--srcs``), a synthetic NarrativeQA-format book (``story``, ~250k
words in the Hugging Face row format) and a synthetic MultiDoc2Dial-format domain (``domain``, ~150
documents in the upstream JSON files), both generated deterministically from a seed.

    python benchmarks/scale_bench.py --sources flask --methods hybrid_rag,no_source
    python benchmarks/scale_bench.py --sources sphinx --timeout-s 900 --timeout raptor=1800
    python benchmarks/scale_bench.py --sources story,domain --dump-every 60   # py-spy stacks of slow builds

A pair past its timeout is stopped and reported "not finished in N s" with what it had done.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = "openai-api/testapi/gpt-oss-120b"
EMBEDDER = "openai/text-embedding-3-large"
SWE_QA_REPOS = ("flask", "sphinx", "xarray", "conan", "pytest", "streamlink")
STORY_ID = "5ca1ab1e" * 5  # a 40-hex document id, as NarrativeQA's
DOMAIN = "synthdomain"


# -- synthetic sources ---------------------------------------------------------------------------------
def _vocabulary(rng: random.Random, n: int) -> list[str]:
    """Pronounceable pseudo-words, so the text has a realistic spread of rare and common terms."""
    syl = [c + v for c in "bdfghklmnprstvwz" for v in "aeiou"] + ["th", "sh", "ch", "ar", "el", "on", "in"]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(syl) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    return sorted(words)


class _Prose:
    """Deterministic English-like sentences: Zipf-weighted pseudo-words between function words."""

    FUNCTION = ("the", "a", "of", "and", "to", "in", "was", "he", "she", "it", "that", "with", "on", "for")

    def __init__(self, seed: int, vocab: int = 6000, names: int = 60):
        self.rng = random.Random(seed)
        self.words = _vocabulary(self.rng, vocab)
        self.weights = [1.0 / (i + 1) for i in range(len(self.words))]
        self.names = [w.capitalize() for w in _vocabulary(random.Random(seed + 1), names)]

    def sentence(self) -> str:
        n = self.rng.randint(8, 22)
        content = self.rng.choices(self.words, self.weights, k=n)
        out = [self.rng.choice(self.names)]
        for w in content:
            out.append(self.rng.choice(self.FUNCTION) if self.rng.random() < 0.4 else w)
        return " ".join(out) + "."

    def paragraph(self, sentences: int) -> str:
        return " ".join(self.sentence() for _ in range(sentences))


def write_story(data_dir: Path, words: int = 250_000, chapters: int = 60, seed: int = 0) -> Path:
    """A Gutenberg-style book of ``words`` words in NarrativeQA's row format (one story, a few questions)."""
    prose = _Prose(seed)
    per_chapter = words // chapters
    parts = ["The Project Gutenberg EBook of The Long Synthetic Road, by A. Generator", "",
             "*** START OF THIS PROJECT GUTENBERG EBOOK THE LONG SYNTHETIC ROAD ***", "", "THE LONG SYNTHETIC ROAD", ""]
    count = 0
    for c in range(1, chapters + 1):
        parts += [f"CHAPTER {c}", "", f"THE {prose.rng.choice(prose.words).upper()}", ""]
        n = 0
        while n < per_chapter:
            para = prose.paragraph(prose.rng.randint(3, 8))
            n += len(para.split())
            parts += [para, ""]
        count += n
    parts += ["THE END", "", "*** END OF THIS PROJECT GUTENBERG EBOOK THE LONG SYNTHETIC ROAD ***"]
    text = "\n".join(parts)
    doc = {"id": STORY_ID, "kind": "gutenberg", "url": "http://example.org/synthetic", "file_size": len(text),
           "word_count": count, "start": "CHAPTER 1", "end": "THE END",
           "summary": {"text": "A synthetic book.", "tokens": ["A", "synthetic", "book."], "url": "", "title": "Road"},
           "text": text}
    rows = []
    for i in range(8):
        name = prose.names[i]
        q = f"What does {name} do in chapter {i + 1}?"
        a = f"{name} travels on the road."
        rows.append({"document": doc, "question": {"text": q, "tokens": q.split()},
                     "answers": [{"text": a, "tokens": a.split()}, {"text": name, "tokens": [name]}]})
    folder = data_dir / "narrativeqa"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "narrativeqa_test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _document(prose: _Prose, doc_id: str, sections: int) -> dict:
    """One MultiDoc2Dial document: a title heading, then (heading, 2-4 sentence spans) per section."""
    text, spans = "", {}

    def span(tag: str, body: str, title: str, id_sec: str, parents: list[dict]) -> None:
        nonlocal text
        sid = str(len(spans) + 1)
        start = len(text)
        text += body
        spans[sid] = {"id_sp": sid, "tag": tag, "start_sp": start, "end_sp": len(text), "text_sp": body,
                      "title": title, "parent_titles": parents, "id_sec": id_sec}

    title = doc_id.split("#")[0]
    span("h2", f"\n\n{title} \n", title, "t_0", [])
    for s in range(sections):
        head = " ".join(prose.rng.choice(prose.words) for _ in range(3)).capitalize()
        span("h3", f"\n\n{head} \n", head, f"t_{s + 1}", [{"id_sp": "1", "text": title, "level": "h2"}])
        first = len(spans)
        for _ in range(prose.rng.randint(2, 4)):
            span("u", prose.sentence() + " ", head, str(s + 1), [])
        members = [spans[str(i)] for i in range(first + 1, len(spans) + 1)]
        sec_text = "".join(m["text_sp"] for m in members)
        for m in members:
            m.update(start_sec=members[0]["start_sp"], end_sec=members[-1]["end_sp"], text_sec=sec_text)
    for sp in spans.values():
        if "text_sec" not in sp:
            sp.update(start_sec=sp["start_sp"], end_sec=sp["end_sp"], text_sec=sp["text_sp"])
    return {"doc_id": doc_id, "title": doc_id.rsplit("_", 1)[0], "domain": DOMAIN, "doc_text": text,
            "doc_html_ts": "", "doc_html_raw": "", "spans": spans}


def write_domain(data_dir: Path, documents: int = 150, seed: int = 0) -> Path:
    """A MultiDoc2Dial domain of ``documents`` documents (5-12 sections each) and 6 short dialogues."""
    prose = _Prose(seed + 7)
    docs = {}
    for i in range(documents):
        doc_id = f"{' '.join(prose.rng.choice(prose.words) for _ in range(3)).capitalize()} {i}#1_0"
        docs[doc_id] = _document(prose, doc_id, prose.rng.randint(5, 12))
    ids = list(docs)
    dialogues = []
    for d in range(6):
        doc = docs[ids[d * 7 % len(ids)]]
        u = [s for s in doc["spans"].values() if s["tag"] == "u"]
        turns = []
        for t in range(2):
            sp = u[t % len(u)]
            turns.append({"turn_id": 2 * t + 1, "role": "user", "da": "query_condition", "utterance":
                          f"What about {sp['title'].lower()}?", "references":
                          [{"id_sp": sp["id_sp"], "label": "precondition", "doc_id": doc["doc_id"]}]})
            turns.append({"turn_id": 2 * t + 2, "role": "agent", "da": "respond_solution", "utterance":
                          sp["text_sp"].strip(), "references":
                          [{"id_sp": sp["id_sp"], "label": "solution", "doc_id": doc["doc_id"]}]})
        dialogues.append({"dial_id": f"{d:032x}", "turns": turns})
    folder = data_dir / "multidoc2dial"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "multidoc2dial_doc.json").write_text(json.dumps({"doc_data": {DOMAIN: docs}}))
    for split, dials in (("train", dialogues[:2]), ("validation", dialogues[2:])):
        (folder / f"multidoc2dial_dial_{split}.json").write_text(json.dumps({"dial_data": {DOMAIN: dials}}))
    return folder


def _find_tree(srcs: Path, repo: str) -> Path:
    cands = sorted(p for p in srcs.glob(f"{repo}-*") if p.is_dir())
    if not cands:
        raise SystemExit(f"{srcs}: no extracted {repo} sdist ({repo}-<version>/); pip download --no-deps "
                         f"--no-binary :all: {repo} -d {srcs} and extract it")
    return cands[-1]


def source_args(name: str, srcs: Path, swe_qa_data: Path, synth_dir: Path) -> list[str]:
    """The ``sourcebench run`` arguments that select one source."""
    if name in SWE_QA_REPOS:
        return ["--benchmark", "swe_qa", "--sources", name, "--opt", f"{name}={_find_tree(srcs, name)}",
                "--data-dir", str(swe_qa_data)]
    if name == "story":
        if not (synth_dir / "narrativeqa" / "narrativeqa_test.jsonl").exists():
            write_story(synth_dir)
        return ["--benchmark", "narrativeqa", "--opt", f"stories={STORY_ID}", "--data-dir", str(synth_dir)]
    if name == "domain":
        if not (synth_dir / "multidoc2dial" / "multidoc2dial_doc.json").exists():
            write_domain(synth_dir)
        return ["--benchmark", "multidoc2dial", "--sources", DOMAIN, "--data-dir", str(synth_dir)]
    raise SystemExit(f"unknown source {name!r}: one of {', '.join(SWE_QA_REPOS)}, story, domain")


# -- one measured run ----------------------------------------------------------------------------------
@dataclass
class Measure:
    method: str
    source: str
    finished: bool
    rc: int | None
    wall_s: float
    cpu_s: float  # the child's user + sys (its own and its waited-for children's)
    peak_rss_mb: float  # the process tree's summed RSS, polled every 0.2 s
    maxrss_mb: float  # the largest single process's ru_maxrss
    calls: int  # usage.jsonl: model calls (live + cached + failed), learn and test
    model_s: float  # usage.jsonl: summed call seconds
    api_requests: int  # the backend's count (chat + embeddings requests), also for an unfinished run
    elements: int
    stages: dict = field(default_factory=dict)  # "phase/stage" -> {"calls", "seconds"}
    timeout_s: float = 0.0
    note: str = ""

    @property
    def ms_per_call(self) -> float | None:
        n = self.calls or self.api_requests
        return 1000 * self.cpu_s / n if n else None


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


def _usage(out: Path) -> tuple[int, float, dict]:
    calls, secs, stages = 0, 0.0, {}
    path = out / "usage.jsonl"
    if not path.exists():
        return 0, 0.0, {}
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a stopped run
        calls += int(r.get("calls", 0))
        secs += float(r.get("seconds", 0.0))
        st = stages.setdefault(f"{r.get('phase')}/{r.get('stage')}", {"calls": 0, "seconds": 0.0})
        st["calls"] += int(r.get("calls", 0))
        st["seconds"] += float(r.get("seconds", 0.0))
    return calls, secs, stages


def _dump(pid: int, path: Path) -> None:
    """Append one py-spy stack dump of the child (for a build that looks stuck)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    try:
        r = subprocess.run([exe, "dump", "--pid", str(pid)], check=False, capture_output=True, text=True,
                           timeout=60)
        with path.open("a") as f:
            f.write(f"=== {time.strftime('%H:%M:%S')}\n{r.stdout}{r.stderr}\n")
    except (OSError, subprocess.TimeoutExpired) as e:
        with path.open("a") as f:
            f.write(f"=== py-spy dump failed: {e}\n")


def run_one(api, method: str, source: str, src_args: list[str], elements: int, out_root: Path, timeout_s: float,
            dump_every: float, extra: list[str]) -> Measure:
    out = out_root / f"{source}-{method}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "sourcebench.harness.cli", "run", *src_args, "--methods", method, "--model", MODEL,
           "--reasoning-effort", "medium", "--judge-reasoning-effort", "medium", "--embedder", EMBEDDER,
           "--seeds", "0", "--limit", "2", "--out", str(out / "run"), *extra]
    api.reset()
    log = (out / "log.txt").open("w")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **api.env()})
    peak = [0]
    stop = threading.Event()

    def poll() -> None:
        next_dump = t0 + dump_every if dump_every else float("inf")
        while not stop.wait(0.2):
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            if time.perf_counter() >= next_dump:
                _dump(proc.pid, out / "pyspy-dumps.txt")
                next_dump += dump_every

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    finished, rc, note = True, None, ""
    deadline = t0 + timeout_s
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.perf_counter() > deadline:
            finished, note = False, f"not finished in {timeout_s:.0f} s"
            if dump_every:
                _dump(proc.pid, out / "pyspy-dumps.txt")
            pid, status, ru = _stop(proc.pid)
            break
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    proc.returncode = rc if rc is not None else -9  # reaped by wait4: keep Popen from waiting again
    stop.set()
    watcher.join()
    log.close()
    calls, model_s, stages = _usage(out / "run")
    st = api.stats()
    reqs = int(sum(st["requests"].values()))
    if finished and rc not in (0, None):
        tail = (out / "log.txt").read_text().strip().splitlines()[-1:] or [""]
        note = f"exit {rc}: {tail[0][:120]}"
    return Measure(method=method, source=source, finished=finished, rc=rc, wall_s=wall,
                   cpu_s=(ru.ru_utime + ru.ru_stime) if ru else float("nan"), peak_rss_mb=peak[0] / 2**20,
                   maxrss_mb=(ru.ru_maxrss / 1024) if ru else float("nan"), calls=calls, model_s=model_s,
                   api_requests=reqs, elements=elements, stages=stages, timeout_s=timeout_s,
                   note=note)


def _stop(pid: int, grace: float = 20.0):
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds; reap it: wait4's result."""
    os.killpg(pid, signal.SIGTERM)
    end = time.time() + grace
    while time.time() < end:
        got = os.wait4(pid, os.WNOHANG)
        if got[0]:
            return got
        time.sleep(0.2)
    os.killpg(pid, signal.SIGKILL)
    return os.wait4(pid, 0)


def count_elements(src_args: list[str]) -> int:
    """Elements of the source the arguments select, loaded here as the run will load it."""
    from sourcebench.harness.registry import get_benchmark_class

    opts = dict(src_args[i + 1].split("=", 1) for i, a in enumerate(src_args) if a == "--opt")
    bench_name = src_args[src_args.index("--benchmark") + 1]
    data = Path(src_args[src_args.index("--data-dir") + 1])
    bench = get_benchmark_class(bench_name)(data_dir=data, options=opts)
    sid = src_args[src_args.index("--sources") + 1] if "--sources" in src_args else bench.source_ids()[0]
    return len(bench.load_source(sid).elements)


# -- report --------------------------------------------------------------------------------------------
def startup_cpu_s() -> float:
    """CPU seconds of a bare start of the harness (interpreter, imports), to tell fixed cost from per-call cost."""
    proc = subprocess.Popen([sys.executable, "-c", "import sourcebench.harness.cli, sourcebench.harness.runner, inspect_ai.model"], cwd=ROOT)
    _, _, ru = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return ru.ru_utime + ru.ru_stime


def table(rows: list[Measure], startup_s: float) -> str:
    """The measures, with the harness's CPU per model call also net of the fixed cost: over ``no_source``
    on the same source (start-up, imports, loading the source, answering and judging 2 tasks) where that
    row is present, else over a bare start-up."""
    base = {m.source: m for m in rows if m.method == "no_source" and m.finished and m.rc == 0}
    head = ("| source | method | status | wall s | model calls | model s | harness CPU s | harness ms/call "
            "| ms/call net of fixed cost | API requests (chat + embeddings) | peak RSS MB | elements "
            "| harness CPU ms/element |")
    lines = [head, "|" + "---|" * 13]
    for m in rows:
        status = "ok" if m.finished and m.rc == 0 else (m.note or f"exit {m.rc}")
        calls = m.calls if m.calls else f"{m.api_requests} (backend)"
        n = m.calls or m.api_requests
        ms = f"{m.ms_per_call:.1f}" if m.ms_per_call is not None and m.finished else "-"  # stopped: CPU without its calls
        b = base.get(m.source)
        fixed_cpu, fixed_calls = (b.cpu_s, b.calls) if b and m is not b else (startup_s, 0)
        net = f"{1000 * max(m.cpu_s - fixed_cpu, 0.0) / (n - fixed_calls):.1f}" if n > fixed_calls and m.finished else "-"
        lines.append(f"| {m.source} | {m.method} | {status} | {m.wall_s:.0f} | {calls} | {m.model_s:.1f} | "
                     f"{m.cpu_s:.1f} | {ms} | {net} | {m.api_requests} | {max(m.peak_rss_mb, m.maxrss_mb):.0f} | "
                     f"{m.elements} | {1000 * m.cpu_s / m.elements:.1f} |")
    return "\n".join(lines)


def stage_table(rows: list[Measure]) -> str:
    lines = ["| source | method | phase/stage | model calls | model s |", "|---|---|---|---|---|"]
    for m in rows:
        for st, v in sorted(m.stages.items()):
            lines.append(f"| {m.source} | {m.method} | {st} | {v['calls']} | {v['seconds']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from sourcebench.harness.registry import method_names
    from tests.backends.api_server import ApiServer

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default=",".join(method_names()), help="comma-separated (default: all registered)")
    ap.add_argument("--sources", default="flask", help="comma-separated: flask, sphinx, xarray, conan, story, domain")
    ap.add_argument("--srcs", type=Path, default=Path("srcs"), help="folder of extracted sdists (<repo>-<ver>/; "
                    "default ./srcs)")
    ap.add_argument("--swe-qa-data", type=Path, default=ROOT.parent / "shared" / "data",
                    help="data folder holding swe_qa/<repo>.jsonl")
    ap.add_argument("--synth-dir", type=Path, default=Path("runs") / "scale_bench_synth",
                    help="where the synthetic story and domain are written")
    ap.add_argument("--out", type=Path, default=Path("runs") / "scale_bench")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per (method, source) run (default 900)")
    ap.add_argument("--timeout", action="append", default=[], metavar="METHOD=S", help="a method's own timeout")
    ap.add_argument("--dump-every", type=float, default=0.0,
                    help="py-spy dump the child every S seconds (and at a timeout) into <out>/<pair>/pyspy-dumps.txt")
    ap.add_argument("--json", type=Path, default=None, help="also append each measure as a JSON line here")
    ap.add_argument("--from-json", type=Path, nargs="+", default=None,
                    help="print the tables of measures saved with --json, running nothing")
    args, extra = ap.parse_known_args(argv)
    if args.from_json:
        saved = [json.loads(x) for f in args.from_json for x in f.read_text().splitlines() if x.strip()]
        rows = [Measure(**{k: v for k, v in r.items() if k != "ms_per_call"}) for r in saved]
        print(table(rows, startup_cpu_s()), stage_table(rows), sep="\n\n")
        return
    per_method = {k: float(v) for k, v in (x.split("=", 1) for x in args.timeout)}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[Measure] = []
    with ApiServer(lifetime=24 * 3600) as api:
        for source in sources:
            src_args = source_args(source, args.srcs, args.swe_qa_data, args.synth_dir)
            elements = count_elements(src_args)
            print(f"{source}: {elements} elements", flush=True)
            for method in methods:
                m = run_one(api, method, source, src_args, elements, args.out, per_method.get(method, args.timeout_s),
                            args.dump_every, extra)
                rows.append(m)
                print(f"{source} {method}: {'ok' if m.finished and m.rc == 0 else m.note or m.rc} wall {m.wall_s:.0f} s, "
                      f"calls {m.calls} (backend {m.api_requests}), cpu {m.cpu_s:.1f} s, "
                      f"peak {max(m.peak_rss_mb, m.maxrss_mb):.0f} MB", flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps({**m.__dict__, "ms_per_call": m.ms_per_call}) + "\n")
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs\n")
    startup = startup_cpu_s()
    print(f"harness start-up (interpreter and imports, no run): {startup:.1f} CPU s; 'net of fixed cost' "
          f"subtracts no_source's CPU and calls on the same source, or this start-up without a no_source row\n")
    print(table(rows, startup))
    print()
    print("Per phase and stage (usage.jsonl; the harness records no wall time per stage):\n")
    print(stage_table(rows))


if __name__ == "__main__":
    main()
