"""The built wheel installs everything under ``sourcebench``, so a user's own folders never shadow ours.

A researcher's project often has its own ``methods/`` (with a ``raptor.py``, an ``evidence.py``) and a
plain ``reports/`` data folder, and runs with ``PYTHONPATH=.``. The wheel built from this checkout is
unpacked into a folder (a pure-Python wheel unpacked is what pip installs), put on the path after the
user's project, and the installed distribution's entry points are what the registry reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """This checkout's wheel, unpacked as pip installs it."""
    dist, tree = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("tree")
    # from a copy of the files git knows (a checkout's build/ and stray files never reach the wheel)
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the wheel is built from the files git knows")
    for rel in listed.stdout.splitlines():
        if (ROOT / rel).is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, tree / rel)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(dist), str(tree)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no wheel could be built here: {r.stderr.strip().splitlines()[-1:]}")
    wheel = next(dist.glob("sourcebench-*.whl"))
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(site)
    assert not [n for n in names if n.split("/")[0] in ("harness", "methods", "adapters", "judges", "reports")]
    assert "sourcebench/__init__.py" in names and "sourcebench/methods/raptor/__init__.py" in names
    assert not [n for n in names if n.startswith(("sourcebench/tests/", "tests/"))]
    # each benchmark's folder ships its data files and README (package-data)
    universe = "sourcebench/adapters/phantomwiki/data/"
    shipped = {universe + "PROVENANCE.md", universe + "seed1_people25_depth20/articles.json",
               universe + "seed1_people25_depth20/questions.json", "sourcebench/adapters/swe_qa/sdists.json",
               *(f"sourcebench/adapters/{p.parent.name}/README.md" for p in (ROOT / "adapters").glob("*/README.md"))}
    assert shipped - set(names) == set()
    return site


@pytest.fixture
def user_project(tmp_path) -> Path:
    """A project with folders named like ours: its own methods/raptor.py and methods/evidence.py, a
    reports/ folder of data (no package)."""
    proj = tmp_path / "project"
    (proj / "methods").mkdir(parents=True)
    (proj / "methods" / "__init__.py").write_text("")
    (proj / "methods" / "raptor.py").write_text("RAPTOR = 'the user own RAPTOR'\n")
    (proj / "methods" / "evidence.py").write_text("raise ImportError('the user evidence module')\n")
    (proj / "reports").mkdir()
    (proj / "reports" / "q3.csv").write_text("a,b\n1,2\n")
    return proj


def _run(proj: Path, site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=os.pathsep.join([".", str(site)]), INSPECT_DISPLAY="none", COLUMNS="250")
    return subprocess.run([sys.executable, *args], cwd=proj, env=env, capture_output=True, text=True, timeout=600)


def test_the_users_folders_stay_theirs_and_every_builtin_loads(installed, user_project):
    code = ("import json, methods.raptor, sourcebench\n"
            "from sourcebench.harness.registry import get_method_class, method_names\n"
            "out = {'user': methods.raptor.RAPTOR, 'ours': get_method_class('raptor').__module__,\n"
            "       'hybrid': get_method_class('hybrid_rag').__module__, 'where': sourcebench.__file__,\n"
            "       'loaded': sorted(n for n in method_names() if get_method_class(n))}\n"
            "print(json.dumps(out))")
    r = _run(user_project, installed, "-c", code)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["user"] == "the user own RAPTOR"
    assert out["ours"] == "sourcebench.methods.raptor" and out["hybrid"] == "sourcebench.methods.hybrid_rag"
    assert Path(out["where"]).resolve().is_relative_to(installed.resolve())
    assert len(out["loaded"]) == 14

    listing = _run(user_project, installed, "-m", "sourcebench.harness.cli", "list")
    assert listing.returncode == 0, listing.stderr
    assert "cannot load" not in listing.stdout, [x for x in listing.stdout.splitlines() if "cannot" in x]
    assert "sourcelearn-wo-failure" in listing.stdout


def test_a_run_from_the_users_folder(installed, user_project):
    r = _run(user_project, installed, "-m", "sourcebench.harness.cli", "run", "--benchmark", "phantomwiki",
             "--opt", "max_difficulty=2", "--methods", "hybrid_rag,no_source", "--model", "scripted/extractive",
             "--embedder", "hash", "--seeds", "0", "--limit", "2", "--out", "runs/q")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = (user_project / "runs" / "q" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 4
    assert (user_project / "runs" / "q" / "report" / "leaderboard.md").is_file()
    assert (user_project / "reports" / "q3.csv").read_text() == "a,b\n1,2\n"
