"""A method from another package, added as a new user would: a pyproject.toml with an entry point
under ``sourcebench.methods`` and one module (``thirdparty_pkg/``), built outside the repository.

The package is installed the way pip leaves it for ``importlib.metadata``, without pip: its module
and a ``.dist-info`` folder (METADATA, and entry_points.txt written from the pyproject's table) in
a folder put on ``sys.path``. So the method registers through the registry's real entry-point
path; it then runs on the bundled PhantomWiki universe with three seeds in one command, takes part
in every protocol, brings its own ``sourcebench`` subcommand, and passes ``sourcebench check-method``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from sourcebench.adapters.phantomwiki.benchmark import BUNDLED
from sourcebench.harness.cli import main
from sourcebench.harness.registry import get_method_class, method_names
from sourcebench.reports.protocols import PROTOCOLS

PKG = Path(__file__).parent / "thirdparty_pkg"
METHOD = "keyword-notes"


def install_without_pip(pkg: Path, site: Path) -> list[str]:
    """Put a one-module package into ``site`` as an installed distribution; return its module names."""
    pyproject = tomllib.loads((pkg / "pyproject.toml").read_text(encoding="utf-8"))
    project, modules = pyproject["project"], pyproject["tool"]["setuptools"]["py-modules"]
    for m in modules:
        shutil.copy(pkg / f"{m}.py", site / f"{m}.py")
    dist = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n",
                                   encoding="utf-8")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in eps.items()) + "\n"
        for group, eps in project["entry-points"].items()), encoding="utf-8")
    # RECORD, as pip writes it: the distribution's file list (what the code hash of its methods covers)
    (dist / "RECORD").write_text("".join(f"{m}.py,,\n" for m in modules) + "".join(
        f"{dist.name}/{f},,\n" for f in ("METADATA", "entry_points.txt", "RECORD")), encoding="utf-8")
    return modules


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch):
    pkg = tmp_path / "thirdparty_pkg"
    shutil.copytree(PKG, pkg)  # the package lives outside the repository
    site = tmp_path / "site-packages"
    site.mkdir()
    modules = install_without_pip(pkg, site)
    monkeypatch.syspath_prepend(str(site))
    yield site
    for m in modules:
        sys.modules.pop(m, None)


def test_an_installed_package_registers_its_method(third_party: Path):
    assert METHOD in method_names()
    cls = get_method_class(METHOD)
    assert Path(sys.modules[cls.__module__].__file__).parent == third_party  # loaded from outside the repo
    assert cls.has_entries() and [c.name for c in cls.cli_commands()] == ["notes"]


@pytest.mark.slow
def test_a_third_party_method_runs_takes_part_in_every_protocol_and_conforms(third_party, tmp_path, capsys):
    out = tmp_path / "runs" / "phantomwiki"
    assert main(["run", "--benchmark", "phantomwiki", "--methods", f"{METHOD},hybrid_rag", "--model",
                 "scripted/extractive", "--embedder", "hash", "--limit", "3", "--data-dir", str(BUNDLED),
                 "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert Counter((r["method"], r["seed"]) for r in rows) == {(m, s): 3 for m in (METHOD, "hybrid_rag")
                                                               for s in (0, 1, 2)}
    assert not [r for r in rows if str(r["failure_reason"]).startswith("method error")]

    for name in PROTOCOLS:
        # --data-dir again: in-process, run.json records pytest's command line, not the run's
        assert main(["protocol", name, str(out), "--data-dir", str(BUNDLED)]) == 0, name
    res = {name: json.loads((out / "protocols" / f"{name}.json").read_text()) for name in PROTOCOLS}
    ko = res["key-overlap"]["benchmarks"][0]
    assert ko["status"] == "ok" and METHOD in {m["method"] for m in ko["methods"]}
    be = next(m for m in res["break-even"]["benchmarks"][0]["methods"] if m["method"] == METHOD)
    assert be["status"] == "ok"
    pq = next(m for m in res["prequential"]["methods"] if m["method"] == METHOD)
    assert pq["mode"] == "re-learn on prefix" and len(pq["cells"]) == 3
    hm = next(m for m in res["harmful"]["methods"] if m["method"] == METHOD)
    # --limit 3: every note is shown to at most 3 test tasks, too few for p < 0.05 (2 / 2^3): undetectable
    assert hm["status"] == "no detectable entries" and hm["entry_kind"] == "note"
    assert hm["n_undetectable"] == hm["n_exposed"] > 0 and hm["n_evaluated"] == 0
    capsys.readouterr()

    assert main(["notes", str(out)]) == 0  # the package's own subcommand, found through the registry
    assert capsys.readouterr().out.rstrip().endswith("3 artifact(s)")
    assert main(["check-method", METHOD]) == 0
    report = capsys.readouterr().out
    assert "FAIL" not in report and report.rstrip().endswith(f"{METHOD}: conforms")


def test_an_edited_prompt_without_a_version_bump_is_relearned_and_rows_record_the_code(third_party, tmp_path,
                                                                                       capsys):
    out = tmp_path / "runs" / "edit"
    cmd = ["run", "--benchmark", "phantomwiki", "--methods", METHOD, "--model", "scripted/extractive",
           "--embedder", "hash", "--limit", "2", "--seeds", "0", "--data-dir", str(BUNDLED), "--out", str(out),
           "--no-report"]

    def rows() -> list[dict]:
        return [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]

    assert main(cmd) == 0
    first = rows()
    code = first[0]["method_code"]
    assert len(code) == 16 and {r["method_code"] for r in first} == {code}
    assert {r["method_package_version"] for r in first} == {"0.1.0"}
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["methods"][0]["code_hash"] == code and run_json["methods"][0]["package"] == "sb-keyword-notes"
    artifacts = {p.name for p in (out / "artifacts" / f"method_{METHOD}").iterdir()}
    capsys.readouterr()

    assert main(cmd) == 0  # unchanged: nothing to do
    assert "2 task rows, 0 to do" in capsys.readouterr().out

    module = third_party / "sb_keyword_notes.py"  # the installed copy, as a user editing site-packages would
    module.write_text(module.read_text().replace("Notes from earlier questions:", "Notes learned earlier:"))
    sys.modules.pop("sb_keyword_notes", None)
    assert main(cmd) == 0
    said = capsys.readouterr().out
    assert "code changed" in said and "version 1 did not" in said and "2 to do" in said
    second = rows()
    assert len(second) == 2 and {r["method_code"] for r in second} != {code}
    assert {p.name for p in (out / "artifacts" / f"method_{METHOD}").iterdir()} - artifacts  # learned again
    assert len((out / "results.stale.jsonl").read_text().splitlines()) == 2

    assert main(cmd + ["--rerun", METHOD]) == 0  # forced: the same code learned and tested again
    said = capsys.readouterr().out
    assert "--rerun: 1 artifact(s) removed" in said and "2 to do" in said
    assert main(cmd + ["--rerun", "hybrid_rag"]) == 2  # not among --methods: one line
    assert "--rerun hybrid_rag: not among --methods" in capsys.readouterr().err


def test_built_in_methods_have_a_code_hash_of_their_own_files():
    from sourcebench.harness.registry import method_code

    a, b = method_code(get_method_class("hybrid_rag")), method_code(get_method_class("raptor"))
    assert a["package"] == b["package"] == "sourcebench" and a["code_hash"] != b["code_hash"]
    assert method_code(get_method_class("sourcelearn"))["code_hash"] == method_code(
        get_method_class("sourcelearn-m0"))["code_hash"]  # one package folder, one hash


def readme_section(title: str) -> str:
    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def install_package(root: Path, site: Path, name: str, entry_points: str) -> None:
    """A package folder installed as pip leaves it (module folder, dist-info with entry points and RECORD)."""
    shutil.copytree(root / name, site / name)
    dist = site / f"{name}-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    (dist / "RECORD").write_text("".join(f"{p.relative_to(site)},,\n" for p in (site / name).rglob("*.py")),
                                 encoding="utf-8")


def test_compare_your_method_followed_as_written(tmp_path, monkeypatch, capsys):
    """The README's "Compare your method": methods/template.py copied into its own package ``my_pkg`` as
    ``my_pkg.my_method:MyMethod``, registered with the README's entry-point table, then the README's
    commands in order. Only the model and size change (scripted model, 2 tasks, one seed, the bundled
    universe, hash embedder), so the test needs no weights and little CPU."""
    section = readme_section("Compare your method")
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    commands = [line.removeprefix("sourcebench ").split() for line in
                section.split("```bash\n", 1)[1].split("```", 1)[0].splitlines() if line.strip()]
    assert [c[0] for c in commands] == ["check-method", "run", "compare"]
    pkg = tmp_path / "src" / "my_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    template = (Path(__file__).parents[2] / "methods" / "template.py").read_text(encoding="utf-8")
    (pkg / "my_method.py").write_text(template.replace("class TemplateMethod(", "class MyMethod(")
                                      .replace('name = "template"', 'name = "my_method"'), encoding="utf-8")
    site = tmp_path / "site-packages"
    site.mkdir()
    eps = tomllib.loads(toml)["project"]["entry-points"]
    install_package(tmp_path / "src", site, "my_pkg", "".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in table.items()) for group, table in eps.items()))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    try:
        small = {"--model": "scripted/extractive", "--limit": "2"}
        for cmd in commands:
            args = [small.get(prev, a) for prev, a in zip(["", *cmd], cmd, strict=False)]
            if cmd[0] == "run":
                args += ["--seeds", "0", "--embedder", "hash", "--data-dir", str(BUNDLED), "--no-report"]
            assert main(args) == 0, args
        out = capsys.readouterr().out
        assert out.count("my_method: conforms") == 1 and "my_method vs hybrid_rag: task by task" in out
        rows = [json.loads(x) for x in (tmp_path / "runs" / "my_method" / "results.jsonl").read_text().splitlines()]
        assert {r["method"] for r in rows} == {"hybrid_rag", "my_method"}
        assert (tmp_path / "runs" / "my_method" / "report" / "compare-my_method-vs-hybrid_rag.html").is_file()
    finally:
        for m in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
            sys.modules.pop(m)


def test_a_method_that_fails_to_import_is_one_line_in_run_as_in_list(tmp_path, monkeypatch, capsys):
    pkg = tmp_path / "src" / "broken_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import not_installed_dependency  # noqa\n")
    site = tmp_path / "site-packages"
    site.mkdir()
    install_package(tmp_path / "src", site, "broken_pkg", "[sourcebench.methods]\nbroken = broken_pkg:Broken\n")
    monkeypatch.syspath_prepend(str(site))
    assert main(["list"]) == 0
    assert "cannot load" in capsys.readouterr().out
    assert main(["run", "--benchmark", "phantomwiki", "--methods", "broken", "--model", "scripted/extractive",
                 "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.splitlines()  # the CLI's warning that its commands are missing, then the error
    cause = "method 'broken' cannot be loaded (ModuleNotFoundError: No module named 'not_installed_dependency')"
    assert err == [f"sourcebench: warning: {cause}; its commands are not available", f"sourcebench: error: {cause}"]
    assert not (tmp_path / "r").exists()


def test_an_editable_install_hashes_the_package_source(tmp_path, monkeypatch):
    """``pip install -e .`` lists a .pth file, not the package: the code hash still covers the source."""
    from sourcebench.harness.registry import method_code

    src = tmp_path / "src"
    (src / "edit_pkg").mkdir(parents=True)
    module = src / "edit_pkg" / "method.py"
    module.write_text((PKG / "sb_keyword_notes.py").read_text())
    (src / "edit_pkg" / "__init__.py").write_text("")
    site = tmp_path / "site-packages"
    dist = site / "edit_pkg-0.1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: edit-pkg\nVersion: 0.1.0\n")
    (site / "__editable__.edit_pkg-0.1.0.pth").write_text(str(src) + "\n")
    (dist / "RECORD").write_text("__editable__.edit_pkg-0.1.0.pth,,\nedit_pkg-0.1.0.dist-info/METADATA,,\n")
    (dist / "top_level.txt").write_text("edit_pkg\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(src))
    try:
        import importlib

        cls = importlib.import_module("edit_pkg.method").KeywordNotes
        before = method_code(cls)
        assert before["package"] == "edit-pkg" and before["package_version"] == "0.1.0"
        module.write_text(module.read_text().replace("Notes from earlier questions:", "Earlier notes:"))
        assert method_code(cls)["code_hash"] != before["code_hash"]
    finally:
        for m in [m for m in sys.modules if m.split(".")[0] == "edit_pkg"]:
            sys.modules.pop(m)
