import subprocess
import sys

import pytest

from sourcebench.harness.data import Task
from sourcebench.harness.errors import DataError
from sourcebench.harness.splits import grouped_split, load_manifest, write_manifest


def make_tasks(n_groups=20, per_group=3):
    return [Task(id=f"g{g}-t{i}", source_id="s", question=f"q{g}{i}", reference="r", group=f"g{g}")
            for g in range(n_groups) for i in range(per_group)]


def test_grouped_split_keeps_groups_together_and_disjoint():
    tasks = make_tasks()
    sp = grouped_split("b", "s", tasks, seed=0)
    assert set(sp.guidance_ids).isdisjoint(sp.test_ids)
    assert set(sp.guidance_ids) | set(sp.test_ids) == {t.id for t in tasks}
    group_of = {t.id: t.group for t in tasks}
    assert {group_of[i] for i in sp.guidance_ids}.isdisjoint({group_of[i] for i in sp.test_ids})
    assert len(sp.guidance_ids) == 18  # 30% of 60, whole groups of 3


def test_fraction_is_close_with_uneven_groups():
    tasks = [Task(id=f"t{i}", source_id="s", question="q", group=f"g{i % 7}") for i in range(100)]
    sp = grouped_split("b", "s", tasks, seed=1)
    assert 20 <= len(sp.guidance_ids) <= 40


def test_seeds_differ_and_are_deterministic():
    tasks = make_tasks()
    a = [grouped_split("b", "s", tasks, seed=s).guidance_ids for s in (0, 1, 2)]
    assert a[0] != a[1] != a[2]
    assert grouped_split("b", "s", list(reversed(tasks)), seed=0).guidance_ids == a[0]


def test_deterministic_across_processes():
    code = ("from harness.data import Task; from harness.splits import grouped_split;"
            "t=[Task(id=f'g{g}-{i}',source_id='s',question='q',group=f'g{g}') for g in range(20) for i in range(3)];"
            "print(grouped_split('b','s',t,seed=2).guidance_ids)")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={"PYTHONHASHSEED": str(h), "PATH": ""}).stdout for h in (1, 2, 3)}
    assert len(outs) == 1 and outs.pop().startswith("[")


def test_duplicate_ids_and_empty_are_errors():
    with pytest.raises(DataError, match="duplicate"):
        grouped_split("b", "s", make_tasks(2, 1) + make_tasks(1, 1), seed=0)
    with pytest.raises(DataError, match="no tasks"):
        grouped_split("b", "s", [], seed=0)


def test_manifest_roundtrip_and_conflict(tmp_path):
    tasks = make_tasks()
    sp = grouped_split("b", "s", tasks, seed=0)
    p = write_manifest(tmp_path, sp)
    back = load_manifest(p)
    assert back.guidance_ids == sp.guidance_ids and back.item_hashes == sp.item_hashes
    write_manifest(tmp_path, sp)  # same split: fine
    other = grouped_split("b", "s", tasks[:-3], seed=0)
    with pytest.raises(DataError, match="differs"):
        write_manifest(tmp_path, other)


def _t(i, group=""):
    return Task(id=i, source_id="s", question="q", reference="r", group=group)


def test_a_single_group_source_is_a_clear_error():
    with pytest.raises(DataError, match="one group"):
        grouped_split("b", "s", [_t(f"t{i}", "only") for i in range(5)], 0)


def test_the_realised_guidance_share_is_recorded_and_a_far_miss_warned(tmp_path):
    import json

    from sourcebench.harness.splits import guidance_share, share_warning

    # groups of 8 and 2: the only splits are 8/2 or 2/8, i.e. 80 % or 20 % guidance against a 30 % target
    tasks = [_t(f"a{i}", "big") for i in range(8)] + [_t(f"b{i}", "small") for i in range(2)]
    splits = [grouped_split("b", "s", tasks, s) for s in range(6)]
    assert {guidance_share(x) for x in splits} == {0.2, 0.8}
    far = next(x for x in splits if guidance_share(x) == 0.8)
    assert "guidance share 80 % (target 30 %)" in share_warning(far)
    ok = grouped_split("b", "s", [_t(f"t{i}") for i in range(10)], 0)
    assert share_warning(ok) is None and guidance_share(ok) == 0.3
    path = write_manifest(tmp_path, ok)
    assert json.loads(path.read_text())["guidance_share"] == 0.3
    assert load_manifest(path) == ok
