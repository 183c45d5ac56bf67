"""Seeded grouped guidance/test splits with an auditable manifest.

Groups (same dialogue, same API, same template) never straddle the two sides. Ordering uses
``numpy.random.default_rng(seed)`` over sorted group keys, so a split is identical in every process
and on every machine (no reliance on Python's salted string hashing).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from .data import Split, Task, stable_hash
from .errors import DataError
from .io import atomic_write_json, read_json

DEFAULT_SEEDS = (0, 1, 2)
GUIDANCE_FRACTION = 0.3
SHARE_TOLERANCE = 0.10  # a realised guidance share further than this from the target is reported


def guidance_share(split: Split) -> float:
    """The realised share of the source's tasks on the guidance side (whole groups move, so it can miss)."""
    n = len(split.guidance_ids) + len(split.test_ids)
    return len(split.guidance_ids) / n if n else 0.0


def share_warning(split: Split) -> str | None:
    """One line when a grouped split's realised guidance share is off its target by more than 10 points."""
    share = guidance_share(split)
    if split.mode != "grouped" or abs(share - split.guidance_fraction) <= SHARE_TOLERANCE:
        return None
    return (f"{split.benchmark}/{split.source_id} seed {split.seed}: guidance share {100 * share:.0f} % (target "
            f"{100 * split.guidance_fraction:.0f} %): whole groups are moved and this source's groups are large")


def grouped_split(
    benchmark: str,
    source_id: str,
    tasks: list[Task],
    seed: int,
    guidance_fraction: float = GUIDANCE_FRACTION,
    source_fingerprint: str = "",
) -> Split:
    """Assign whole groups to guidance until the guidance share is as close to the target as possible."""
    if not tasks:
        raise DataError(f"{benchmark}/{source_id}: no tasks to split")
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:3]
        raise DataError(f"{benchmark}/{source_id}: duplicate task ids {dup}")
    groups: OrderedDict[str, list[Task]] = OrderedDict()
    for t in sorted(tasks, key=lambda t: t.id):
        groups.setdefault(t.group or t.id, []).append(t)
    keys = sorted(groups)
    if len(keys) < 2:
        raise DataError(f"{benchmark}/{source_id}: all {len(tasks)} tasks are in one group ({keys[0]!r}); a grouped "
                        "split needs at least two groups (one for guidance, one for test)")
    # Mix the source id into the seed so different sources get different (but fixed) orders.
    sub = int(stable_hash(source_id)[:8], 16)
    rng = np.random.default_rng([seed, sub])
    order = [keys[i] for i in rng.permutation(len(keys))]
    target = guidance_fraction * len(tasks)
    guidance: list[str] = []
    count = 0
    for k in order:
        n = len(groups[k])
        # take the group if it brings us closer to the target (always take at least one group)
        if not guidance or abs(count + n - target) <= abs(count - target):
            guidance.append(k)
            count += n
        if count >= target:
            break
    g = set(guidance)
    if len(g) == len(keys):  # never leave the test side empty
        g.discard(guidance[-1])
    guidance_ids = sorted(t.id for k in g for t in groups[k])
    test_ids = sorted(t.id for k in keys if k not in g for t in groups[k])
    return Split(
        benchmark=benchmark,
        source_id=source_id,
        seed=seed,
        guidance_ids=guidance_ids,
        test_ids=test_ids,
        guidance_fraction=guidance_fraction,
        mode="grouped",
        item_hashes={t.id: t.item_hash for t in tasks},
        source_fingerprint=source_fingerprint,
    )


def official_split(
    benchmark: str, source_id: str, guidance: list[Task], test: list[Task], source_fingerprint: str = ""
) -> Split:
    """A split fixed by the benchmark (AppWorld train / test-normal); the seed does not change it."""
    return Split(
        benchmark=benchmark,
        source_id=source_id,
        seed=0,
        guidance_ids=[t.id for t in guidance],
        test_ids=[t.id for t in test],
        mode="official",
        item_hashes={t.id: t.item_hash for t in guidance + test},
        source_fingerprint=source_fingerprint,
    )


def manifest_path(root: Path, split: Split) -> Path:
    return Path(root) / "splits" / split.benchmark / split.source_id.replace("/", "_") / f"seed{split.seed}.json"


def write_manifest(root: Path, split: Split) -> Path:
    """Write (or verify) the manifest. An existing manifest that disagrees is an error, never overwritten."""
    path = manifest_path(root, split)
    data = split.model_dump()
    data["split_id"] = split.split_id
    data["guidance_share"] = round(guidance_share(split), 4)  # realised; the target is guidance_fraction
    if path.exists():
        old = read_json(path)
        if old.get("split_id") != data["split_id"]:
            raise DataError(
                f"{path}: existing split manifest differs from the split computed now "
                "(the benchmark data changed); use a new --out folder"
            )
        return path
    atomic_write_json(path, data)
    return path


def load_manifest(path: Path) -> Split:
    data = read_json(path)
    data.pop("split_id", None)
    data.pop("guidance_share", None)
    try:
        return Split.model_validate(data)
    except Exception as e:  # pydantic ValidationError
        raise DataError(f"{path}: not a valid split manifest ({str(e).splitlines()[0]})") from None
