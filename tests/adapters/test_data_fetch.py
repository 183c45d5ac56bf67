"""`sourcebench data fetch`, offline: files served from 127.0.0.1, git on local repositories, the Hub's
``datasets`` loader and the PhantomWiki generator replaced by fakes. Covers every benchmark, resumption
(an interrupted download resumes with a Range request; verified files are kept without a request) and
checksum mismatches (one-line error, bad file not kept)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sourcebench.adapters import availability
from sourcebench.adapters.apibench import fetch as apibench
from sourcebench.adapters.apibench.benchmark import APIBench
from sourcebench.adapters.fetch import FETCHERS, run_fetch
from sourcebench.adapters.fetch.download import RemoteFile, fetch_file, sha256_of
from sourcebench.adapters.fetch.manifest import MANIFEST, Manifest
from sourcebench.adapters.multidoc2dial import fetch as multidoc2dial
from sourcebench.adapters.multidoc2dial.benchmark import MultiDoc2Dial
from sourcebench.adapters.narrativeqa.benchmark import HF_REVISION, PAPER_STORIES, NarrativeQA
from sourcebench.adapters.phantomwiki import fetch as phantomwiki
from sourcebench.adapters.phantomwiki.benchmark import PhantomWiki
from sourcebench.adapters.swe_qa import fetch as swe_qa
from sourcebench.harness.cli import main
from sourcebench.harness.errors import ConfigError, DataError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


# -- a local file server ------------------------------------------------------------------------------
class Server:
    """Serves ``files`` (URL path -> bytes) on 127.0.0.1 with Range support; ``cut_after`` makes the next
    response stop after that many bytes (the connection drops, as on a network failure)."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.cut_after: int | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                rng = self.headers.get("Range")
                server.requests.append((self.path, rng))
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                start = int(rng.split("=")[1].split("-")[0]) if rng else 0
                if start >= len(body) and rng:
                    self.send_response(416)
                    self.end_headers()
                    return
                self.send_response(206 if rng else 200)
                if rng:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                data = body[start:]
                if server.cut_after is not None:
                    data, server.cut_after = data[: server.cut_after], None
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def add(self, path: str, body: bytes) -> str:
        self.files[path] = body
        return self.url + path


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def spec_for(server: Server, path: str, body: bytes, name: str = "f.bin") -> RemoteFile:
    return RemoteFile(name, (server.add(path, body),), hashlib.sha256(body).hexdigest(), len(body))


def quiet(_msg: str) -> None:
    pass


# -- the download itself --------------------------------------------------------------------------------
def test_download_is_checked_recorded_and_kept_on_rerun(server, tmp_path):
    body = b"x" * 200_000
    spec = spec_for(server, "/a.bin", body)
    man = Manifest(tmp_path, "t")
    assert fetch_file(spec, tmp_path, man, quiet) is True
    assert (tmp_path / "f.bin").read_bytes() == body and not list(tmp_path.glob(".*.part"))
    rec = json.loads((tmp_path / MANIFEST).read_text())["steps"]["f.bin"]
    assert rec == {"url": server.url + "/a.bin", "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    n = len(server.requests)
    assert fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet) is False  # verified: no request
    assert len(server.requests) == n


def test_interrupted_download_resumes_with_a_range_request(server, tmp_path):
    body = bytes(range(256)) * 1000
    spec = spec_for(server, "/big.bin", body)
    server.cut_after = 100_000
    with pytest.raises(DataError, match=r"f.bin: download failed: .*connection closed after 100000 of 256000 bytes"
                                        r".*partial file is kept and resumed"):
        fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet)
    assert not (tmp_path / "f.bin").exists()
    assert (tmp_path / ".f.bin.part").stat().st_size == 100_000
    assert fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet) is True
    assert server.requests[-1] == ("/big.bin", "bytes=100000-")
    assert (tmp_path / "f.bin").read_bytes() == body and not (tmp_path / ".f.bin.part").exists()


def test_checksum_mismatch_is_one_line_and_the_file_is_not_kept(server, tmp_path):
    spec = RemoteFile("f.bin", (server.add("/c.bin", b"tampered bytes"),), hashlib.sha256(b"real").hexdigest())
    with pytest.raises(DataError) as e:
        fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet)
    msg = str(e.value)
    assert "\n" not in msg and "checksum mismatch" in msg and "the download was deleted" in msg and "f.bin" in msg
    assert list(tmp_path.iterdir()) == []  # neither the file, nor a partial file, nor a manifest entry


def test_a_changed_file_is_fetched_again(server, tmp_path):
    spec = spec_for(server, "/d.bin", b"good content")
    fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet)
    (tmp_path / "f.bin").write_bytes(b"good contenT")  # same size, other bytes
    assert fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet) is True
    assert (tmp_path / "f.bin").read_bytes() == b"good content"


def test_unreachable_address_is_a_clear_error(tmp_path):
    spec = RemoteFile("f.bin", ("http://127.0.0.1:9/nothing",), "0" * 64)
    with pytest.raises(DataError, match=r"f.bin: download failed: http://127.0.0.1:9/nothing: URLError.*run the same "
                                        r"command again$"):
        fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet)


# -- APIBench -------------------------------------------------------------------------------------------
def apibench_bodies() -> dict[str, bytes]:
    api = {"domain": "Classification", "framework": "PyTorch", "functionality": "Image classification",
           "api_name": "resnet18", "api_call": "torch.hub.load(repo_or_dir='pytorch/vision', model='resnet18')"}
    ev = {"code": "###Instruction: classify a photo ###Output: ...", "api_call": api["api_call"], "api_data": api}
    q = {"question_id": 1, "text": "Classify this photo of a dog.", "category": "generic"}
    return {"torchhub_api.jsonl": (json.dumps(api) + "\n").encode(),
            "torchhub_eval.json": (json.dumps(ev) + "\n").encode(),
            "questions_torchhub_0_shot.jsonl": (json.dumps(q) + "\n").encode(),
            "LICENSE": b"Apache License 2.0\n"}


def test_apibench_fetch_gives_the_layout_the_adapter_reads(server, tmp_path, monkeypatch):
    bodies = apibench_bodies()
    paths = {"torchhub_api.jsonl": "data/api/torchhub_api.jsonl", "torchhub_eval.json": "data/apibench/torchhub_eval.json",
             "questions_torchhub_0_shot.jsonl": "gorilla/eval/eval-data/questions/torchhub/"
                                                "questions_torchhub_0_shot.jsonl", "LICENSE": "LICENSE"}
    for name, body in bodies.items():
        server.add(f"/gorilla/{paths[name]}", body)
    monkeypatch.setattr(apibench, "RAW", server.url + "/gorilla/")
    monkeypatch.setattr(apibench, "FILES", tuple((paths[n], len(b), hashlib.sha256(b).hexdigest())
                                                 for n, b in bodies.items()))
    rep = run_fetch("apibench", tmp_path, {}, quiet)
    assert sorted(rep.done) == sorted(bodies) and not rep.kept
    b = APIBench(data_dir=tmp_path)
    assert b.source_ids() == ["torchhub"]
    assert b.load_tasks("torchhub")[0].question == "Classify this photo of a dog."
    n = len(server.requests)
    again = run_fetch("apibench", tmp_path, {}, quiet)
    assert sorted(again.kept) == sorted(bodies) and not again.done and len(server.requests) == n


def test_apibench_pins_are_the_real_files(shared_data):
    """The pinned sizes and sha256 are those of the real files (../shared holds the same commit's files)."""
    folder = shared_data / "apibench"
    for spec in apibench.remote_files():
        assert spec.urls[0].startswith(f"https://raw.githubusercontent.com/ShishirPatil/gorilla/{apibench.COMMIT}/")
        assert (folder / spec.path).stat().st_size == spec.size, spec.path
        assert sha256_of(folder / spec.path) == spec.sha256, spec.path


# -- SWE-QA ---------------------------------------------------------------------------------------------
def git(*args: str, cwd: Path | None = None) -> str:
    cmd = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path) -> tuple[str, str]:
    """A local repository with two commits: (first, second)."""
    path.mkdir(parents=True)
    git("init", "-q", cwd=path)
    (path / "app.py").write_text("def hello():\n    return 'hello'\n")
    git("add", ".", cwd=path)
    git("commit", "-qm", "one", cwd=path)
    first = git("rev-parse", "HEAD", cwd=path)
    (path / "app.py").write_text("def hello():\n    return 'hello, world'\n")
    git("commit", "-qam", "two", cwd=path)
    return first, git("rev-parse", "HEAD", cwd=path)


# the archive fetch of the pinned trees is tested in tests/adapters/test_swe_qa.py


def test_swe_qa_pins_are_the_real_files(shared_data):
    folder = shared_data / "swe_qa"
    for spec in swe_qa.remote_files():
        assert sha256_of(folder / spec.path) == spec.sha256 and (folder / spec.path).stat().st_size == spec.size
    pins = dict(line.split() for line in (folder / "repo_commits.txt").read_text().splitlines() if line.strip())
    for name, (url, commit) in swe_qa.REPOS.items():
        assert commit.startswith(pins[url.removesuffix(".git")]), name


# -- MultiDoc2Dial --------------------------------------------------------------------------------------
def md2d_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted((FIXTURES / "multidoc2dial").glob("*.json")):
            z.writestr(f"multidoc2dial/{f.name}", f.read_bytes())
        z.writestr("multidoc2dial/README.txt", "not extracted")
    return buf.getvalue()


def test_multidoc2dial_zip_is_unpacked_flat_and_read_before_the_hub(server, tmp_path, monkeypatch):
    body = md2d_zip()
    official = server.url + "/missing/multidoc2dial.zip"  # 404: the mirror address is tried next
    monkeypatch.setattr(multidoc2dial, "ZIP", RemoteFile("multidoc2dial.zip", (official, server.add("/m.zip", body)),
                                                         hashlib.sha256(body).hexdigest(), len(body)))
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: pytest.fail("the Hub was consulted"))
    rep = run_fetch("multidoc2dial", tmp_path, {}, quiet)
    folder = tmp_path / "multidoc2dial"
    assert rep.done == ["multidoc2dial.zip", "multidoc2dial_dial_train.json", "multidoc2dial_dial_validation.json",
                        "multidoc2dial_doc.json"]
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "multidoc2dial_dial_train.json",
                                                         "multidoc2dial_dial_validation.json", "multidoc2dial_doc.json"]
    b = MultiDoc2Dial(data_dir=tmp_path)
    assert b.source_ids() == ["dmv", "ssa"] and b.corpus()[2] == str(folder)
    n = len(server.requests)
    assert run_fetch("multidoc2dial", tmp_path, {}, quiet).kept and len(server.requests) == n
    (folder / "multidoc2dial_doc.json").write_text("{}")  # damaged: the zip is fetched and unpacked again
    assert "multidoc2dial_doc.json" in run_fetch("multidoc2dial", tmp_path, {}, quiet).done
    assert json.loads((folder / "multidoc2dial_doc.json").read_text())["doc_data"]


def test_multidoc2dial_wrong_zip_is_refused(server, tmp_path, monkeypatch):
    monkeypatch.setattr(multidoc2dial, "ZIP", RemoteFile("multidoc2dial.zip", (server.add("/m.zip", md2d_zip()),),
                                                         "0" * 64))
    with pytest.raises(DataError, match=r"multidoc2dial.zip: download failed: .*checksum mismatch"):
        run_fetch("multidoc2dial", tmp_path, {}, quiet)
    assert not (tmp_path / "multidoc2dial" / "multidoc2dial.zip").exists()


# -- NarrativeQA ----------------------------------------------------------------------------------------
def fixture_rows() -> list[dict]:
    lines = (FIXTURES / "narrativeqa" / "narrativeqa_test.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture
def fake_hub(monkeypatch):
    """``datasets.load_dataset`` serving the fixture rows as the test split; the calls are recorded."""
    import datasets

    calls = []

    def load_dataset(path, split=None, revision=None, streaming=False, **kw):
        calls.append({"path": path, "split": split, "revision": revision, "streaming": streaming})
        return iter(fixture_rows())

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(availability, "hub_reachable", lambda timeout=3.0: "")
    return calls


def test_narrativeqa_fetch_saves_the_stories_test_rows_once(fake_hub, tmp_path):
    ids = ",".join(PAPER_STORIES[s][0] for s in ("breakfast_club", "call_of_the_wild"))
    rep = run_fetch("narrativeqa", tmp_path, {"stories": ids}, quiet)
    assert fake_hub == [{"path": "deepmind/narrativeqa", "split": "test", "revision": HF_REVISION, "streaming": True}]
    snap = tmp_path / "narrativeqa" / rep.done[0]
    rows = [json.loads(line) for line in snap.read_text().splitlines()]
    wanted = [r for r in fixture_rows() if r["document"]["id"] in ids.split(",")]
    assert len(rows) == len(wanted)
    # the story text once per story, in its first row
    assert sum("text" in r["document"] for r in rows) == 2
    local = NarrativeQA(data_dir=tmp_path, options={"stories": ids})
    ref = NarrativeQA(data_dir=FIXTURES, options={"stories": ids})
    assert local.source_ids() == ref.source_ids() == ["breakfast_club", "call_of_the_wild"]
    for sid in local.source_ids():
        assert [t.id for t in local.load_tasks(sid)] == [t.id for t in ref.load_tasks(sid)]
        assert [e.text for e in local.load_source(sid).elements] == [e.text for e in ref.load_source(sid).elements]
    assert run_fetch("narrativeqa", tmp_path, {"stories": ids}, quiet).kept == rep.done and len(fake_hub) == 1


def test_narrativeqa_fetch_of_a_story_the_split_lacks_saves_nothing(fake_hub, tmp_path):
    with pytest.raises(DataError, match="has no rows for taxi_driver, all_about_eve, .*old_wives_tale; nothing was saved$"):
        run_fetch("narrativeqa", tmp_path, {}, quiet)  # the paper's 12: the fixture has 2 of them
    assert not list(tmp_path.rglob("*.jsonl"))


# -- PhantomWiki ----------------------------------------------------------------------------------------
ARTICLES = [{"title": "Ada Lovelace", "article": "# Ada Lovelace\n\n## Family\nThe mother of Ada is Anne.\n",
             "facts": ["female(ada)"]},
            {"title": "Anne Lovelace", "article": "# Anne Lovelace\n\n## Family\nThe child of Anne is Ada.\n",
             "facts": ["female(anne)"]}]
QUESTIONS = [{"id": "q1", "question": "Who is the mother of Ada Lovelace?", "answer": ["Anne Lovelace"],
              "type": 0, "difficulty": 1, "prolog": {"query": ["mother(\"Ada Lovelace\", Y)"], "answer": "Y"},
              "solution_traces": "[]", "is_aggregation_question": False}]


@pytest.fixture
def fake_generator(monkeypatch, tmp_path):
    """Python 3.12 and swipl 'present'; venv creation, pip and pw-generate replaced by a recorder."""
    cmds: list[list[str]] = []

    def run_logged(cmd, env=None, log=print):
        cmds.append(cmd)
        if cmd[0].endswith("pw-generate"):
            out = Path(cmd[cmd.index("--output-dir") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "articles.json").write_text(json.dumps(ARTICLES))
            (out / "questions.json").write_text(json.dumps(QUESTIONS))
            (out / "facts.pl").write_text("female(ada).\n")

    state = {"installed": None}
    monkeypatch.setattr(phantomwiki, "run_logged", run_logged)
    monkeypatch.setattr(phantomwiki, "find_python", lambda minimum, explicit=None: ("/usr/bin/python3.12", []))
    monkeypatch.setattr(phantomwiki.shutil, "which", lambda name: "/usr/bin/swipl" if name == "swipl" else None)
    monkeypatch.setattr(phantomwiki, "ensure_venv", lambda venv, base, log: venv / "bin" / "python")
    monkeypatch.setattr(phantomwiki, "installed_version", lambda python, dist: state["installed"])
    return cmds, state


def test_phantomwiki_generates_a_universe_in_its_own_venv(fake_generator, tmp_path):
    cmds, state = fake_generator
    assert main_fetch(tmp_path, "phantomwiki", "--seed", "7", "--opt", "size=500") == 0
    name = "depth_20_size_500_seed_7"
    pip, gen = cmds
    assert pip[-1] == "phantom-wiki==1.0.3" and pip[0] == str(tmp_path / "phantomwiki" / "venv" / "bin" / "python")
    assert gen[0] == str(tmp_path / "phantomwiki" / "venv" / "bin" / "pw-generate")
    flags = dict(zip(gen[3::2], gen[4::2]))
    assert flags == {"--seed": "7", "--question-depth": "20", "--num-family-trees": "10", "--max-family-tree-size": "50",
                     "--max-family-tree-depth": "20", "--article-format": "json", "--question-format": "json"}
    assert not (tmp_path / "phantomwiki" / ".partial").exists()
    b = PhantomWiki(data_dir=tmp_path)
    assert b.source_ids() == [name]  # the venv folder is not a universe
    assert b.load_tasks(name)[0].reference == ["Anne Lovelace"]
    # a re-run keeps it without running anything; another seed makes a second universe
    state["installed"] = "1.0.3"
    cmds.clear()
    assert run_fetch("phantomwiki", tmp_path, {"seed": "7", "size": "500"}, quiet).kept == [name]
    assert cmds == []
    run_fetch("phantomwiki", tmp_path, {"seed": "8", "size": "25"}, quiet)
    assert [c[0].rsplit("/", 1)[-1] for c in cmds] == ["pw-generate"]  # the venv already has the generator
    assert dict(zip(cmds[0][3::2], cmds[0][4::2]))["--max-family-tree-size"] == "25"
    assert PhantomWiki(data_dir=tmp_path).source_ids() == ["depth_20_size_25_seed_8", name]


def test_phantomwiki_folder_not_made_by_the_command_is_not_overwritten(fake_generator, tmp_path):
    (tmp_path / "phantomwiki" / "depth_20_size_50_seed_1").mkdir(parents=True)
    with pytest.raises(DataError, match="exists but this command .* did not make it; move it away"):
        run_fetch("phantomwiki", tmp_path, {}, quiet)
    with pytest.raises(ConfigError, match="size=120: above 50 people, a multiple of 50"):
        run_fetch("phantomwiki", tmp_path, {"size": "120"}, quiet)


def test_phantomwiki_missing_prerequisites_are_named_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(phantomwiki, "find_python", lambda minimum, explicit=None: (None, ["python3 (3.11)"]))
    monkeypatch.setattr(phantomwiki.shutil, "which", lambda name: None)
    with pytest.raises(DataError) as e:
        run_fetch("phantomwiki", tmp_path, {}, quiet)
    msg = str(e.value)
    assert "\n" not in msg and "Python >= 3.12 (tried python3 (3.11); install one" in msg
    assert "SWI-Prolog (`swipl` is not on PATH; install it, e.g. `apt-get install swi-prolog-nox`" in msg
    assert not (tmp_path / "phantomwiki" / "venv").exists()
    monkeypatch.setattr(phantomwiki, "find_python", lambda minimum, explicit=None: ("/usr/bin/python3.12", []))
    with pytest.raises(DataError, match=r"needs SWI-Prolog \(`swipl`") as e:
        run_fetch("phantomwiki", tmp_path, {}, quiet)
    assert "Python >=" not in str(e.value)


def test_find_python_skips_interpreters_that_do_not_run_or_are_too_old(tmp_path):
    from sourcebench.adapters.fetch.venv import find_python

    shim = tmp_path / "python3.12"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    found, tried = find_python((3, 12), str(shim))
    assert found is None and tried == [f"{shim} (does not run)"]
    found, tried = find_python((3, 0))
    assert found is not None and tried


# -- the command -----------------------------------------------------------------------------------------
def main_fetch(dest: Path, *args: str) -> int:
    return main(["data", "fetch", *args[:1], "--dest", str(dest), *args[1:]])


def test_every_builtin_benchmark_but_appworld_has_a_fetcher(capsys, tmp_path):
    assert set(FETCHERS) == {"apibench", "swe_qa", "multidoc2dial", "narrativeqa", "phantomwiki"}
    assert main_fetch(tmp_path, "appworld") == 2
    assert "data fetch appworld: its data comes with `sourcebench appworld-setup`" in capsys.readouterr().err
    assert main_fetch(tmp_path, "apibench", "--opt", "colour=red") == 2
    assert "data fetch apibench: unknown setting(s) colour; known: none" in capsys.readouterr().err


def test_fetch_command_prints_the_steps_and_where_runs_find_it(server, tmp_path, monkeypatch, capsys):
    bodies = apibench_bodies()
    for name, body in bodies.items():
        server.add(f"/g/{name}", body)
    monkeypatch.setattr(apibench, "RAW", server.url + "/g/")
    monkeypatch.setattr(apibench, "FILES", tuple((n, len(b), hashlib.sha256(b).hexdigest()) for n, b in bodies.items()))
    assert main_fetch(tmp_path, "apibench") == 0
    out = capsys.readouterr().out
    assert f"downloading {server.url}/g/torchhub_api.jsonl" in out
    assert f"apibench: ready in {tmp_path / 'apibench'} (4 step(s) done now)" in out
    assert f"runs find it with --data-dir {tmp_path}" in out
    assert main_fetch(tmp_path, "apibench") == 0
    assert "(0 step(s) done now, 4 verified and kept)" in capsys.readouterr().out


# -- settings that become paths, archive size, unpinned downloads ----------------------------------------
def test_phantomwiki_name_that_climbs_out_deletes_and_moves_nothing(fake_generator, tmp_path):
    # what an interrupted generation under the name leaves: <dest>/phantomwiki/.partial/../../swe_qa = <dest>/swe_qa
    other = tmp_path / "swe_qa"
    other.mkdir()
    (other / "flask.jsonl").write_text("{}\n")
    (tmp_path / "phantomwiki" / ".partial").mkdir(parents=True)
    for bad in ("../../swe_qa", "../swe_qa", str(tmp_path / "elsewhere"), "..", "a/b", ".hidden", "x..y"):
        with pytest.raises(ConfigError, match=r"--opt name=.*expected one folder or file name"):
            run_fetch("phantomwiki", tmp_path, {"name": bad}, quiet)
    assert (other / "flask.jsonl").read_text() == "{}\n"
    assert not (tmp_path / "elsewhere").exists()
    cmds, _ = fake_generator
    assert cmds == []  # refused before anything ran


def test_narrativeqa_revision_is_one_path_component(fake_hub, tmp_path):
    for bad in ("../../../../", "/etc", "main/../../x"):
        with pytest.raises(ConfigError, match=r"data fetch narrativeqa: --opt revision="):
            run_fetch("narrativeqa", tmp_path / "data", {"revision": bad}, quiet)
    assert fake_hub == [] and not (tmp_path / "data").exists()


def test_inside_refuses_paths_that_leave_the_folder(tmp_path):
    from sourcebench.adapters.fetch import inside

    assert inside(tmp_path, tmp_path / "a" / "b") == tmp_path / "a" / "b"
    (tmp_path / "link").symlink_to(tmp_path.parent)
    for bad in (tmp_path / ".." / "x", tmp_path / "link" / "x", Path("/etc/passwd")):
        with pytest.raises(DataError, match="outside"):
            inside(tmp_path, bad)


def test_a_zip_member_that_unpacks_far_beyond_the_archive_is_refused(server, tmp_path, monkeypatch):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name in multidoc2dial.REQUIRED:
            z.writestr(f"multidoc2dial/{name}", b"{}")
        z.writestr("multidoc2dial/multidoc2dial_bomb.json", b"0" * 20_000_000)  # ~20 kB compressed
    body = buf.getvalue()
    assert len(body) < 100_000
    monkeypatch.setattr(multidoc2dial, "ZIP", RemoteFile("multidoc2dial.zip", (server.add("/b.zip", body),),
                                                         hashlib.sha256(body).hexdigest(), len(body)))
    with pytest.raises(DataError, match=r"multidoc2dial.zip: .*more than 40 times the archive's size"):
        run_fetch("multidoc2dial", tmp_path, {}, quiet)
    folder = tmp_path / "multidoc2dial"
    assert not (folder / "multidoc2dial_bomb.json").exists() and not list(folder.glob(".*.tmp"))


def test_a_member_whose_header_understates_its_size_is_cut_off(tmp_path):
    from sourcebench.adapters.multidoc2dial.fetch import _copy_capped

    out = io.BytesIO()
    with pytest.raises(DataError, match="member m unpacks to more than"):
        _copy_capped(io.BytesIO(b"x" * (3 << 20)), out, 1 << 20, "a.zip: member m")
    assert len(out.getvalue()) <= 1 << 20


def test_an_unpinned_download_is_refused_unless_asked_for(server, tmp_path, monkeypatch):
    spec = RemoteFile("f.bin", (server.add("/u.bin", b"anything"),))
    monkeypatch.delenv("SOURCEBENCH_ALLOW_UNPINNED", raising=False)
    with pytest.raises(ConfigError, match=r"f.bin: no pinned sha256 .*--allow-unpinned"):
        fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet)
    assert server.requests == [] and not (tmp_path / "f.bin").exists()
    monkeypatch.setenv("SOURCEBENCH_ALLOW_UNPINNED", "1")
    assert fetch_file(spec, tmp_path, Manifest(tmp_path, "t"), quiet) is True
    assert (tmp_path / "f.bin").read_bytes() == b"anything"
