"""WindowStore: labelling rule in any arrival order, bit-exact features, query/count/stats,
retention, schema versioning, concurrent readers, and survival of kill -9."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import edge_client.store as store_module
from edge_client.store import QueryResult, RetentionPolicy, StoreError, WindowRecord, WindowStore
from tests.edge_client import store_crash_writer as crash

ROOT = Path(__file__).resolve().parents[2]
S = 1_000_000  # one second in microseconds


@dataclass(frozen=True)
class Ann:
    session_id: str
    start_us: int
    end_us: int
    label: str


def reference_label(session_id: str, start_us: int, end_us: int, annotations: list[Ann]) -> str | None:
    """The documented rule, spelled out naively: inside one annotation, overlapping no other label."""
    overlapping = [a for a in annotations if a.session_id == session_id and a.start_us < end_us and start_us < a.end_us]
    labels = {a.label for a in overlapping}
    if len(labels) == 1 and any(a.start_us <= start_us and end_us <= a.end_us for a in overlapping):
        return labels.pop()
    return None


def rec(
    session: str, start_s: float, length_s: float = 4, features: np.ndarray | None = None, version: str = "v1"
) -> WindowRecord:
    vec = np.arange(3, dtype=np.float64) + start_s if features is None else features
    return WindowRecord(session, int(start_s * S), int((start_s + length_s) * S), vec, version)


def labels_by_start(store: WindowStore, version: str = "v1") -> dict[tuple[str, int], str | None]:
    X, y, meta = store.query(version, labelled_only=False)
    return {(s, int(t)): lab for s, t, lab in zip(meta.session_ids, meta.start_us, y)}


@pytest.fixture
def store(tmp_path: Path):
    with WindowStore(tmp_path / "windows.db") as s:
        yield s


def brute_force_counts(path: Path) -> dict[tuple[str, str], int]:
    with sqlite3.connect(path) as c:
        return {
            (v, lab): n
            for v, lab, n in c.execute(
                "SELECT feature_set_version, coalesce(label, ''), count(*) FROM windows GROUP BY 1, 2"
            )
        }


def trigger_counts(path: Path) -> dict[tuple[str, str], int]:
    with sqlite3.connect(path) as c:
        return {(v, lab): n for v, lab, n in c.execute("SELECT feature_set_version, label, n FROM window_counts")}


# -- labelling ---------------------------------------------------------------------------------

windows_st = st.dictionaries(
    st.tuples(st.sampled_from(["s1", "s2"]), st.integers(0, 12)), st.integers(1, 5), max_size=12
)
annotations_st = st.lists(
    st.builds(
        lambda s, a, n, lab: Ann(s, a * S, (a + n) * S, lab),
        st.sampled_from(["s1", "s2"]),
        st.integers(0, 14),
        st.integers(1, 10),
        st.sampled_from(["eat", "rest"]),
    ),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(windows=windows_st, annotations=annotations_st, order_seed=st.integers(0, 2**32 - 1), batch=st.booleans())
def test_labels_follow_the_documented_rule_whatever_the_arrival_order(windows, annotations, order_seed, batch):
    ops = [("w", k, n) for k, n in windows.items()] + [("a", a) for a in annotations]
    random.Random(order_seed).shuffle(ops)
    with tempfile.TemporaryDirectory() as d, WindowStore(Path(d) / "w.db") as store:
        pending: list[WindowRecord] = []
        for op in ops:
            if op[0] == "w":
                (session, start), length = op[1], op[2]
                pending.append(rec(session, start, length))
                if not batch:
                    store.add(pending.pop())
            else:
                store.add_many(pending)  # windows reach the store before any later annotation
                pending.clear()
                a = op[1]
                inside = store.label_range(a.session_id, a.start_us, a.end_us, a.label)
                assert inside <= sum(
                    1
                    for (s, t), n in windows.items()
                    if s == a.session_id and a.start_us <= t * S and (t + n) * S <= a.end_us
                )
        store.add_many(pending)
        expected = {(s, t * S): reference_label(s, t * S, (t + n) * S, annotations) for (s, t), n in windows.items()}
        assert labels_by_start(store) == expected
        stats = store.stats()
        assert stats.windows == len(windows)
        assert stats.labelled == sum(lab is not None for lab in expected.values())
        assert stats.by_label == {lab: n for lab in ("eat", "rest") if (n := sum(v == lab for v in expected.values()))}
        assert trigger_counts(store.path) == brute_force_counts(store.path)


def test_labelling_rule_examples(store: WindowStore) -> None:
    store.add_many([rec("s1", t) for t in (0, 2, 4, 6, 8, 10, 12)] + [rec("s2", 2)])
    assert store.label_range("s1", 0, 8 * S, "eat") == 3  # windows 0-4, 2-6, 4-8
    assert store.label_range("s1", 8 * S, 12 * S, "rest") == 1  # 8-12; 6-10 straddles the change
    store.label_range("s1", 12 * S, 14 * S, "rest")  # adjacent same-label pieces are not merged: 12-16 unlabelled
    store.label_range("s1", 14 * S, 16 * S, "rest")
    labels = labels_by_start(store)
    assert [labels[("s1", t * S)] for t in (0, 2, 4, 6, 8, 10, 12)] == ["eat", "eat", "eat", None, "rest", None, None]
    assert labels[("s2", 2 * S)] is None  # another session's annotation does not apply


def test_a_disagreeing_overlap_unlabels_and_a_touching_annotation_does_not(store: WindowStore) -> None:
    store.add(rec("s1", 10))  # [10 s, 14 s)
    assert store.label_range("s1", 0, 20 * S, "eat") == 1
    assert store.label_range("s1", 14 * S, 30 * S, "rest") == 0  # starts where the window ends: no overlap
    assert labels_by_start(store)[("s1", 10 * S)] == "eat"
    store.label_range("s1", 13 * S, 30 * S, "rest")  # now overlaps the window's last second
    assert labels_by_start(store)[("s1", 10 * S)] is None


def test_annotation_before_its_windows_labels_them_on_insert(store: WindowStore) -> None:
    assert store.label_range("s1", 0, 60 * S, "lying-left") == 0
    store.add(rec("s1", 0))
    store.add_many([rec("s1", 2), rec("s1", 58)])  # the last one ends after the annotation
    assert labels_by_start(store) == {("s1", 0): "lying-left", ("s1", 2 * S): "lying-left", ("s1", 58 * S): None}


def test_repeating_an_annotation_changes_nothing(store: WindowStore) -> None:
    store.add(rec("s1", 0))
    assert store.label_range("s1", 0, 10 * S, "eat") == 1
    assert store.label_range("s1", 0, 10 * S, "eat") == 1
    assert store.stats().annotations == 1


# -- features and queries ----------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    vectors=st.lists(
        hnp.arrays(np.float64, 7, elements=st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=5
    )
)
def test_features_round_trip_bit_exact_including_nan_inf_and_signed_zero(vectors):
    with tempfile.TemporaryDirectory() as d, WindowStore(Path(d) / "w.db") as store:
        store.add_many([rec("s1", 2 * i, features=v) for i, v in enumerate(vectors)])
        X, _, _ = store.query("v1", labelled_only=False)
    assert X.dtype == np.float64 and X.flags.writeable
    np.testing.assert_array_equal(X.view(np.uint64), np.stack(vectors).view(np.uint64))


def test_float32_and_integer_vectors_are_stored_as_float64(store: WindowStore) -> None:
    v32 = np.array([0.1, 1e30, -2.5], dtype=np.float32)
    store.add(rec("s1", 0, features=v32))
    store.add(rec("s1", 2, features=np.array([1, 2, 3], dtype=np.int16)))
    X, _, _ = store.query("v1", labelled_only=False)
    np.testing.assert_array_equal(X, np.array([v32.astype(np.float64), [1.0, 2.0, 3.0]]))


def test_query_selects_by_start_in_half_open_range_and_consecutive_ranges_partition(store: WindowStore) -> None:
    store.add_many([rec("s1", t) for t in range(0, 40, 2)] + [rec("s2", t) for t in range(1, 40, 4)])
    store.label_range("s1", 0, 100 * S, "rest")
    store.label_range("s2", 0, 100 * S, "eat")
    X, y, meta = store.query("v1", 10 * S, 20 * S)
    assert list(meta.start_us) == [t * S for t in (10, 12, 13, 14, 16, 17, 18)]  # start in [10 s, 20 s), ordered
    assert list(meta.session_ids) == ["s1", "s1", "s2", "s1", "s1", "s2", "s1"]
    assert list(y) == ["rest", "rest", "eat", "rest", "rest", "eat", "rest"]
    assert list(meta.end_us - meta.start_us) == [4 * S] * 7
    np.testing.assert_array_equal(X[:, 0], meta.start_us / S)  # rows travel with their meta
    cuts = [None, 7 * S, 15 * S, 15 * S + 1, 33 * S, None]
    parts = [store.query("v1", a, b).meta.ids for a, b in zip(cuts[:-1], cuts[1:])]
    everything = np.sort(store.query("v1").meta.ids)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), everything)
    assert len(everything) == 30
    assert store.count("v1", 10 * S, 20 * S) == 7


def test_labelled_only_and_count_filters(store: WindowStore) -> None:
    store.add_many([rec("s1", t) for t in range(0, 20, 2)] + [rec("s1", 0, version="v2", features=np.ones(5))])
    store.label_range("s1", 0, 9 * S, "eat")  # windows 0, 2, 4
    X, y, meta = store.query("v1")
    assert X.shape == (3, 3) and list(y) == ["eat"] * 3
    X, y, _ = store.query("v1", labelled_only=False)
    assert X.shape == (10, 3) and sum(v is None for v in y) == 7
    assert store.count() == 11
    assert store.count("v1") == 10 and store.count("v2") == 1
    assert store.count("v1", labelled_only=True) == 3
    assert store.count(session_id="s1", labelled_only=True) == 4  # the v2 window is labelled too
    assert store.count(session_id="nobody") == 0


def test_empty_query_keeps_the_feature_sets_width(store: WindowStore) -> None:
    store.add(rec("s1", 0))
    X, y, meta = store.query("v1")  # nothing labelled
    assert X.shape == (0, 3) and y.shape == (0,) and meta.ids.shape == (0,)
    assert store.query("unknown-version", labelled_only=False).X.shape == (0, 0)
    assert isinstance(store.query("v1"), QueryResult)


def test_a_changed_vector_length_under_the_same_version_is_refused(tmp_path: Path) -> None:
    with WindowStore(tmp_path / "w.db") as store:
        store.add(rec("s1", 0))
        with pytest.raises(StoreError, match="bump FEATURE_SET_VERSION"):
            store.add(rec("s1", 2, features=np.zeros(4)))
        with pytest.raises(StoreError, match="has 4 features"):  # inside one batch, and nothing of it is stored
            store.add_many([rec("s2", 0, version="v9"), rec("s2", 2, features=np.zeros(4), version="v9")])
        assert store.count() == 1
    with WindowStore(tmp_path / "w.db") as store:  # the length is learned back from the file
        with pytest.raises(StoreError, match="holds 3"):
            store.add(rec("s1", 2, features=np.zeros(4)))
        store.add(rec("s1", 2, features=np.zeros(4), version="v2"))


def test_query_refuses_mixed_lengths_written_behind_its_back(tmp_path: Path) -> None:
    with WindowStore(tmp_path / "w.db") as store:
        store.add(rec("s1", 0))
        with sqlite3.connect(tmp_path / "w.db") as raw:  # e.g. an older tool without the insert check
            raw.execute(
                "INSERT INTO windows (session_id, start_us, end_us, feature_set_version, n_features, features,"
                " inserted_at) VALUES ('s1', 2000000, 6000000, 'v1', 2, ?, 0)",
                (np.zeros(2).tobytes(),),
            )
        with pytest.raises(StoreError, match=r"different lengths \[2, 3\]"):
            store.query("v1", labelled_only=False)
        assert store.query("v1", start_us=0, end_us=1, labelled_only=False).X.shape == (1, 3)


def test_a_duplicate_window_is_ignored(store: WindowStore) -> None:
    first = store.add(rec("s1", 0))
    assert isinstance(first, int)
    assert store.add(rec("s1", 0, features=np.full(3, 9.0))) is None
    assert store.add_many([rec("s1", 0), rec("s1", 2), rec("s1", 2)]) == 1
    assert store.add_many([]) == 0
    X, _, _ = store.query("v1", labelled_only=False)
    np.testing.assert_array_equal(X[:, 0], [0.0, 2.0])  # the first copy is kept
    assert store.add(rec("s1", 0, version="v2")) is not None  # another feature set is another window


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"session_id": ""}, "session_id"),
        ({"feature_set_version": None}, "feature_set_version"),
        ({"start_us": 1.5}, "integer number of microseconds"),
        ({"end_us": True}, "integer number of microseconds"),
        ({"end_us": 0}, "must be after start_us"),
        ({"features": np.zeros((2, 3))}, "1-D"),
        ({"features": np.zeros(0)}, "non-empty"),
        ({"features": np.array(["a"])}, "real vector"),
        ({"features": np.zeros(2, dtype=complex)}, "real vector"),
    ],
)
def test_window_record_validation(kwargs, match) -> None:
    fields = {
        "session_id": "s1",
        "start_us": 0,
        "end_us": 4 * S,
        "features": np.zeros(3),
        "feature_set_version": "v1",
    } | kwargs
    with pytest.raises(ValueError, match=match):
        WindowRecord(**fields)


def test_window_record_normalises_numpy_ints_and_freezes_features() -> None:
    r = WindowRecord("s1", np.int64(5), np.uint32(9), [1, 2], "v1")
    assert type(r.start_us) is int and type(r.end_us) is int
    assert r.features.dtype == np.dtype("<f8") and not r.features.flags.writeable


def test_label_range_validation(store: WindowStore) -> None:
    with pytest.raises(ValueError, match="label"):
        store.label_range("s1", 0, S, "")
    with pytest.raises(ValueError, match="must be after"):
        store.label_range("s1", S, S, "eat")
    with pytest.raises(ValueError, match="session_id"):
        store.label_range("", 0, S, "eat")
    assert store.stats().annotations == 0


# -- stats and retention -----------------------------------------------------------------------


def test_stats_counts_labels_feature_sets_and_file_sizes(store: WindowStore) -> None:
    assert store.stats().windows == 0
    store.add_many([rec("s1", t) for t in range(0, 20, 2)] + [rec("s1", 0, version="v2")])
    store.label_range("s1", 0, 8 * S, "eat")
    store.label_range("s1", 10 * S, 20 * S, "rest")
    st_ = store.stats()
    assert (st_.windows, st_.labelled, st_.annotations) == (11, 8, 2)
    assert st_.by_label == {"eat": 4, "rest": 4} and st_.by_feature_set == {"v1": 10, "v2": 1}
    assert st_.db_bytes > 0 and st_.wal_bytes > 0  # WAL not yet checkpointed into the main file
    assert trigger_counts(store.path) == brute_force_counts(store.path)


def test_max_windows_keeps_the_newest_and_is_checked_every_n_inserts(tmp_path: Path) -> None:
    policy = RetentionPolicy(max_windows=10, check_every=4)
    with WindowStore(tmp_path / "w.db", retention=policy) as store:
        for t in range(13):
            store.add(rec("s1", 2 * t))
        assert store.count() == 11  # checked after inserts 4, 8, 12 (trimmed to 10 there), not after the 13th
    with WindowStore(tmp_path / "w.db", retention=policy) as store:
        _, _, meta = store.query("v1", labelled_only=False)
        assert list(meta.start_us) == [2 * t * S for t in range(3, 13)]
        assert store.stats().windows == 10
        assert store.enforce_retention() == 0


def test_max_windows_trims_a_large_batch_at_once(tmp_path: Path) -> None:
    with WindowStore(tmp_path / "w.db", retention=RetentionPolicy(max_windows=5, check_every=100)) as store:
        store.add_many([rec("s1", 2 * t) for t in range(150)])
        assert store.count() == 5
        assert list(store.query("v1", labelled_only=False).meta.start_us) == [2 * t * S for t in range(145, 150)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_max_age_deletes_by_insertion_wall_time(tmp_path: Path) -> None:
    clock = FakeClock()
    with WindowStore(
        tmp_path / "w.db", retention=RetentionPolicy(max_age_s=3600), clock=clock, monotonic=clock
    ) as store:
        store.add_many([rec("s1", t) for t in (0, 2)])
        clock.now += 1800
        store.add(rec("s1", 4))
        clock.now += 1801  # the first two are now 3601 s old
        assert store.enforce_retention() == 2
        assert list(store.query("v1", labelled_only=False).meta.start_us) == [4 * S]
        clock.now += 3601
        assert store.enforce_retention() == 1 and store.count() == 0


def test_retention_forgets_annotations_that_can_no_longer_label_anything(tmp_path: Path) -> None:
    clock = FakeClock()
    with WindowStore(
        tmp_path / "w.db", retention=RetentionPolicy(max_windows=3, check_every=1000), clock=clock, monotonic=clock
    ) as store:
        store.add_many([rec("old", t) for t in (0, 2)])
        store.label_range("old", 0, 10 * S, "eat")
        clock.now += 1
        store.add_many([rec("s1", t) for t in (0, 2, 4, 6)])
        store.label_range("s1", 0, 2 * S, "rest")  # ends where the oldest surviving window (2 s) starts
        store.label_range("s1", 0, 3 * S, "eat")  # overlaps that window: still matters
        store.label_range("s1", 2 * S, 8 * S, "rest")
        store.label_range("s1", 40 * S, 50 * S, "eat")  # ahead of the stream: kept
        clock.now += 1
        store.label_range("later", 0, 10 * S, "eat")  # session whose windows have not arrived yet: kept
        assert store.enforce_retention() == 3  # "old" fully, s1's window at 0 s
        with sqlite3.connect(store.path) as raw:
            kept = sorted(raw.execute("SELECT session_id, start_us, end_us FROM annotations"))
        assert kept == [("later", 0, 10 * S), ("s1", 0, 3 * S), ("s1", 2 * S, 8 * S), ("s1", 40 * S, 50 * S)]
        store.add(rec("later", 2))
        assert labels_by_start(store)[("later", 2 * S)] == "eat"


@pytest.mark.parametrize(
    "kwargs", [{"max_windows": 0}, {"max_age_s": 0}, {"max_age_s": float("nan")}, {"check_every": 0}]
)
def test_retention_policy_validation(kwargs) -> None:
    with pytest.raises(ValueError, match="RetentionPolicy"):
        RetentionPolicy(**kwargs)


# -- file, schema, lifecycle, threads ---------------------------------------------------------


def test_wal_mode_and_synchronous_normal(store: WindowStore) -> None:
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent, seen by every connection
    assert store._writer.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (per connection)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    WindowStore(tmp_path / "w.db").close()
    with sqlite3.connect(tmp_path / "w.db") as raw:
        raw.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(StoreError, match=f"schema v99, newer than this software's v{store_module.SCHEMA_VERSION}"):
        WindowStore(tmp_path / "w.db")


def test_migrations_run_in_order_on_an_older_file(tmp_path: Path, monkeypatch) -> None:
    with WindowStore(tmp_path / "w.db") as store:
        store.add(rec("s1", 0))
    calls = []

    def add_device_column(c: sqlite3.Connection) -> None:
        calls.append(1)
        c.execute("ALTER TABLE windows ADD COLUMN device TEXT")

    current = store_module.SCHEMA_VERSION
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", current + 2)
    monkeypatch.setattr(
        store_module, "MIGRATIONS", {current: add_device_column, current + 1: lambda c: calls.append(2)}
    )
    with WindowStore(tmp_path / "w.db") as store:
        assert store.count() == 1
    assert calls == [1, 2]
    with sqlite3.connect(tmp_path / "w.db") as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchone() == (current + 2,)
        assert "device" in [r[1] for r in raw.execute("PRAGMA table_info(windows)")]
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", current + 4)
    with pytest.raises(StoreError, match=f"no migration from window-store schema v{current + 2} to v{current + 3}"):
        WindowStore(tmp_path / "w.db")


def test_a_failed_migration_leaves_the_file_untouched(tmp_path: Path, monkeypatch) -> None:
    WindowStore(tmp_path / "w.db").close()

    def broken(c: sqlite3.Connection) -> None:
        c.execute("ALTER TABLE windows ADD COLUMN device TEXT")
        raise RuntimeError("migration bug")

    current = store_module.SCHEMA_VERSION
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", current + 1)
    monkeypatch.setattr(store_module, "MIGRATIONS", {current: broken})
    with pytest.raises(RuntimeError, match="migration bug"):
        WindowStore(tmp_path / "w.db")
    with sqlite3.connect(tmp_path / "w.db") as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchone() == (current,)
        assert "device" not in [r[1] for r in raw.execute("PRAGMA table_info(windows)")]


def test_a_version_1_store_gains_the_live_recognition_tables(tmp_path: Path) -> None:
    """A gateway's store written before live recognition opens, migrates, and keeps its windows."""
    with sqlite3.connect(tmp_path / "v1.db") as raw:
        for statement in store_module._SCHEMA:
            raw.execute(statement)
        raw.execute("INSERT INTO schema_version VALUES (1)")
    with WindowStore(tmp_path / "v1.db") as store:
        store.add(rec("s1", 0))
        store.add_alert("s1", "r", "raised", 0, 10, "m")
        assert store.count() == 1 and store.alerts() == [("s1", "r", "raised", 0, 10, "m")]


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "other.db") as raw:
        raw.execute("CREATE TABLE things (x)")
    with pytest.raises(StoreError, match="not a WheelFed window store"):
        WindowStore(tmp_path / "other.db")
    (tmp_path / "junk.db").write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(StoreError, match="not an SQLite database"):
        WindowStore(tmp_path / "junk.db")


def test_closed_store_refuses_work_and_close_is_idempotent(tmp_path: Path) -> None:
    store = WindowStore(tmp_path / "w.db")
    store.add(rec("s1", 0))
    store.close()
    store.close()
    assert not (tmp_path / "w.db-wal").exists()  # the last connection checkpointed and removed the WAL
    for call in (
        lambda: store.add(rec("s1", 2)),
        lambda: store.query("v1"),
        store.stats,
        lambda: store.label_range("s1", 0, S, "eat"),
    ):
        with pytest.raises(StoreError, match="closed"):
            call()
    with WindowStore(tmp_path / "w.db") as again:
        assert again.count() == 1


def test_readers_in_other_threads_see_consistent_snapshots_while_the_writer_writes(store: WindowStore) -> None:
    store.add(rec("s1", 0))
    stop = threading.Event()
    seen: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def reader(mine: list[int]) -> None:
        try:
            while not stop.is_set():
                X, y, meta = store.query("v1", labelled_only=False)
                assert X.shape == (len(meta.ids), 3) and len(y) == len(meta.ids)
                np.testing.assert_array_equal(X[:, 0], meta.start_us / S)
                assert store.stats().windows >= len(meta.ids)
                mine.append(len(meta.ids))
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(mine,)) for mine in seen]
    for t in threads:
        t.start()
    for i in range(1, 300):
        store.add(rec("s1", 2 * i))
        if i % 50 == 0:
            store.label_range("s1", 0, 4 * i * S, "rest")
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    for mine in seen:
        assert len(mine) > 5 and mine == sorted(mine) and mine[-1] <= 300  # each reader only ever sees growth
    assert store.count() == 300


# -- kill -9 -----------------------------------------------------------------------------------


def _reported(progress: Path) -> list[int]:
    text = progress.read_text()
    return [int(line) for line in text.split("\n")[:-1]]  # only whole lines


def _check_after_crash(db: Path, last_reported: int) -> tuple[int, int]:
    """Everything reported as committed is there (modulo retention of the oldest), nothing else broke."""
    with sqlite3.connect(db) as raw:  # opening recovers the hot WAL
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = raw.execute("SELECT session_id, start_us, end_us, features, label FROM windows ORDER BY id").fetchall()
        anns = [Ann(*r) for r in raw.execute("SELECT session_id, start_us, end_us, label FROM annotations")]
    idx = [start // crash.STEP_US for _, start, _, _, _ in rows]
    assert idx == list(range(idx[0], idx[-1] + 1)), "a hole: a committed window vanished"
    assert idx[-1] in (last_reported, last_reported + 1), (idx[-1], last_reported)  # at most the in-flight one
    for (session, start, end, blob, label), i in zip(rows, idx):
        expected = crash.window(i)
        assert (session, end) == (expected.session_id, expected.end_us)
        assert blob == expected.features.tobytes()
        assert label == reference_label(session, start, end, anns)
    assert trigger_counts(db) == brute_force_counts(db)
    return idx[-1], len(rows)


def test_survives_kill_9_of_the_writer_at_random_moments(tmp_path: Path) -> None:
    db, progress = tmp_path / "w.db", tmp_path / "progress"
    rng = random.Random(20240603)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first, hot_wals = 0, 0
    for _ in range(6):
        progress.write_text("")
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.edge_client.store_crash_writer", str(db), str(progress), str(first)],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while not progress.read_text() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
        time.sleep(rng.uniform(0.02, 0.5))
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
        child.stderr.close()
        hot_wals += (tmp_path / "w.db-wal").exists() and (tmp_path / "w.db-wal").stat().st_size > 0
        reported = _reported(progress)
        assert reported and reported[0] == first
        last, n = _check_after_crash(db, reported[-1])
        first = last + 1
    assert hot_wals == 6  # every kill left an uncheckpointed WAL to recover from
    with WindowStore(db, retention=crash.RETENTION) as store:  # and the store itself opens and carries on
        kept = min(n, crash.RETENTION.max_windows)  # opening applies retention
        assert store.stats().windows == kept
        store.add(crash.window(first))
        assert store.count() == kept + 1


class SteppedWallClock:
    """A gateway's wall clock that NTP (or a Pi without a battery clock) steps, and the monotonic
    clock beside it that only moves forward with real time."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_700_000_000.0, 50.0

    def elapse(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def test_wall_clock_steps_neither_expire_windows_early_nor_keep_them_forever(tmp_path: Path) -> None:
    t = SteppedWallClock()
    policy = RetentionPolicy(max_age_s=86_400)
    with WindowStore(tmp_path / "w.db", retention=policy, clock=lambda: t.wall, monotonic=lambda: t.mono) as store:
        store.add(rec("s1", 0))  # real time 0
        store.label_range("s1", 0, 4 * S, "push")
        t.elapse(1000)
        t.wall += 365 * 86_400  # NTP steps the clock a year ahead
        store.add(rec("s1", 2))  # real time 1000
        assert store.enforce_retention() == 0 and store.count(labelled_only=True) == 1  # nothing is a year old
        t.elapse(1000)
        t.wall -= 2 * 365 * 86_400  # ... and a year behind where it started
        store.add(rec("s1", 4))  # real time 2000
        t.elapse(84_000)
        assert store.enforce_retention() == 0 and store.count() == 3
        t.elapse(401)  # a day of real time since the first window: it goes, the others stay
        assert store.enforce_retention() == 1 and store.count() == 2
    with sqlite3.connect(tmp_path / "w.db") as c:
        inserted = [r[0] for r in c.execute("SELECT inserted_at FROM windows ORDER BY start_us")]
    assert inserted == sorted(inserted)  # insertion times never go backwards
    # A restart with the wall clock still a year behind: times go on from the latest insert.
    with WindowStore(tmp_path / "w.db", retention=policy, clock=lambda: t.wall, monotonic=lambda: t.mono) as store:
        store.add(rec("s1", 6))
        assert store.count() == 3
    with sqlite3.connect(tmp_path / "w.db") as c:
        (last,) = c.execute("SELECT max(inserted_at) FROM windows WHERE start_us = ?", (6 * S,)).fetchone()
    assert last >= max(inserted)
