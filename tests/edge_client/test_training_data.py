"""Training data sources: the held-out tail split, data summaries, model inputs."""

from __future__ import annotations

import numpy as np
import pytest

from edge_client.store import WindowRecord, WindowStore
from edge_client.training_data import ClientData, NoTrainingData, StoreTrainingData, data_summary, tail_split
from shared.model import TreeBuilder, TreeEnsemble, model_inputs


def test_tail_split_holds_out_the_end_of_every_session_after_a_gap() -> None:
    sessions = np.array(["a"] * 10 + ["b"] * 5)
    train, test = tail_split(sessions, 0.2, 1)
    np.testing.assert_array_equal(test, [8, 9, 14])
    np.testing.assert_array_equal(train, [0, 1, 2, 3, 4, 5, 6, 10, 11, 12])
    train, test = tail_split(np.array(["a"] * 3), 0.1, 1)
    assert test.size == 0 and train.size == 3


def test_store_training_data_trains_on_the_head_and_holds_out_the_tail(tmp_path) -> None:
    with WindowStore(tmp_path / "w.db") as store:
        for i in range(20):
            store.add(WindowRecord("s", i * 10, i * 10 + 10, np.array([float(i), 1.0]), "fs"))
            store.label_range("s", i * 10, i * 10 + 10, "sit" if i % 2 else "lie")
        source = StoreTrainingData(store, ("x", "one"), holdout_fraction=0.25)
        train, test = source.labelled("fs"), source.holdout("fs")
        assert train.X[:, 0].tolist() == list(range(14)) and test.X[:, 0].tolist() == [15, 16, 17, 18, 19]
        assert train.feature_names == ("x", "one")
        with pytest.raises(NoTrainingData, match="holdout-fraction"):
            StoreTrainingData(store).holdout("fs")
        with pytest.raises(NoTrainingData, match="no labelled windows"):
            source.labelled("other")
    with pytest.raises(ValueError):
        StoreTrainingData(None, holdout_fraction=1.0)  # type: ignore[arg-type]


def test_client_data_checks_shapes_and_feature_sets() -> None:
    with pytest.raises(ValueError, match="shape"):
        ClientData("c", np.zeros((3, 2)), np.zeros(4))
    data = ClientData("c", np.zeros((3, 2)), np.zeros(3), feature_set_version="fs")
    with pytest.raises(NoTrainingData, match="fs-2"):
        data.labelled("fs-2")
    with pytest.raises(NoTrainingData, match="no held-out"):
        data.holdout("fs")


def test_data_summary_for_regression_and_all_missing_features() -> None:
    X = np.array([[1.0, np.nan], [3.0, np.nan]])
    s = data_summary(ClientData("c", X, np.array([1.5, 2.5])).labelled(""), regression=True)
    assert s.target_sum == 4.0 and s.target_sum_squares == 1.5**2 + 2.5**2
    assert s.minimum.tolist() == [1.0, 0.0] and s.maximum.tolist() == [3.0, 0.0] and s.moments[0, 1] == 0


def test_model_inputs_round_to_float32_and_append_the_client() -> None:
    b = TreeBuilder(0.0)
    b.split(0, 0, 0.1)
    boosted = TreeEnsemble(trees=(b.build(),), kind="boosted", link="identity", n_outputs=1, feature_names=("x",))
    X = np.array([[0.1 - 1e-12]])  # float32 rounding moves it onto the threshold
    assert model_inputs(boosted, X)[0, 0] == np.float32(0.1)
    f = TreeBuilder(np.zeros(1))
    f.split(0, 1, categories=[2])
    forest = TreeEnsemble(
        trees=(f.build(),),
        kind="forest",
        link="identity",
        n_outputs=1,
        feature_names=("x", "client"),
        metadata={"client_splits": 1, "clients": "a,b,c"},
    )
    np.testing.assert_array_equal(model_inputs(forest, X, 2), [[np.float32(0.1), 2.0]])
    assert np.isnan(model_inputs(forest, X, -1)[0, 1])
