"""Secrets: a planted API key never appears in any file a run writes.

Keys are planted in the environment (``OPENAI_API_KEY`` and the endpoint's ``FAULT_API_KEY``);
the fault server receives the key with every request and, for a share of requests, answers HTTP 401
with the ``Authorization`` header repeated in the body, as some gateways do. Every file the run
writes is then searched: the run folder (results, counters, failures, run.json, splits, artifacts,
report), inspect's logs (decoded, they are compressed), the sqlite caches (dumped) and inspect's
own data and cache folders (pointed into the test's folder), plus the console output.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sourcebench.harness.io import redact_secrets
from tests.conftest import need_data
from tests.hardening.common import PLANTED_KEY, pw_args, rows, run_sub

OTHER_KEY = "sk-proj-planted-openai-9d8c7b6a5f4e3d2c1b0a"
SHORT_KEY = "sk-XYZ7q9w"  # 10 characters: keys of any length from 4 on are masked


def texts_of(path: Path) -> list[str]:
    """What a file says, decoded where it is a container (inspect log, sqlite database)."""
    data = path.read_bytes()
    out = [data.decode("utf-8", "replace")]
    if path.suffix == ".gz":  # inspect's trace logs
        import gzip

        try:
            out.append(gzip.decompress(data).decode("utf-8", "replace"))
        except (OSError, EOFError):  # a trace still being written
            out.append(gzip.GzipFile(fileobj=__import__("io").BytesIO(data)).read1().decode("utf-8", "replace"))
    if path.suffix == ".eval":
        from inspect_ai.log import read_eval_log

        out.append(read_eval_log(str(path)).model_dump_json())
    if data.startswith(b"SQLite format 3"):
        con = sqlite3.connect(path)
        try:
            out.append("\n".join(con.iterdump()))
        finally:
            con.close()
    return out


def leaks(folder: Path, secrets: list[str]) -> list[str]:
    found = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            for text in texts_of(p):
                found += [f"{p}: {s[:12]}..." for s in secrets if s in text]
    return found


@pytest.mark.slow
@pytest.mark.parametrize("planted", [PLANTED_KEY, SHORT_KEY], ids=["long_key", "ten_character_key"])
def test_planted_keys_appear_in_no_file_a_run_writes(tmp_path, fault_server, planted):
    PLANTED_KEY = planted  # the endpoint's key for this case
    need_data("phantomwiki")
    inspect_home = tmp_path / "xdg"
    env = {"FAULT_BASE_URL": fault_server.url, "FAULT_API_KEY": PLANTED_KEY, "OPENAI_API_KEY": OTHER_KEY,
           "XDG_DATA_HOME": str(inspect_home / "data"), "XDG_CACHE_HOME": str(inspect_home / "cache")}
    out = tmp_path / "run"
    fault_server.reset()
    args = pw_args(out, "openai-api/fault/pass1_echo401xallp40", "hybrid_rag,no_source", 5, "0", "--max-retries", "0",
                   "--allow-degraded")  # 40 % of the calls fail: degraded cells, which are not what this test is about
    first = run_sub(args, env=env)
    assert first.returncode == 0, first.stderr
    again = run_sub(args, env=env)  # the resume / no-op path writes too
    report = run_sub(["report", str(out)], env=env)
    assert again.returncode == 0 and report.returncode == 0

    # the key was really in use, and really echoed back
    assert any(PLANTED_KEY in h for h in fault_server.stats_.auth_headers)
    failed = [r for r in rows(out) if r["failed"]]
    assert failed and all("Bearer ***" in r["failure_reason"] for r in failed)

    assert (out / "logs").is_dir() and list((out / "logs").glob("*.eval"))
    assert not leaks(out, [PLANTED_KEY, OTHER_KEY])
    if inspect_home.exists():
        assert not leaks(inspect_home, [PLANTED_KEY, OTHER_KEY])
    for p in (first, again, report):
        assert PLANTED_KEY not in p.stdout + p.stderr and OTHER_KEY not in p.stdout + p.stderr


def test_redaction_masks_env_keys_urls_and_bearer_tokens(monkeypatch):
    monkeypatch.setenv("MYSERVICE_API_KEY", "tok-0123456789abcdefXYZ")
    monkeypatch.setenv("SOME_FLAG_KEY", "default")  # too short to be a credential: left alone
    text = ("key tok-0123456789abcdefXYZ at http://bob:hunter2hunter2@host:8/v1 with "
            "Authorization: Bearer abcdefghijklmnop, the default setting")
    masked = redact_secrets(text, bearer=True)
    assert "tok-0123456789abcdefXYZ" not in masked and "hunter2" not in masked and "abcdefghijklmnop" not in masked
    assert "http://***@host:8/v1" in masked and "Bearer ***" in masked and "the default setting" in masked
    # in ordinary file content only credentials are masked, prose about bearers stays
    assert redact_secrets("bearer bonds pay coupons") == "bearer bonds pay coupons"


def test_secret_values_follow_the_environment(monkeypatch):
    from sourcebench.harness.io import secret_values

    monkeypatch.setenv("SOME_SERVICE_API_KEY", "first-value-0123456789")
    assert "first-value-0123456789" in secret_values()
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "second-value-0123456789")
    assert "second-value-0123456789" in secret_values()
    assert "first-value-0123456789" not in secret_values()
    got = secret_values()
    got.clear()  # a caller's copy: the memo is not shared
    assert "second-value-0123456789" in secret_values()
    monkeypatch.delenv("SOME_SERVICE_API_KEY")
    assert "second-value-0123456789" not in secret_values()
