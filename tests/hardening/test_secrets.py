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


def test_a_key_echoed_in_an_error_is_never_written_to_the_inspect_log(tmp_path, fault_env, monkeypatch):
    """The ``.eval`` log as inspect writes it while the run goes on (what a SIGKILL leaves): the log
    scrub that runs after the test phase is switched off, so only masking at the source can keep the
    key out of the failed calls' recorded errors, tracebacks and error bodies."""
    from sourcebench.harness import inspect_tasks
    from sourcebench.harness.cli import main

    need_data("phantomwiki")
    monkeypatch.setattr(inspect_tasks, "scrub_logs", lambda paths: 0)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg" / "data"))  # inspect's live sample buffer
    out = tmp_path / "run"
    assert main(pw_args(out, "openai-api/fault/pass1_echo401xallp40", "no_source", 4, "0", "--max-retries", "0",
                        "--allow-degraded")) == 0
    assert any(PLANTED_KEY in h for h in fault_env.stats_.auth_headers)  # sent, and echoed in 401s
    logs = list((out / "logs").glob("*.eval"))
    assert logs
    recorded = "".join(texts_of(p)[-1] for p in logs)
    assert "invalid credentials: Bearer ***" in recorded  # the failed calls' errors are in the log, masked
    assert not leaks(out / "logs", [PLANTED_KEY]) and not leaks(tmp_path / "xdg", [PLANTED_KEY])


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


@pytest.mark.parametrize("name", ["DB_PASSWORD", "CLIENT_SECRET", "GITHUB_TOKEN", "SIGNING_KEY", "HF_TOKEN",
                                  "AWS_SECRET_ACCESS_KEY", "MYSERVICE_API_KEY"])
def test_every_credential_name_is_masked_from_the_api_key_length(monkeypatch, name):
    """A 10-character credential is masked under any credential-like name, as an API key is."""
    monkeypatch.setenv(name, SHORT_KEY)
    assert redact_secrets(f"server said: bad {SHORT_KEY}") == "server said: bad ***"
    monkeypatch.setenv(name, "hunter2!")  # a short password of lower-case letters is still a credential
    assert "hunter2!" not in redact_secrets("login hunter2! refused")


def test_ordinary_short_settings_under_key_and_token_names_are_left_alone(monkeypatch):
    settings = {"SORT_KEY": "name", "SOME_FLAG_KEY": "default", "MODEL_KEY": "gpt-4o", "PAD_TOKEN": "<pad>",
                "EOS_TOKEN": "</s>", "BOS_TOKEN": "<|endoftext|>", "CLS_TOKEN": "[CLS]", "MAX_TOKEN": "4096",
                "FEATURE_KEY": "primary_key"}
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    text = "sort by name with the default gpt-4o, <pad> </s> <|endoftext|> [CLS], 4096 tokens, primary_key"
    assert redact_secrets(text) == text
    monkeypatch.setenv("DB_PASSWORD", "default")  # a name that can only hold a credential: masked whatever it says
    assert redact_secrets(text) == text.replace("default", "***")


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


def test_provider_replies_and_errors_are_masked_in_place(monkeypatch):
    """An output, its ModelCall and a raised error leave the provider masked, with their types (and so
    inspect's retry decision and this layer's error classification) unchanged."""
    import httpx
    import openai
    from inspect_ai.model import ModelOutput
    from inspect_ai.model._model_call import ModelCall

    from sourcebench.harness.llm.redaction import _mask_exception, _mask_reply

    monkeypatch.setenv("SVC_API_KEY", SHORT_KEY)
    out = ModelOutput.from_content("m", f"the key is {SHORT_KEY}")
    call = ModelCall.create(request={"messages": []}, response={"echo": f"Bearer {SHORT_KEY}"})
    got_out, got_call = _mask_reply((out, call))
    assert SHORT_KEY not in got_out.model_dump_json() + got_call.model_dump_json()
    assert got_out.completion == "the key is ***" and isinstance(got_call, ModelCall)
    plain = ModelOutput.from_content("m", "send the header Authorization: Bearer YOUR_TOKEN_HERE")
    assert _mask_reply(plain) is plain  # an answer's text is not a credential: untouched, not copied

    resp = httpx.Response(401, request=httpx.Request("POST", "http://127.0.0.1/v1/chat/completions"))
    err = openai.AuthenticationError(f"invalid credentials: Bearer {SHORT_KEY}", response=resp,
                                     body={"error": {"message": f"Bearer {SHORT_KEY}"}})
    _mask_exception(err)
    assert type(err) is openai.AuthenticationError and err.status_code == 401
    assert SHORT_KEY not in str(err) + repr(err) + err.message + str(err.body)
