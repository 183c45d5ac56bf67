import gc

from sourcebench.harness.gcpolicy import long_lived_frozen


def test_freeze_is_undone_only_by_the_outermost_exit():
    gc.unfreeze()
    keep = [object() for _ in range(10)]  # noqa: F841  (alive before the freeze)
    with long_lived_frozen():
        outer = gc.get_freeze_count()
        assert outer > 0
        later = [[i] for i in range(1000)]  # noqa: F841  (built by a phase)
        with long_lived_frozen():
            assert gc.get_freeze_count() > outer
        assert gc.get_freeze_count() > outer  # inner exit keeps everything frozen
    assert gc.get_freeze_count() == 0


def test_unfreezes_when_the_body_raises():
    gc.unfreeze()
    try:
        with long_lived_frozen():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.get_freeze_count() == 0
