"""FedSCS-XGB's client half on its own: what a gateway computes and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from edge_client.algorithms.fedscs_xgb import FedSCSXGBClient
from edge_client.dispatcher import RequestRejected
from edge_client.training_data import ClientData, class_ids, data_summary, label_strings, snapshot
from shared.model import TreeBuilder, TreeEnsemble
from shared.objectives import Softmax
from shared.protocol.envelope import Message
from shared.protocol.messages.fedscs_xgb import (
    ModelDelta,
    XgbAtomRequest,
    XgbSketchRequest,
    XgbTask,
)
from shared.sketches import bin_ids, summaries_from_arrays
from shared.protocol.schema import to_wire

CLASSES = ("lie", "push", "sit")


def data(n: int = 60, d: int = 3, seed: int = 0) -> ClientData:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[3, 1] = np.nan
    y = np.array(CLASSES)[rng.integers(0, 3, n)]
    return ClientData("gw-1", X, y, feature_names=("a", "b", "c"), feature_set_version="fs-1")


def task(base=np.zeros(3), d: int = 3) -> XgbTask:
    return XgbTask("softmax", "fs-1", d, np.asarray(base, dtype=float), CLASSES)


def request(body, job: str = "job-1") -> Message:
    return Message.create(body, sender="aggregator", job=job, round=1)


def stump_model(threshold: float = 0.0, leaves=(0.5, -0.5)) -> TreeEnsemble:
    trees = []
    for _k in range(3):
        b = TreeBuilder(0.0)
        left, right = b.split(0, 0, threshold)
        b.set_value(left, leaves[0])
        b.set_value(right, leaves[1])
        trees.append(b.build())
    return TreeEnsemble(
        trees=tuple(trees),
        kind="boosted",
        link="softmax",
        n_outputs=3,
        feature_names=("a", "b", "c"),
        tree_output=np.arange(3, dtype=np.int32),
        classes=CLASSES,
    )


def atoms(client: FedSCSXGBClient, delta: ModelDelta, edges, job: str = "job-1"):
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in edges])]).astype(np.int64)
    body = XgbAtomRequest(task(), delta, np.concatenate(edges).astype(np.float32), offsets)
    return client.on_atoms(request(body, job))


EDGES = [np.array([-0.5, 0.0, 0.5], np.float32)] * 3


def test_data_summary_describes_the_data_with_additive_statistics_only() -> None:
    reply = data_summary(snapshot(data(), "fs-1"), regression=False)
    assert reply.n_samples == 60 and reply.n_features == 3 and reply.feature_names == ("a", "b", "c")
    assert set(reply.labels) <= set(CLASSES) and int(reply.label_counts.sum()) == 60
    assert not reply.integer_labels
    assert reply.moments.shape == (3, 3) and reply.moments[0, 1] == 59  # one NaN in feature 1
    np.testing.assert_array_equal(reply.minimum, np.nanmin(data().X, axis=0))
    np.testing.assert_array_equal(reply.maximum, np.nanmax(data().X, axis=0))


def test_atoms_sum_the_per_sample_gradients_by_bin_vector() -> None:
    d = data()
    client = FedSCSXGBClient(d)
    reply = atoms(client, ModelDelta(), EDGES)
    X32 = d.X.astype(np.float32)
    g, h = Softmax(3).gradients(np.zeros((60, 3)), class_ids(d.y, CLASSES))
    assert reply.n_trees == 0 and reply.n_samples == 60 and int(reply.counts.sum()) == 60
    np.testing.assert_allclose(reply.grad.sum(axis=0), g.sum(axis=0), atol=1e-12)
    np.testing.assert_allclose(reply.hess.sum(axis=0), h.sum(axis=0), atol=1e-12)
    keys = bin_ids(X32, EDGES)
    assert reply.keys.dtype == keys.dtype == np.uint8
    assert len(reply.keys) == len(np.unique(keys, axis=0))  # one atom per distinct bin vector
    row = keys[0]
    atom = np.flatnonzero((reply.keys == row).all(axis=1))[0]
    members = (keys == row).all(axis=1)
    np.testing.assert_allclose(reply.grad[atom], g[members].sum(axis=0), atol=1e-12)
    assert reply.loss_sum == pytest.approx(60 * np.log(3))


def test_sketch_weights_are_the_hessian_sums() -> None:
    d = data()
    reply = FedSCSXGBClient(d).on_sketch(request(XgbSketchRequest(task(), ModelDelta(), "summary", 16)))
    summaries = summaries_from_arrays(to_wire(reply.summary))
    _, h = Softmax(3).gradients(np.zeros((60, 3)), class_ids(d.y, CLASSES))
    w = h.sum(axis=1)
    assert summaries[0].total_weight == pytest.approx(w.sum())
    assert summaries[1].n_missing == 1 and summaries[1].missing_weight == pytest.approx(w[3])
    assert summaries[0].m == 16


def test_ddsketch_reply_uses_the_servers_standardization() -> None:
    body = XgbSketchRequest(task(), ModelDelta(), "ddsketch", 16, 0.02, centers=np.zeros(3), scales=np.ones(3))
    reply = FedSCSXGBClient(data()).on_sketch(request(body))
    assert reply.summary is None and reply.ddsketch.alpha == 0.02 and reply.ddsketch.count.tolist() == [60, 59, 60]


def test_model_deltas_are_applied_once() -> None:
    d = data()
    client = FedSCSXGBClient(d)
    model = stump_model()
    delta = ModelDelta(0, model.to_cbor())
    first = atoms(client, delta, EDGES)
    again = atoms(client, delta, EDGES)  # a re-sent request with the same delta
    assert first.n_trees == again.n_trees == 3
    np.testing.assert_array_equal(first.grad, again.grad)
    state = client._jobs["job-1"]
    np.testing.assert_allclose(state.margins, model.predict_margin(d.X.astype(np.float32)))
    # a delta that overlaps what the client has: only the new trees are added
    bigger = TreeEnsemble(
        trees=model.trees * 2,
        kind="boosted",
        link="softmax",
        n_outputs=3,
        feature_names=model.feature_names,
        tree_output=np.tile(np.arange(3, dtype=np.int32), 2),
        classes=CLASSES,
    )
    assert atoms(client, ModelDelta(0, bigger.to_cbor()), EDGES).n_trees == 6
    np.testing.assert_allclose(state.margins, bigger.predict_margin(d.X.astype(np.float32)))


def test_a_delta_starting_past_the_clients_trees_asks_for_a_resync() -> None:
    client = FedSCSXGBClient(data())
    with pytest.raises(RequestRejected) as err:
        atoms(client, ModelDelta(3, stump_model().to_cbor()), EDGES)
    assert err.value.code == "resync" and "holds 0 trees" in str(err.value)


def test_bad_model_deltas_are_refused() -> None:
    client = FedSCSXGBClient(data())
    for garbage in (b"\xa1\x61x\x01", b"\xff\x00", stump_model().to_cbor()[:-7]):
        with pytest.raises(RequestRejected) as err:
            atoms(client, ModelDelta(0, garbage), EDGES)
        assert err.value.code == "bad_model"
    one_output = TreeEnsemble(
        trees=stump_model().trees[:1], kind="boosted", link="identity", n_outputs=1, feature_names=("a", "b", "c")
    )
    with pytest.raises(RequestRejected, match="does not fit this job"):
        atoms(client, ModelDelta(0, one_output.to_cbor()), EDGES)


def test_wrong_feature_set_count_or_no_data_is_refused_with_a_code() -> None:
    client = FedSCSXGBClient(data())
    with pytest.raises(RequestRejected) as err:
        snapshot(data(), "fs-2")
    assert err.value.code == "feature_set_mismatch" and "fs-2" in str(err.value)
    assert err.value.feature_sets == ("fs-1",)
    with pytest.raises(RequestRejected) as err:
        client.on_sketch(request(XgbSketchRequest(task(d=4), ModelDelta(), "summary", 8)))
    assert err.value.code == "feature_mismatch"
    with pytest.raises(RequestRejected, match="no labelled samples"):
        snapshot(ClientData("gw-2", np.zeros((0, 3)), np.zeros(0)), "")


def test_labels_outside_the_job_vocabulary_are_left_out() -> None:
    d = data()
    y = d.y.copy()
    y[:5] = "unknown"
    client = FedSCSXGBClient(ClientData("gw-1", d.X, y))
    reply = atoms(client, ModelDelta(), EDGES)
    assert reply.n_samples == 55


def test_label_strings_and_class_ids() -> None:
    assert label_strings(np.array([2, 0, 1]))[1] is True
    assert label_strings(np.array([1.0, 2.0]))[0].tolist() == ["1", "2"]
    assert label_strings(np.array([1.5]))[1] is False
    np.testing.assert_array_equal(class_ids(np.array([2, 0, 7]), ("0", "1", "2")), [2, 0, -1])


def test_job_state_is_bounded() -> None:
    client = FedSCSXGBClient(data(), max_jobs=2)
    for job in ("a", "b", "c"):
        atoms(client, ModelDelta(), EDGES, job=job)
    assert list(client._jobs) == ["b", "c"]


def test_summaries_never_list_every_raw_value() -> None:
    from edge_client.algorithms.fedscs_xgb import summary_points

    assert summary_points(256, 150) == 75 and summary_points(16, 60) == 16 and summary_points(8, 1) == 1
    small = ClientData(
        "gw-1",
        np.arange(10.0)[:, None] * np.ones((1, 3)),
        np.array(CLASSES)[np.arange(10) % 3],
        feature_set_version="fs-1",
    )
    reply = FedSCSXGBClient(small).on_sketch(request(XgbSketchRequest(task(), ModelDelta(), "summary", 64)))
    assert reply.summary.points.shape == (3, 6) and reply.summary.points.dtype == np.float32
