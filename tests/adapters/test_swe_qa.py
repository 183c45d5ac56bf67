import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sourcebench.adapters.fetch import run_fetch
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.adapters.swe_qa import fetch as swe_qa
from sourcebench.adapters.swe_qa import tree as swe_qa_tree
from sourcebench.adapters.swe_qa.benchmark import SWEQA
from sourcebench.harness.errors import DataError
from tests.adapters.test_data_fetch import Server, git, make_repo, quiet
from tests.conftest import need_data


def make_tree(root):
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "app.py").write_text("class App:\n    def run(self):\n        return 1\n\n\ndef helper():\n    pass\n")
    (root / "docs").mkdir()
    (root / "docs" / "index.rst").write_text("Intro\n=====\n\nHello.\n\nUsage\n-----\n\nRun it.\n")
    return root


def make_sdist(root, name="Flask", version="3.1.1"):
    make_tree(root)
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n\nlong description\n")
    return root


def data_with_pin(tmp_path, commit: str) -> Path:
    """A data folder with the real flask questions and a commit list pinning flask at ``commit``."""
    folder = tmp_path / "data" / "swe_qa"
    folder.mkdir(parents=True)
    shutil.copy(need_data("swe_qa") / "flask.jsonl", folder)
    (folder / "repo_commits.txt").write_text(f"https://github.com/pallets/flask {commit[:7]}\n")
    return folder.parent


def test_questions_and_pinned_commit():
    root = need_data("swe_qa")
    b = SWEQA(data_dir=root.parent)
    assert b.source_ids() == ["streamlink", "sphinx", "xarray", "pytest", "flask", "conan"]
    tasks = b.load_tasks("flask")
    assert len(tasks) == 48 and len({t.id for t in tasks}) == 48
    assert b.commit("flask") == "85c5d93"


def test_source_tree_from_option(tmp_path):
    root = need_data("swe_qa")
    tree = make_tree(tmp_path / "flask-src")
    b = SWEQA(data_dir=root.parent, options={"flask": str(tree)})
    src = b.load_source("flask")
    ids = {e.id for e in src.elements}
    assert "src/pkg/app.py#App.run" in ids and "docs/index.rst#usage" in ids
    assert src.kind == "code"


def test_an_sdist_is_not_the_pinned_tree_and_says_what_it_lacks(tmp_path):
    """The old loader stamped pinned_commit on whatever tree it loaded; now the tree is identified."""
    root = need_data("swe_qa")
    tree = make_sdist(tmp_path / "flask-3.1.1")
    src = SWEQA(data_dir=root.parent, options={"flask": str(tree)}).load_source("flask")
    assert "pinned_commit" not in src.metadata
    prov = src.metadata["provenance"]
    assert prov["pinned"] is False and prov["kind"] == "sdist" and prov["commit"] == ""
    assert prov["pinned_commit"] == "85c5d93" and prov["label"] == "the Flask 3.1.1 sdist"
    assert prov["content_sha256"] == swe_qa_tree.tree_sha256(tree) and prov["origin"] == str(tree)
    note = prov["note"]
    assert note.startswith("swe_qa/flask: not the pinned tree (commit 85c5d93): the Flask 3.1.1 sdist")
    rec = swe_qa_tree.load_coverage()["flask"]
    assert (f"{rec['cite_an_absent_path']} of its 48 questions ({100 * rec['share_citing_an_absent_path']:.0f}%) "
            f"have a reference answer citing a file absent from flask 3.1.1") in note
    # a release that was not measured says so
    other = make_sdist(tmp_path / "flask-9.0", version="9.0")
    prov = SWEQA(data_dir=root.parent, options={"flask": str(other)}).load_source("flask").metadata["provenance"]
    assert "absent from Flask 9.0 was not measured (measured: flask 3.1.1)" in prov["note"]


def test_the_measure_of_cited_paths_and_the_shipped_shares():
    """The measure on constructed answers; the shipped records are consistent with it."""
    answers = ["See `conans/server/rest/api_v2.py` and conan/api/conan_api.py.",
               "```28:31:conan/tools/apple/apple.py\ncode\n```", "Only a conanfile.py of yours.", "No path."]
    files = ["conan/api/conan_api.py", "conan/tools/apple/apple.py", "setup.py"]
    cov = swe_qa_tree.coverage(answers, files)
    assert cov["cite_a_path"] == 2 and cov["cite_an_absent_path"] == 1 and cov["cite_only_absent_paths"] == 0
    assert cov["absent_paths"] == {"conans/server/rest/api_v2.py": 1} and cov["share_citing_an_absent_path"] == 0.25
    assert cov["cite_an_absent_bare_name"] == 1 and cov["absent_bare_names"] == {"conanfile.py": 1}
    shipped = swe_qa_tree.load_coverage()
    assert set(shipped) == {"flask", "sphinx", "xarray", "conan"}
    for rec in shipped.values():
        assert rec["questions"] == 48
        assert rec["share_citing_an_absent_path"] == round(rec["cite_an_absent_path"] / 48, 4)
        assert sum(rec["absent_paths"].values()) >= rec["cite_an_absent_path"]


def test_a_clone_at_the_pin_is_the_pinned_tree(tmp_path):
    first, second = make_repo(tmp_path / "flask")
    data = data_with_pin(tmp_path, first)
    clone = tmp_path / "flask"
    git("checkout", "-q", first, cwd=clone)  # detached at the pin
    src = SWEQA(data_dir=data, options={"flask": str(clone)}).load_source("flask")
    prov = src.metadata["provenance"]
    assert prov["pinned"] is True and prov["kind"] == "clone" and prov["commit"] == first
    assert "note" not in prov
    git("checkout", "-q", "main", cwd=clone)  # on a branch, at the later commit
    prov = SWEQA(data_dir=data, options={"flask": str(clone)}).load_source("flask").metadata["provenance"]
    assert prov["pinned"] is False and prov["commit"] == second and prov["label"] == f"a clone at {second[:12]}"
    git("pack-refs", "--all", cwd=clone)  # the branch now lives in packed-refs only
    assert swe_qa_tree.git_head(clone) == second


def test_build_folders_are_part_of_the_tree(tmp_path):
    """conan's code has conan/tools/build/; the default loader left out every folder named build."""
    root = need_data("swe_qa")
    tree = make_tree(tmp_path / "conan")
    (tree / "conan" / "tools" / "build").mkdir(parents=True)
    (tree / "conan" / "tools" / "build" / "flags.py").write_text("def cppstd_flag(settings):\n    return ''\n")
    src = SWEQA(data_dir=root.parent, options={"conan": str(tree)}).load_source("conan")
    assert "conan/tools/build/flags.py#cppstd_flag" in {e.id for e in src.elements}


def test_missing_tree_is_a_clear_error(tmp_path):
    root = need_data("swe_qa")
    with pytest.raises(DataError, match=r"swe_qa/flask: source tree not found; pass --opt flask=DIR"):
        SWEQA(data_dir=root.parent).load_source("flask")
    with pytest.raises(DataError, match="not a directory"):
        SWEQA(data_dir=root.parent, options={"flask": str(tmp_path / "nope")}).load_source("flask")


# -- data fetch: the pinned trees as archives of their commits ------------------------------------------
@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def commit_archive(repo: Path, commit: str) -> bytes:
    """What codeload serves: ``git archive`` of the commit (its id in the global pax header)."""
    args = ["git", "archive", "--format=tar.gz", f"--prefix=flask-{commit}/", commit]
    return subprocess.run(args, cwd=repo, check=True, capture_output=True).stdout


def serve_flask(server, tmp_path, monkeypatch, body: bytes | None = None) -> tuple[str, bytes]:
    first, _ = make_repo(tmp_path / "upstream" / "flask")
    body = body if body is not None else commit_archive(tmp_path / "upstream" / "flask", first)
    server.add(f"/pallets/flask/tar.gz/{first[:7]}", body)
    monkeypatch.setattr(swe_qa, "CODELOAD", server.url)
    monkeypatch.setattr(swe_qa, "FILES", ())
    monkeypatch.setattr(swe_qa, "REPOS", {"flask": ("https://github.com/pallets/flask.git", first[:7])})
    return first, body


def test_fetch_gets_the_pinned_tree_as_a_checked_archive_without_git(server, tmp_path, monkeypatch):
    first, body = serve_flask(server, tmp_path, monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git on the PATH: none is needed
    dest = tmp_path / "data"
    rep = run_fetch("swe_qa", dest, {}, quiet)
    folder = dest / "swe_qa"
    assert rep.done == ["repos/flask"]
    tree = folder / "repos" / "flask"
    assert "'hello'" in (tree / "app.py").read_text() and not (tree / ".git").exists()
    man = Manifest(folder, "swe_qa")
    archive = f"archives/flask-{first[:7]}.tar.gz"
    assert man.get(archive)["sha256"] == hashlib.sha256(body).hexdigest()
    assert man.get("repos/flask") == {"url": f"{server.url}/pallets/flask/tar.gz/{first[:7]}", "commit": first,
                                       "archive": archive, "tree_sha256": swe_qa_tree.tree_sha256(tree)}
    # the adapter recognises the unpacked tree as the pinned one by its content hash
    (folder / "repo_commits.txt").write_text(f"https://github.com/pallets/flask {first[:7]}\n")
    shutil.copy(need_data("swe_qa") / "flask.jsonl", folder)
    prov = SWEQA(data_dir=dest).load_source("flask").metadata["provenance"]
    assert prov["pinned"] is True and prov["kind"] == "commit archive" and prov["commit"] == first
    # a re-run keeps it without a request; a changed tree is unpacked again from the kept archive
    n = len(server.requests)
    assert run_fetch("swe_qa", dest, {}, quiet).kept == ["repos/flask"] and len(server.requests) == n
    (tree / "app.py").write_text("changed\n")
    assert SWEQA(data_dir=dest).load_source("flask").metadata["provenance"]["pinned"] is False
    assert run_fetch("swe_qa", dest, {}, quiet).done == ["repos/flask"] and len(server.requests) == n
    assert "'hello'" in (tree / "app.py").read_text()


def test_an_interrupted_archive_download_resumes(server, tmp_path, monkeypatch):
    first, body = serve_flask(server, tmp_path, monkeypatch)
    server.cut_after = len(body) // 2
    with pytest.raises(DataError, match=r"archives/flask-.*download failed: .*partial file is kept and resumed"):
        run_fetch("swe_qa", tmp_path, {}, quiet)
    assert not (tmp_path / "swe_qa" / "repos" / "flask").exists()
    assert run_fetch("swe_qa", tmp_path, {}, quiet).done == ["repos/flask"]
    assert server.requests[-1] == (f"/pallets/flask/tar.gz/{first[:7]}", f"bytes={len(body) // 2}-")


def test_an_archive_of_another_commit_is_refused(server, tmp_path, monkeypatch):
    upstream = tmp_path / "upstream" / "flask"
    first, second = make_repo(upstream)
    serve_flask_body = commit_archive(upstream, second)
    monkeypatch.setattr(swe_qa, "CODELOAD", server.url)
    monkeypatch.setattr(swe_qa, "FILES", ())
    monkeypatch.setattr(swe_qa, "REPOS", {"flask": ("https://github.com/pallets/flask.git", first[:7])})
    server.add(f"/pallets/flask/tar.gz/{first[:7]}", serve_flask_body)
    with pytest.raises(DataError) as e:
        run_fetch("swe_qa", tmp_path, {}, quiet)
    msg = str(e.value)
    assert "\n" not in msg and f"holds commit {second[:12]}, not the pinned commit {first[:7]}" in msg
    assert not (tmp_path / "swe_qa" / "archives" / f"flask-{first[:7]}.tar.gz").exists()
    assert not (tmp_path / "swe_qa" / "repos" / "flask").exists()


def test_an_archive_escaping_its_folder_is_refused(server, tmp_path, monkeypatch):
    first, _ = make_repo(tmp_path / "upstream" / "flask")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": first}) as tar:
        for name in (f"flask-{first}/app.py", f"flask-{first}/../../evil.py"):
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"x=1"))
    serve_flask(server, tmp_path / "other", monkeypatch, body=buf.getvalue())
    monkeypatch.setattr(swe_qa, "REPOS", {"flask": ("https://github.com/pallets/flask.git", first[:7])})
    server.add(f"/pallets/flask/tar.gz/{first[:7]}", buf.getvalue())
    with pytest.raises(DataError, match="cannot be unpacked"):
        run_fetch("swe_qa", tmp_path, {}, quiet)
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "swe_qa" / "repos" / "flask").exists()


def test_a_folder_the_command_did_not_make_is_not_overwritten(server, tmp_path, monkeypatch):
    serve_flask(server, tmp_path, monkeypatch)
    mine = make_tree(tmp_path / "swe_qa" / "repos" / "flask")
    with pytest.raises(DataError, match=r"repos/flask: exists and is not a tree this command unpacked, not the "
                                        r"pinned commit .*; move it away"):
        run_fetch("swe_qa", tmp_path, {}, quiet)
    assert (mine / "src" / "pkg" / "app.py").exists()


def test_repos_option(tmp_path, monkeypatch):
    monkeypatch.setattr(swe_qa, "FILES", ())
    assert run_fetch("swe_qa", tmp_path, {"repos": "none"}, quiet).done == []
    from sourcebench.harness.errors import ConfigError

    with pytest.raises(ConfigError, match="repos='django'"):
        run_fetch("swe_qa", tmp_path, {"repos": "django"}, quiet)


def test_archive_urls_are_codeload_tarballs_of_the_pins():
    spec = swe_qa.archive_spec("flask")
    assert spec.urls == (f"https://codeload.github.com/pallets/flask/tar.gz/{swe_qa.REPOS['flask'][1]}",)
    assert spec.path == f"archives/flask-{swe_qa.REPOS['flask'][1]}.tar.gz"


# -- a run on a substitute tree: run.json says so and the reports mark the numbers -----------------------
@pytest.mark.slow
def test_a_run_on_an_sdist_records_it_and_the_leaderboard_marks_it(tmp_path, capsys):
    need_data("swe_qa")
    from sourcebench.harness.cli import main
    from sourcebench.reports.provenance_marks import MARK

    tree = make_sdist(tmp_path / "flask-3.1.1")
    out = tmp_path / "run"
    assert main(["run", "--benchmark", "swe_qa", "--sources", "flask", "--opt", f"flask={tree}", "--methods",
                 "hybrid_rag", "--model", "scripted/extractive", "--limit", "2", "--seeds", "0", "--embedder", "hash",
                 "--out", str(out), "--data-dir", str(need_data("swe_qa").parent)]) == 0
    assert "swe_qa/flask: not the pinned tree (commit 85c5d93): the Flask 3.1.1 sdist" in capsys.readouterr().out
    src = json.loads((out / "run.json").read_text())["sources"][0]
    assert src["provenance"]["pinned"] is False and src["provenance"]["label"] == "the Flask 3.1.1 sdist"
    assert "pinned_commit" not in src
    md = (out / "report" / "leaderboard.md").read_text()
    note = f"{MARK} swe\\_qa/flask: not the pinned tree (commit 85c5d93) but the Flask 3.1.1 sdist"
    assert note in md or note.replace("\\_", "_") in md
    assert f"]{MARK}" in md  # the accuracy cell of the main table: "x [lo, hi]§"
    assert f"flask{MARK}" in md  # the per-source row
    import csv

    row = next(csv.DictReader((out / "report" / "leaderboard.csv").read_text().splitlines()))
    assert row["substitute_sources"].startswith(f"{MARK} swe_qa/flask: not the pinned tree")
