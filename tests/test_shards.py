"""``--shard I/N`` (tests/conftest.py): every test file in exactly one shard, the same split in
every shard process, the ``TOGETHER`` groups kept whole, and the parts balanced by weight."""

from __future__ import annotations

import pytest

from tests.conftest import TOGETHER, _recorded, merge_recorded, parse_shard, split


def test_parse_shard() -> None:
    assert parse_shard("1/2") == (1, 2) and parse_shard("3/3") == (3, 3)
    for bad in ("0/2", "3/2", "2", "a/b", "1/0", "-1/2"):
        with pytest.raises(pytest.UsageError):
            parse_shard(bad)


def test_every_file_once_and_balanced_longest_first() -> None:
    recorded = {"tests/a.py": [9.0, 1], "tests/b.py": [5.0, 1], "tests/c.py": [4.0, 1]}
    counts = {"tests/a.py": 1, "tests/b.py": 1, "tests/c.py": 1, "tests/new.py": 2}
    parts = split(counts, recorded, 2)
    # new.py, not recorded, weighs 2 tests x 6 s (the recorded average) = 12: first, into part
    # 1; a (9) into part 2; b (5) into part 2 (9 < 12); c (4) into part 1 (12 < 14)
    assert parts == [{"tests/new.py", "tests/c.py"}, {"tests/a.py", "tests/b.py"}]
    assert split(counts, recorded, 2) == parts  # deterministic
    assert set().union(*parts) == set(counts) and sum(map(len, parts)) == len(counts)


def test_together_groups_share_a_shard_whatever_their_weights() -> None:
    group = TOGETHER[0]
    files = [p + "test_x.py" if p.endswith("/") else p for p in group]
    counts = {f: 1 for f in files} | {f"tests/other{i}.py": 1 for i in range(len(files))}
    recorded = {f: [1.0, 1] for f in counts}
    for n in (2, 3):
        parts = split(counts, recorded, n)
        assert [all(f in part for f in files) for part in parts].count(True) == 1


def test_the_recorded_durations_cover_the_suite() -> None:
    recorded = _recorded()
    assert sum(int(c) for _, c in recorded.values()) >= 2000  # a stale or missing file shows here
    assert all(s >= 0 for s, _ in recorded.values())


def test_a_shard_records_its_own_files_and_keeps_the_others() -> None:
    previous = {"tests/a.py": [9.0, 3.0], "tests/b.py": [5.0, 1.0], "tests/gone.py": [1.0, 1.0]}
    now = {"tests/b.py": [2.5, 2], "tests/c.py": [1.0, 4]}
    assert merge_recorded(previous, now, sharded=True) == {
        "tests/a.py": [9.0, 3],
        "tests/b.py": [2.5, 2],
        "tests/c.py": [1.0, 4],
        "tests/gone.py": [1.0, 1],
    }
    # A whole run is the whole record: a file no longer in the suite drops out.
    assert merge_recorded(previous, now, sharded=False) == {
        "tests/b.py": [2.5, 2],
        "tests/c.py": [1.0, 4],
    }
