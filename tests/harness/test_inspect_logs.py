"""The test phase writes inspect's ``.eval`` logs with single-threaded zstd (harness/inspect_tasks.py)."""

import zipfile

from inspect_ai._util import zipfile as inspect_zip

from sourcebench.harness.inspect_tasks import _mentions_secret, single_threaded_log_compression


def test_compression_is_single_threaded_only_inside_and_restored():
    before = inspect_zip._ZSTD_THREADS
    assert before > 0  # the pinned inspect-ai's default that this works around
    with single_threaded_log_compression():
        assert inspect_zip._ZSTD_THREADS == 0
    assert inspect_zip._ZSTD_THREADS == before
    try:
        with single_threaded_log_compression():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert inspect_zip._ZSTD_THREADS == before


def test_members_written_single_threaded_read_back_and_are_scanned(tmp_path, monkeypatch):
    path = tmp_path / "log.eval"
    payload = b'{"sample": "' + b"answer text " * 2000 + b'"}'
    with single_threaded_log_compression():
        with zipfile.ZipFile(path, "w", **inspect_zip.zipfile_compress_kwargs) as z:
            z.writestr("samples/1_epoch_1.json", payload)
    with zipfile.ZipFile(path) as z:
        assert z.infolist()[0].compress_type == inspect_zip._ZIP_ZSTANDARD
        assert z.read("samples/1_epoch_1.json") == payload
    monkeypatch.setenv("PLANTED_API_KEY", "sk-planted-0123456789abcdef")
    assert not _mentions_secret(path)
    with single_threaded_log_compression():
        with zipfile.ZipFile(path, "a", **inspect_zip.zipfile_compress_kwargs) as z:
            z.writestr("samples/2_epoch_1.json", b'{"error": "key sk-planted-0123456789abcdef rejected"}')
    assert _mentions_secret(path)
