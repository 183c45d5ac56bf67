"""APIBench: the Gorilla repository's API databases, evaluation sets and 0-shot question files.

Downloaded from the repository at a pinned commit into one flat folder (the layout
``benchmark.py`` reads); sizes and sha256 are those of the files at that commit, so every
download is checked.
"""

from __future__ import annotations

from pathlib import Path

from sourcebench.adapters.fetch import FetchReport, Log
from sourcebench.adapters.fetch.download import RemoteFile, fetch_files
from sourcebench.adapters.fetch.manifest import Manifest

REPO = "ShishirPatil/gorilla"
COMMIT = "6ea57973c7a6097fd7c5915698c54c17c5b1b6c8"  # 2026-03-23
RAW = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/"
OPTIONS: dict[str, str] = {}

# (path in the repository, size, sha256); saved under the file's base name
FILES = (
    ("data/api/torchhub_api.jsonl", 127463, "30c762a4f8ae1be605aa45c74669e8b64a806fa4f3be52bd625199000540b080"),
    ("data/api/huggingface_api.jsonl", 1058195, "6757c59091abcf6d0f32f878a765b4ae28a9db7f88c7a1a4ee8bfeda72472f6d"),
    ("data/api/tensorflowhub_api.jsonl", 660154, "bed9819b8d54cda1709fb0942f18d7cd5f39788b22ba03c9f89e9fc0287b2c0a"),
    ("data/apibench/torchhub_eval.json", 388690, "e575eec9289ee46a577b80ee3065111dd8accf4e6145d6ad5fd919879a79efe9"),
    ("data/apibench/huggingface_eval.json", 2518870,
     "d314b1617fe4021bdd7b2e81ca7c1aeda0c7f9921b512aa5f222398e83744c43"),
    ("data/apibench/tensorflow_eval.json", 1428974, "14fd83b6e1fb61ccb43609483a13b658cc31bd55bd5e118bc19067ab73164f0a"),
    ("gorilla/eval/eval-data/questions/torchhub/questions_torchhub_0_shot.jsonl", 34448,
     "4200d6cb154c62fb459c452829ce5ab7d474a9f5b1e69b7215b131c2fee96a87"),
    ("gorilla/eval/eval-data/questions/huggingface/questions_huggingface_0_shot.jsonl", 186175,
     "2e27943a14207c312b33ac171d83794633ee3196cefde68cd35c789d75e62477"),
    ("gorilla/eval/eval-data/questions/tensorflowhub/questions_tensorflowhub_0_shot.jsonl", 121259,
     "d3e7fb41cda6bdf99a09010d336122eca2da9d620c0779c052a623cf23fe89d0"),
    ("LICENSE", 11357, "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"),
)


def remote_files() -> list[RemoteFile]:
    return [RemoteFile(Path(p).name, (RAW + p,), sha, size) for p, size, sha in FILES]


def fetch(dest: Path, settings: dict[str, str], log: Log) -> FetchReport:
    folder = Path(dest) / "apibench"
    report = FetchReport("apibench", folder)
    manifest = Manifest(folder, "apibench", log)
    fetch_files(remote_files(), folder, manifest, log, report)
    return report
