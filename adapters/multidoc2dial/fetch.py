"""MultiDoc2Dial: the official ``multidoc2dial.zip``, unpacked into ``DATA/multidoc2dial/``.

The zip is the one IBM's scripts download (``scripts/run_download.sh`` of IBM/multidoc2dial); the
same file sits in the doc2dial/multidoc2dial repository that serves that address, tried second.
Its size and sha256 are pinned. The JSON files are extracted flat (the zip holds them in a
``multidoc2dial/`` folder) and recorded in the manifest, so a re-run whose files still verify
downloads nothing; the zip itself is deleted once they are in place.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from sourcebench.adapters.fetch import FetchReport, Log, inside
from sourcebench.adapters.fetch.download import RemoteFile, fetch_file, matches, sha256_of
from sourcebench.adapters.fetch.manifest import Manifest
from sourcebench.harness.errors import DataError
from sourcebench.harness.io import atomic_file

SITE_COMMIT = "6b7565989ad14858ee2c7498b605dc6d32ffe9e0"  # doc2dial/multidoc2dial, 2022-05-01 ("added test split")
ZIP = RemoteFile(
    "multidoc2dial.zip",
    ("https://doc2dial.github.io/multidoc2dial/file/multidoc2dial.zip",
     f"https://raw.githubusercontent.com/doc2dial/multidoc2dial/{SITE_COMMIT}/file/multidoc2dial.zip"),
    sha256="f0c034c249663d7b3cb08b19cf2cc2c3d101372485be982621d4711931a1ce00",
    size=6_868_509,
)
REQUIRED = ("multidoc2dial_doc.json", "multidoc2dial_dial_train.json", "multidoc2dial_dial_validation.json")
UNPACKED = "unpacked"  # the manifest step listing the extracted files
OPTIONS: dict[str, str] = {}
# extraction caps, relative to the archive's size: no member may unpack to more than 20 times it, nor
# all of them together to more than 40 times it (for the pinned 6.9 MB zip: 137 MB and 275 MB, room for
# its JSON files; a crafted 0.31 MB zip once became 315 MB in 2 s)
MAX_MEMBER_RATIO = 20
MAX_TOTAL_RATIO = 40


def fetch(dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    zip_spec = ZIP
    folder = Path(dest) / "multidoc2dial"
    report = FetchReport("multidoc2dial", folder)
    manifest = Manifest(folder, "multidoc2dial", log)
    files = (manifest.get(UNPACKED) or {}).get("files") or {}
    if set(REQUIRED) <= set(files) and all(matches(folder / n, f.get("sha256"), f.get("size")) for n, f in files.items()):
        log(f"kept {', '.join(sorted(files))} in {folder} (verified)")
        report.kept += sorted(files)
        return report
    if fetch_file(zip_spec, folder, manifest, log):
        report.done.append(zip_spec.path)
    names = _extract(folder / zip_spec.path, folder, manifest, zip_spec.path, log)
    report.done += names
    (folder / zip_spec.path).unlink()
    manifest.forget(zip_spec.path)
    return report


def _extract(archive: Path, folder: Path, manifest: Manifest, zip_name: str, log: Log) -> list[str]:
    """The zip's ``multidoc2dial_*.json`` files, by base name, into ``folder`` (each atomically)."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = {Path(i.filename).name: i for i in z.infolist()
                       if not i.is_dir() and re.fullmatch(r"multidoc2dial_[a-z_]+\.json", Path(i.filename).name)}
            missing = [m for m in REQUIRED if m not in members]
            if missing:
                raise DataError(f"{archive}: does not contain {', '.join(missing)}")
            files = {}
            per_member, total = MAX_MEMBER_RATIO * archive.stat().st_size, MAX_TOTAL_RATIO * archive.stat().st_size
            if sum(i.file_size for i in members.values()) > total:
                raise DataError(f"{archive}: its members would unpack to more than {MAX_TOTAL_RATIO} times the "
                                "archive's size; refusing to extract it")
            for name, info in sorted(members.items()):
                path = inside(folder, folder / name)
                with z.open(info) as src, atomic_file(path, binary=True) as out:
                    _copy_capped(src, out, per_member, f"{archive}: member {info.filename}")
                files[name] = {"member": info.filename, "size": path.stat().st_size, "sha256": sha256_of(path)}
                log(f"unpacked {path}")
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise DataError(f"{archive}: not a valid zip ({e})") from None
    manifest.record(UNPACKED, zip=zip_name, zip_sha256=sha256_of(archive), files=files)
    return sorted(files)


def _copy_capped(src, out, limit: int, what: str) -> None:
    """Copy at most ``limit`` bytes: a member's header may understate what it unpacks to."""
    n = 0
    while chunk := src.read(1 << 20):
        n += len(chunk)
        if n > limit:
            raise DataError(f"{what} unpacks to more than {MAX_MEMBER_RATIO} times the archive's size; refusing "
                            "to extract it")
        out.write(chunk)
