"""Vertical Federated Forest: the oracles.

* lossless: with the same row and feature draws, every tree equals the tree a centralized,
  independently written CART (``_reference_forest`` below: brute force per node on the joined
  data) grows -- splits, thresholds, leaf values -- and so do the predictions; a single tree on
  all rows and features equals scikit-learn's ``DecisionTreeClassifier``/``Regressor``;
* one-round prediction (Alg. 3-4, Proposition 1) == classical per-node prediction, every sample;
* privacy: no message a party receives holds another party's feature values or thresholds; no
  message the master receives holds a feature value, a threshold or a label in the clear;
* a party dropping out fails the job with a clear error and leaves nothing kept; a party
  missing at prediction is a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from aggregator import simulate
from aggregator.algorithms import VerticalFederatedForest
from aggregator.algorithms.vertical_forest import (
    choose_owners,
    draw_features,
    draw_rows,
    parties_for_simulation,
)
from aggregator.algorithms.vertical_forest import predict_on_parties
from aggregator.jobs import FederatedJob, JobSettings, TrainingError
from aggregator.simulate import Simulation
from edge_client.training_data import PartyData
from shared.protocol.codec import dumps_value
from shared.protocol.schema import to_wire
from shared.signing import SigningKey
from shared.protocol.topics import TopicLayout
from shared.vertical_party_key import PartyKey
from shared.vertical_splits import feature_codes

EPS = float(np.finfo(np.float64).eps)
KEY = bytes(range(32))  # the simulated parties' key: the test reads their feature codes with it


def _simulate(cfg: VerticalFederatedForest, parties, seed: int = 0, key: bytes = KEY):
    """``simulate`` with a party key the test knows."""
    return cfg.run_in(Simulation(parties_for_simulation(parties, party_key=key)), seed=seed)


def _decoder(model, key: bytes = KEY) -> np.ndarray:
    """Encoded feature id (what the master knows) -> column of the joined data: each party's codes
    (``feature_codes``, keyed by the party key and the job) inverted and offset."""
    offsets = np.concatenate([[0], np.cumsum(model.n_features)])
    return np.concatenate(
        [
            offsets[i] + np.argsort(feature_codes(PartyKey.from_secret(key), model.metadata.job, i, d))
            for i, d in enumerate(model.n_features)
        ]
    ).astype(np.int64)


# -- the independent reference: brute-force CART on the joined data --------------------------------


def _impurity(y: np.ndarray, w: np.ndarray, criterion: str, n_classes: int) -> float:
    if criterion == "mse":
        mean = np.average(y, weights=w)
        return float(np.average((y - mean) ** 2, weights=w))
    p = np.bincount(y, weights=w, minlength=n_classes) / w.sum()
    if criterion == "gini":
        return float(1.0 - np.sum(p * p))
    p = p[p > 0]
    return float(-np.sum(p * np.log2(p)))


def _reference_tree(X, y, cfg: VerticalFederatedForest, seed: int, t: int, n_classes: int, decode: np.ndarray) -> dict:
    """heap id -> ("split", feature, threshold) or ("leaf", value vector). The master's feature draws
    are of encoded ids: ``decode`` turns them into the joined data's columns."""
    crit = cfg.split_criterion
    n, d = X.shape
    k = cfg.n_drawn(d)
    w = draw_rows(seed, t, n, cfg.bootstrap).astype(np.float64)
    root_w = w.sum()
    out: dict[int, tuple] = {}

    def leaf(node, rows):
        if crit == "mse":
            out[node] = ("leaf", np.array([np.average(y[rows], weights=w[rows])]))
        else:
            counts = np.bincount(y[rows], weights=w[rows], minlength=n_classes)
            out[node] = ("leaf", counts / counts.sum())

    def grow(node, rows, depth):
        imp = _impurity(y[rows], w[rows], crit, n_classes)
        if (
            depth >= cfg.max_depth
            or rows.size < cfg.min_samples_split
            or rows.size < 2 * cfg.min_samples_leaf
            or imp <= EPS
        ):
            return leaf(node, rows)
        w_node = w[rows].sum()
        candidates = []
        for f in np.sort(decode[draw_features(seed, t, node, d, k)]).tolist():
            xs = X[rows, f]
            values = np.unique(xs)
            for a, b in zip(values[:-1], values[1:]):
                if not b > a + 1e-7:
                    continue
                thr = a / 2.0 + b / 2.0
                if thr == b:
                    thr = a
                left, right = rows[xs <= thr], rows[xs > thr]
                if left.size < cfg.min_samples_leaf or right.size < cfg.min_samples_leaf:
                    continue
                wl, wr = w[left].sum(), w[right].sum()
                decrease = (
                    imp
                    - (
                        wl * _impurity(y[left], w[left], crit, n_classes)
                        + wr * _impurity(y[right], w[right], crit, n_classes)
                    )
                    / w_node
                )
                candidates.append((w_node / root_w * decrease, f, thr, left, right))
        if not candidates:
            return leaf(node, rows)
        best = max(c[0] for c in candidates)
        gain, f, thr, left, right = next(c for c in candidates if c[0] >= best - 1e-10 * max(1.0, abs(best)))
        if gain + EPS < cfg.min_impurity_decrease:
            return leaf(node, rows)
        out[node] = ("split", f, thr)
        grow(2 * node + 1, left, depth + 1)
        grow(2 * node + 2, right, depth + 1)

    grow(0, np.flatnonzero(w > 0), 0)
    return out


def _reference_predict(trees: list[dict], X: np.ndarray) -> np.ndarray:
    total = 0.0
    for tree in trees:
        values = []
        for x in X:
            node = 0
            while tree[node][0] == "split":
                node = 2 * node + 1 if x[tree[node][1]] <= tree[node][2] else 2 * node + 2
            values.append(tree[node][1])
        total = total + np.array(values)
    return total / len(trees)


def _federated_tree(model, t: int, decode: np.ndarray) -> dict:
    """The same dict from the master's tree and the owners' partial trees (the master's encoded
    feature ids decoded: the owner's partial tree must hold that column)."""
    tree = model.trees[t]
    offsets = np.concatenate([[0], np.cumsum(model.n_features)])
    out: dict[int, tuple] = {}
    for node, owner, feature in zip(tree.split_nodes.tolist(), tree.owner.tolist(), tree.feature.tolist()):
        partial = model.partial[owner][t]
        at = int(np.searchsorted(partial.split_nodes, node))
        column = int(decode[feature])
        assert partial.owned[at] and partial.feature[at] == column - offsets[owner]
        out[node] = ("split", column, float(partial.threshold[at]))
    for leaf, value in zip(tree.leaves.tolist(), tree.values):
        out[leaf] = ("leaf", value)
    return out


def _assert_same_tree(fed: dict, ref: dict) -> None:
    assert sorted(fed) == sorted(ref)
    for node in ref:
        assert fed[node][0] == ref[node][0], node
        if ref[node][0] == "split":
            assert fed[node][1:] == ref[node][1:], (node, fed[node], ref[node])
        else:
            np.testing.assert_allclose(fed[node][1], ref[node][1], rtol=1e-12, atol=1e-12)


def _data(n=240, d=7, seed=0, task="classification", n_classes=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32).astype(np.float64)
    score = X[:, 0] - 0.8 * X[:, d - 1] + 0.5 * X[:, 2] * X[:, 3] + 0.3 * rng.normal(size=n)
    if task == "regression":
        return X, score
    return X, np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))


@pytest.mark.parametrize("offset", [1e5, 1e7, 1e9])
def test_regression_trees_equal_the_reference_when_the_targets_are_far_from_zero(offset):
    """Targets of spread ~1 around a large mean: sums of y^2 would lose every digit of the
    variance (gain) at 1e7; the party centres each node's targets on the node's mean, so the
    trees stay the two-pass reference's."""
    X, y = _data(task="regression", seed=4)
    y = y + offset
    cfg = VerticalFederatedForest(n_trees=3, max_depth=5, task="regression", min_samples_leaf=2)
    model = _simulate(cfg, _parties(_split(X, (3, 4)), y, holder=1), seed=3)
    decode = _decoder(model)
    for t in range(cfg.n_trees):
        _assert_same_tree(_federated_tree(model, t, decode), _reference_tree(X, y, cfg, 3, t, 0, decode))
    assert sum(len(m.split_nodes) for m in model.trees) > 10


def _split(X, widths):
    edges = np.concatenate([[0], np.cumsum(widths)])
    return [X[:, a:b] for a, b in zip(edges[:-1], edges[1:])]


def _parties(blocks, y, holder=0):
    return [(b, y if i == holder else None) for i, b in enumerate(blocks)]


# -- lossless ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task,criterion,widths,holder,kwargs",
    [
        ("classification", "gini", (3, 4), 0, dict(n_trees=4, max_depth=5)),
        (
            "classification",
            "entropy",
            (2, 2, 1, 2),
            2,
            dict(n_trees=3, max_depth=6, min_samples_leaf=3, max_features=0.5),
        ),
        (
            "classification",
            "gini",
            (4, 3),
            1,
            dict(n_trees=3, max_depth=7, min_samples_split=10, min_impurity_decrease=0.01, max_features=None),
        ),
        ("regression", "mse", (3, 4), 1, dict(n_trees=3, max_depth=5, min_samples_leaf=2, max_features="sqrt")),
        (
            "regression",
            "mse",
            (1, 3, 3),
            0,
            dict(n_trees=2, max_depth=6, bootstrap=False, max_features=3, min_impurity_decrease=0.001),
        ),
    ],
)
def test_trees_equal_a_centralized_reference_grown_with_the_same_draws(task, criterion, widths, holder, kwargs):
    X, y = _data(task=task, seed=len(widths))
    cfg = VerticalFederatedForest(task=task, criterion=criterion, **kwargs)
    blocks = _split(X, widths)
    model = _simulate(cfg, _parties(blocks, y, holder), seed=7)
    assert model.metadata.label_holder == f"party-{holder:03d}"
    n_classes = 0 if task == "regression" else 3
    decode = _decoder(model)
    ref = [_reference_tree(X, y, cfg, 7, t, n_classes, decode) for t in range(cfg.n_trees)]
    for t in range(cfg.n_trees):
        _assert_same_tree(_federated_tree(model, t, decode), ref[t])
    assert sum(len(m.split_nodes) for m in model.trees) > 10 * cfg.n_trees // 3  # trees worth comparing
    X_test, _ = _data(n=150, task=task, seed=99)
    expected = _reference_predict(ref, X_test)
    if task == "regression":
        np.testing.assert_allclose(model.predict(_split(X_test, widths)), expected[:, 0], rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(model.predict_proba(_split(X_test, widths)), expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(model.predict(_split(X_test, widths)), np.argmax(expected, axis=1))


def _sklearn_as_heap(est) -> dict:
    tree, out = est.tree_, {}
    stack = [(0, 0)]
    while stack:
        sk, heap = stack.pop()
        if tree.children_left[sk] == -1:
            out[heap] = ("leaf",)
            continue
        out[heap] = ("split", int(tree.feature[sk]), float(tree.threshold[sk]))
        stack += [(tree.children_left[sk], 2 * heap + 1), (tree.children_right[sk], 2 * heap + 2)]
    return out


@pytest.mark.parametrize(
    "task,criterion", [("classification", "gini"), ("classification", "entropy"), ("regression", "mse")]
)
def test_one_tree_on_all_rows_and_features_equals_scikit_learn(task, criterion):
    X, y = _data(n=400, task=task, seed=3)
    kwargs = dict(max_depth=5, min_samples_leaf=4, min_samples_split=9)
    cfg = VerticalFederatedForest(
        n_trees=1, bootstrap=False, max_features=None, task=task, criterion=criterion, **kwargs
    )
    model = _simulate(cfg, _parties(_split(X, (3, 2, 2)), y, holder=1))
    fed = {
        node: value[:1] if value[0] == "leaf" else value
        for node, value in _federated_tree(model, 0, _decoder(model)).items()
    }
    # scikit-learn breaks exact ties between features by its random feature order (random_state),
    # we by the lower feature: one of its orders must give our tree exactly
    for state in range(10):
        est = (
            DecisionTreeRegressor(criterion="squared_error", random_state=state, **kwargs)
            if task == "regression"
            else DecisionTreeClassifier(criterion=criterion, random_state=state, **kwargs)
        ).fit(X, y)
        if _sklearn_as_heap(est) == fed:
            break
    else:
        assert fed == _sklearn_as_heap(est)
    X_test, _ = _data(n=300, task=task, seed=11)
    blocks = _split(X_test, (3, 2, 2))
    if task == "regression":
        np.testing.assert_allclose(model.predict(blocks), est.predict(X_test), rtol=1e-10, atol=1e-10)
    else:
        np.testing.assert_allclose(model.predict_proba(blocks), est.predict_proba(X_test), atol=1e-12)
        np.testing.assert_array_equal(model.predict(blocks), est.predict(X_test))


def test_the_master_sees_feature_ids_keyed_by_the_party_key_and_the_job_and_the_model_is_unchanged():
    """The master's feature ids are each party's columns permuted under the party key and the
    job (``feature_codes``): another key gives other ids to the same splits, the same forest."""
    X, y = _data(n=200, seed=12)
    X = np.column_stack([X, X[:, :2] * 0.5 + 1.0])  # 9 columns: wide enough for permutations to differ
    blocks = _split(X, (4, 5))
    cfg = VerticalFederatedForest(n_trees=3, max_depth=4, max_features=None)
    one = _simulate(cfg, _parties(blocks, y), seed=5, key=KEY)
    other = _simulate(cfg, _parties(blocks, y), seed=5, key=b"another person's key, 32 bytes!")
    ids = [np.concatenate([t.feature for t in m.trees]) for m in (one, other)]
    assert ids[0].size > 5 and (ids[0] != ids[1]).any()  # the master's ids depend on the key ...
    columns = [_decoder(one)[ids[0]], _decoder(other, b"another person's key, 32 bytes!")[ids[1]]]
    np.testing.assert_array_equal(columns[0], columns[1])  # ... the columns they stand for do not
    assert (ids[0] != columns[0]).any()  # the ids are not the column numbers
    for a, b in zip(one.trees, other.trees):
        np.testing.assert_array_equal(a.split_nodes, b.split_nodes)
        np.testing.assert_array_equal(a.owner, b.owner)
        np.testing.assert_array_equal(a.values, b.values)
    X_test, _ = _data(n=100, seed=13)
    test = _split(np.column_stack([X_test, X_test[:, :2] * 0.5 + 1.0]), (4, 5))
    np.testing.assert_array_equal(one.predict_proba(test), other.predict_proba(test))
    # and in another job under the same key the same columns get other ids
    again = cfg.run_in(
        Simulation(parties_for_simulation(_parties(blocks, y), party_key=KEY)), seed=5, job_id="another-job"
    )
    assert (np.concatenate([t.feature for t in again.trees]) != ids[0]).any()
    np.testing.assert_array_equal(_decoder(again)[np.concatenate([t.feature for t in again.trees])], columns[0])
    # simulate() derives its parties' key from the seed: the same seed, the same forest
    twice = [simulate(cfg, _parties(blocks, y), seed=5) for _ in range(2)]
    np.testing.assert_array_equal(*(np.concatenate([t.feature for t in m.trees]) for m in twice))


# -- one-round prediction ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed,widths,depth", [(0, (3, 4), 3), (1, (2, 2, 3), 8), (2, (1, 1, 1, 1, 3), 12)])
def test_one_round_prediction_equals_classical_prediction_on_every_sample(seed, widths, depth):
    X, y = _data(n=300, seed=seed)
    model = simulate(VerticalFederatedForest(n_trees=6, max_depth=depth), _parties(_split(X, widths), y), seed=seed)
    X_test, _ = _data(n=500, seed=seed + 50)
    blocks = _split(X_test, widths)
    one_round = model.leaf_positions(blocks, method="one_round")
    np.testing.assert_array_equal(one_round, model.leaf_positions(blocks, method="classical"))
    assert np.unique(one_round).size > 3
    np.testing.assert_array_equal(model.predict(blocks), model.predict(blocks, method="classical"))


# -- privacy ------------------------------------------------------------------------------------------


def _numbers(value) -> list[np.ndarray]:
    """Every number a decoded body holds (arrays, scalars, nested dataclasses and tuples)."""
    if isinstance(value, np.ndarray):
        return [value.ravel().astype(np.float64)] if value.dtype.kind in "iuf" else []
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [np.array([float(value)])]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _numbers(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [a for name in value.__dataclass_fields__ for a in _numbers(getattr(value, name))]
    return []


def _bytes(value) -> list[bytes]:
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, (tuple, list)):
        return [b for v in value for b in _bytes(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [b for name in value.__dataclass_fields__ for b in _bytes(getattr(value, name))]
    return []


@dataclass(frozen=True, eq=False)
class _NamedParty(PartyData):
    """A party whose data source names its features, as a gateway's store does."""

    feature_names: tuple[str, ...] = ()


def _wire(body) -> bytes:
    return dumps_value(to_wire(body))


def _at_node(leaf: np.ndarray, node: int) -> np.ndarray:
    """Whether heap node ``node`` lies on the path to each of the heap ids ``leaf``."""
    a = leaf.copy()
    while (a > node).any():
        a = np.where(a > node, (a - 1) // 2, a)
    return a == node


def _expected_partition(model, blocks, seed, bootstrap, part) -> bytes:
    """The packed bits the owner must seal: per node (request order), its rows (ascending, drawn
    in the tree's bootstrap), 1 where the owner's split sends them left."""
    positions = model.leaf_positions(blocks)
    n = blocks[0].shape[0]
    bits = []
    for t, v in zip(part.tree.tolist(), part.node.tolist()):
        tree = model.partial[part.owner][t]
        at = int(np.searchsorted(tree.split_nodes, v))
        leaf = model.trees[t].leaves[positions[:, t]]
        rows = np.flatnonzero((draw_rows(seed, t, n, bootstrap) > 0) & _at_node(leaf, v))
        bits.append(blocks[part.owner][rows, tree.feature[at]] <= tree.threshold[at])
    return np.packbits(np.concatenate(bits)).tobytes()


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_no_party_receives_another_partys_values_or_thresholds_and_the_master_sees_none(task, tmp_path):
    """Every message of training, one-round and classical prediction, the shared result and the
    deployment, as each party and the master receive it: no other party's feature value,
    threshold or feature name; each party is asked exactly its own share of the drawn features;
    every sealed blob opens (with the party key) to exactly the labels or a split's packed bits."""
    from aggregator.algorithms.vertical_forest import deploy_to_parties
    from edge_client.algorithms.vertical_forest import PartySetup, labels_context, partition_context

    X, y = _data(n=200, task=task, seed=5)
    widths, holder, seed = (3, 2, 2), 2, 1
    blocks = _split(X, widths)
    sensors = ("ecg", "wrist", "chair")
    names = [tuple(f"{sensors[i]}.channel_{j}_mean" for j in range(w)) for i, w in enumerate(widths)]
    parties = [
        _NamedParty(f"party-{i:03d}", b, y if i == holder else None, party_key=KEY, feature_names=names[i])
        for i, b in enumerate(blocks)
    ]
    sim = Simulation(parties, record_bodies=True)
    received: dict[str, list] = {c: [] for c in sim.transports}
    layout = TopicLayout()
    for client, transport in sim.transports.items():
        transport.subscribe(layout.inbox(client), lambda topic, message, c=client: received[c].append(message))
    # leaf values are the model the master keeps: a leaf of one window would be that window's
    # target (PRIVACY.md), hence min_samples_leaf
    cfg = VerticalFederatedForest(n_trees=4, max_depth=6, task=task, min_samples_leaf=5)
    model = cfg.run_in(sim, seed=seed, job_id="train-1")

    def job(name):
        return FederatedJob(sim.engine, list(model.parties), job_id=name, settings=JobSettings(deadline_s=5))

    predict_on_parties(job("predict-1"), model)
    predict_on_parties(job("predict-2"), model, method="classical")
    signer = SigningKey(bytes(range(32)))
    for p in model.parties:
        sim.participants[p].halves["vertical_forest"].configure(PartySetup(p, tmp_path / p, (signer.verify_key,)))
    deploy_to_parties(job("deploy-1"), model, signer, model_id="vf", version=1)
    seen_types = {m.type for messages in received.values() for m in messages}
    assert {
        "vertical_forest.level",
        "vertical_forest.partition",
        "vertical_forest.finish",
        "vertical_forest.route",
        "vertical_forest.directions",
        "vertical_forest.result",
        "vertical_forest.deploy",
    } <= seen_types

    key = PartyKey.from_secret(KEY)
    thresholds = [np.concatenate([p.threshold[p.owned] for p in forest]) for forest in model.partial]
    assert all(t.size for t in thresholds)  # every party owns splits: the checks below have teeth
    labels = (y.astype(np.float64) if task == "regression" else y.astype(np.int64)).tobytes()
    d, offsets = sum(widths), np.concatenate([[0], np.cumsum(widths)])
    k = cfg.n_drawn(d)
    opened = {"labels": 0, "partitions": 0}
    relayed: set[bytes] = set()
    for i, party in enumerate(model.parties):
        messages = received[party]
        numbers = np.concatenate([a for m in messages for a in _numbers(m.body)])
        raw = b"".join(_wire(m.body) for m in messages)
        for j in range(len(blocks)):
            if j != i:
                secret = np.concatenate([blocks[j].ravel(), thresholds[j]])
                assert not np.isin(numbers, secret).any(), (party, j)
                assert not any(v.tobytes() in raw for v in secret[:50]), (party, j)
        # no feature name travels at all: neither another party's nor its own
        assert not any(name.encode() in raw for own in names for name in own), party
        if task == "regression":  # the targets never travel in the clear (class ids are small ints anyway)
            assert not np.isin(numbers, y).any()
        for m in messages:
            body = m.body
            if m.type == "vertical_forest.level":
                for row in range(body.node_id.size):  # exactly this party's share of the master's draw
                    drawn = draw_features(seed, int(body.node_tree[row]), int(body.node_id[row]), d, k)
                    share = drawn[(drawn >= offsets[i]) & (drawn < offsets[i + 1])] - offsets[i]
                    got = body.features[body.feature_offsets[row] : body.feature_offsets[row + 1]]
                    np.testing.assert_array_equal(np.sort(got), share)
                if body.sealed_labels:
                    assert i != holder
                    assert key.open(body.sealed_labels, associated=labels_context(m.envelope.job)) == labels
                    opened["labels"] += 1
            if m.type in ("vertical_forest.level", "vertical_forest.finish"):
                for part in body.partitions:
                    plain = key.open(
                        part.sealed, associated=partition_context(m.envelope.job, body.level - 1, part.owner)
                    )
                    assert plain == _expected_partition(model, blocks, seed, cfg.bootstrap, part)
                    opened["partitions"] += 1
            allowed = {part.sealed for part in getattr(body, "partitions", ())} | {getattr(body, "sealed_labels", b"")}
            if m.type == "vertical_forest.deploy":  # fingerprints and the signature
                allowed |= {body.manifest.forest_digest, body.manifest.signature, *body.manifest.party_digests}
            assert set(_bytes(body)) <= allowed, m.type  # no other byte string reaches a party
            relayed |= {part.sealed for part in getattr(body, "partitions", ())}
    assert opened["labels"] == len(blocks) - 1 and opened["partitions"] > 10
    # the master: no feature value, threshold, label or name in anything it received
    view = [r for replies in sim.server_view().values() for r in replies]
    seen = np.concatenate([a for r in view for a in _numbers(r.body)])
    assert not np.isin(seen, np.concatenate([X.ravel(), *thresholds] + ([y] if task == "regression" else []))).any()
    raw = b"".join(_wire(r.body) for r in view)
    assert not any(name.encode() in raw for own in names for name in own)
    for r in view:  # the sealed replies are the labels and the partitions opened above, nothing else
        if r.type == "vertical_forest.setup_reply" and r.body.sealed_labels:
            assert key.open(r.body.sealed_labels, associated=labels_context(r.job)) == labels
        if r.type == "vertical_forest.partition_reply":
            assert r.body.sealed in relayed


# -- failures and bad input -------------------------------------------------------------------------


def test_a_party_dropping_out_mid_training_fails_the_job_and_nothing_is_kept():
    X, y = _data(n=200, seed=2)
    sim = Simulation(parties_for_simulation(_parties(_split(X, (3, 2, 2)), y)))

    def drop_at_level_two(progress):
        if progress.step == 2:
            sim.transports["party-001"].drop()

    with pytest.raises(TrainingError, match=r"party-001 did not answer.*no model was saved"):
        VerticalFederatedForest(n_trees=3, max_depth=6).run_in(
            sim, seed=0, progress=drop_at_level_two, settings=JobSettings(deadline_s=1.0)
        )
    for party in ("party-000", "party-002"):
        half = sim.participants[party].halves["vertical_forest"]
        assert half.jobs == () and not half.forests


def test_string_labels_on_any_party_and_a_forest_of_stumps():
    X, y = _data(n=90, seed=9)
    names = np.array(["lie", "push", "sit"])[y]
    blocks = _split(X, (3, 4))
    model = simulate(VerticalFederatedForest(n_trees=3, max_depth=4), [(blocks[0], None), (blocks[1], names)])
    assert model.classes == ("lie", "push", "sit") and (model.predict(blocks) == names).mean() > 0.7
    stumps = simulate(
        VerticalFederatedForest(n_trees=2, max_depth=0, bootstrap=False), [(blocks[0], names), (blocks[1], None)]
    )
    assert all(t.split_nodes.size == 0 for t in stumps.trees)
    np.testing.assert_allclose(stumps.predict_proba(blocks)[0], np.bincount(y, minlength=3) / y.size)


def test_a_party_missing_at_prediction_is_a_clear_error():
    X, y = _data(n=120, seed=4)
    blocks = _split(X, (3, 4))
    model = simulate(VerticalFederatedForest(n_trees=2, max_depth=3), _parties(blocks, y))
    with pytest.raises(ValueError, match="party party-001 is missing"):
        model.predict([blocks[0], None])
    with pytest.raises(ValueError, match="1 feature blocks for 2 parties"):
        model.predict([blocks[0]])
    with pytest.raises(ValueError, match="party party-001 needs a 2-D block with 4 columns"):
        model.predict([blocks[0], blocks[1][:, :3]])


def test_labels_from_exactly_one_party_and_aligned_blocks():
    X, y = _data(n=50)
    blocks = _split(X, (3, 4))
    cfg = VerticalFederatedForest(n_trees=1)
    with pytest.raises(ValueError, match="exactly one party must give y.*got y from 2 parties"):
        simulate(cfg, [(blocks[0], y), (blocks[1], y)])
    with pytest.raises(ValueError, match="exactly one party must give y.*got y from 0 parties"):
        simulate(cfg, [(blocks[0], None), (blocks[1], None)])
    with pytest.raises(ValueError, match="same number of rows"):
        simulate(cfg, [(blocks[0], y), (blocks[1][:40], None)])
    with pytest.raises(TypeError, match=r"parties\[1\] must be an \(X_block, y\) pair"):
        simulate(cfg, [(blocks[0], y), blocks[1]])


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(n_trees=0), "n_trees must be an int >= 1"),
        (dict(max_depth=41), "max_depth must be an int in 0..40"),
        (dict(min_samples_split=1), "min_samples_split must be an int >= 2"),
        (dict(min_impurity_decrease=-1.0), "min_impurity_decrease must be >= 0"),
        (dict(criterion="mse"), "criterion 'mse' does not fit task 'classification'"),
        (dict(task="ranking"), "task must be"),
        (dict(max_features="half"), "max_features must be"),
        (dict(hop_us=100, tolerance_us=60), "tolerance_us must lie in 0..hop_us/2"),
    ],
)
def test_bad_settings_are_one_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VerticalFederatedForest(**kwargs)


def test_choose_owners_prefers_the_lower_party_on_ties_and_prunes():
    has = np.array([[1, 1], [0, 1], [0, 0], [1, 1]], dtype=np.uint8)
    gain = np.array([[0.2, 0.2 + 1e-13], [0.0, 0.1], [0.0, 0.0], [0.001, 0.002]])
    np.testing.assert_array_equal(choose_owners(has, gain, 0.0), [0, 1, -1, 1])
    np.testing.assert_array_equal(choose_owners(has, gain, 0.05), [0, 1, -1, -1])


# -- prediction through the parties (the protocol) ---------------------------------------------------


def test_one_round_prediction_through_the_parties_equals_the_model_and_a_missing_party_is_an_error():
    from aggregator.algorithms.vertical_forest import predict_on_parties
    from aggregator.jobs import FederatedJob

    X, y = _data(n=180, seed=6)
    blocks = _split(X, (2, 3, 2))
    sim = Simulation(parties_for_simulation(_parties(blocks, y, holder=1)))
    model = VerticalFederatedForest(n_trees=5, max_depth=6).run_in(sim, seed=2)
    job = FederatedJob(sim.engine, list(model.parties), job_id="predict-1", settings=JobSettings(deadline_s=5.0))
    result = predict_on_parties(job, model)
    assert result.alignment.common == 180 and job.rounds == 3  # alignment, the one round, the result to all
    for i, party in enumerate(model.parties):  # every party of the person holds the prediction of its windows
        shared = sim.participants[party].halves["vertical_forest"].results["predict-1"]
        np.testing.assert_array_equal(shared.X, blocks[i])
        np.testing.assert_array_equal(shared.values, result.values)
    np.testing.assert_array_equal(result.values, model.predict_proba(blocks))
    np.testing.assert_array_equal(result.predictions, model.predict(blocks))
    classical_job = FederatedJob(
        sim.engine, list(model.parties), job_id="predict-c", settings=JobSettings(deadline_s=5)
    )
    classical = predict_on_parties(classical_job, model, method="classical", share=False)
    np.testing.assert_array_equal(classical.values, result.values)
    assert classical_job.rounds == 1 + max(int(np.floor(np.log2(t.split_nodes.max() + 1))) + 1 for t in model.trees)
    sim.transports["party-002"].drop()
    late = FederatedJob(sim.engine, list(model.parties), job_id="predict-2", settings=JobSettings(deadline_s=0.5))
    with pytest.raises(TrainingError, match="failed at prediction alignment: party party-002 did not answer"):
        predict_on_parties(late, model)


def test_a_party_without_the_key_or_with_missing_values_fails_the_job_naming_it():
    from edge_client.training_data import PartyData

    X, y = _data(n=60, seed=8)
    blocks = _split(X, (3, 4))
    no_key = [PartyData("party-000", blocks[0], y, party_key=b"k" * 32), PartyData("party-001", blocks[1], None)]
    with pytest.raises(TrainingError, match=r"alignment: party party-001 did not answer.*no party key"):
        VerticalFederatedForest(n_trees=1).run_in(Simulation(no_key), settings=JobSettings(deadline_s=5))
    holes = blocks[1].copy()
    holes[3, 2] = np.nan
    with pytest.raises(TrainingError, match=r"party party-001 did not answer.*finite feature values"):
        simulate(VerticalFederatedForest(n_trees=1), [(blocks[0], y), (holes, None)])
