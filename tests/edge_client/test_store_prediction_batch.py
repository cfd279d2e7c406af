"""``WindowStore.add_predictions``: a batch of predictions and its mark are one transaction."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from edge_client.store import PredictionBatch, PredictionMark, WindowStore


def _batch(n: int, first_id: int = 1) -> PredictionBatch:
    probs = np.column_stack([np.linspace(0.1, 0.9, n), 1 - np.linspace(0.1, 0.9, n)])
    return PredictionBatch(
        "vf:v1",
        ["s1"] * n,
        np.arange(n) * 2_000_000 + 4_000_000,
        np.arange(first_id, first_id + n),
        np.where(probs[:, 0] > 0.5, "sit", "push").tolist(),
        probs.max(axis=1),
        probs,
    )


def test_a_failure_after_some_inserts_keeps_no_prediction_and_no_mark(tmp_path):
    with WindowStore(tmp_path / "w.db") as store:
        store._writer.execute("""CREATE TEMP TRIGGER fail_after_7 BEFORE INSERT ON predictions
            WHEN (SELECT count(*) FROM predictions) >= 7 BEGIN SELECT RAISE(ABORT, 'injected'); END""")
        with pytest.raises(sqlite3.IntegrityError, match="injected"):
            store.add_predictions(_batch(20), PredictionMark("vf", 38_000_000))
        assert store.predictions() == [] and store.prediction_mark("vf") is None
        store._writer.execute("DROP TRIGGER temp.fail_after_7")
        store.add_predictions(_batch(20), PredictionMark("vf", 38_000_000))
        got = store.predictions()
        assert [p.window_id for p in got] == list(range(1, 21)) and store.prediction_mark("vf") == 38_000_000
        np.testing.assert_allclose(np.stack([p.probabilities for p in got]), _batch(20).probabilities, rtol=1e-7)
        assert [p.label for p in got] == _batch(20).labels


def test_the_mark_never_goes_back_and_an_empty_batch_may_move_it(tmp_path):
    with WindowStore(tmp_path / "w.db") as store:
        store.add_predictions(_batch(3), PredictionMark("vf", 10))
        store.add_predictions(_batch(2, first_id=4), PredictionMark("vf", 5))
        assert store.prediction_mark("vf") == 10 and len(store.predictions()) == 5
        store.add_predictions(_batch(0), PredictionMark("vf", 12))
        assert store.prediction_mark("vf") == 12 and store.prediction_mark("other") is None


def test_a_batch_with_ragged_columns_is_one_clear_error():
    with pytest.raises(ValueError, match="a prediction batch needs 3 of every column"):
        PredictionBatch("m:v1", ["s"] * 3, np.arange(3), np.arange(2), ["a"] * 3, np.ones(3), np.ones((3, 2)))


def test_a_version_2_store_gains_the_marks_table(tmp_path):
    path = tmp_path / "w.db"
    WindowStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("DROP TABLE prediction_marks")
        raw.execute("UPDATE schema_version SET version = 2")
    with WindowStore(path) as store:
        store.add_predictions(_batch(1), PredictionMark("vf", 1))
        assert store.prediction_mark("vf") == 1
