"""FedForest's private protocol: the oracles that still apply under differential privacy.

* growth from exact sums equals a pooled reference (federated == pooled with the noise off:
  ``grow_private_forest`` is fed exact pooled counts; the kept features are the brute-force best
  root splits, every leaf holds the class distribution of the pooled windows routed there);
* the gateways' vectors, their noise taken out draw for draw, add up to the pooled counts;
* masked == unmasked given the same noise draws (secure aggregation changes nothing);
* one window moves a release by at most the sensitivity the accountant charges for;
* the model reports what it spent, within the budget; a window alone in a cell keeps its label.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aggregator.algorithms.fedforest_private as private_module
from aggregator.algorithms import FedForest
from aggregator.algorithms.fedforest_private import COUNT_SCALE, release_bounds
from aggregator.algorithms.forest_private_growth import NoisyCounts, PrivateForestPlan, grow_private_forest
from aggregator.fleet_sums import FleetSummer
from aggregator.simulate import Simulation
from edge_client.algorithms.fedforest import FedForestClient, cell_histograms, clipped_target, leaf_sums
from edge_client.training_data import ClientData
from shared.differential_privacy import skellam_share
from shared.protocol.envelope import Message
from shared.protocol.messages.fedforest import (
    ForestTask,
    PrivateForestHistogramRequest,
    PrivateForestLeavesRequest,
    SplitDecisions,
    TargetClip,
)
from shared.protocol.messages.fleet_sums import NoiseShare
from shared.sketches import pack_edges
from tests.aggregator.test_dp_boosting import seeded_run

CLASSES = ("0", "1", "2")


def fleet(n_clients: int = 4, n: int = 150, d: int = 6, seed: int = 0) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(n_clients):
        X = rng.normal(size=(n, d)) + 0.3 * k
        y = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.3, 0.9])
        X[rng.random(X.shape) < 0.05] = np.nan
        clients.append(ClientData(f"gw-{k}", X, y))
    return clients


def pooled(clients: list[ClientData]) -> tuple[np.ndarray, np.ndarray]:
    """The fleet's windows, their features rounded to float32 as the gateways compare them."""
    X = np.vstack([c.X for c in clients]).astype(np.float32).astype(np.float64)
    return X, np.concatenate([c.y for c in clients]).astype(int)


def quantile_edges(X: np.ndarray, n_bins: int = 8) -> list[np.ndarray]:
    return [
        np.unique(np.nanquantile(X[:, j], np.arange(1, n_bins) / n_bins).astype(np.float32)) for j in range(X.shape[1])
    ]


def route(X: np.ndarray, splits: SplitDecisions, n_trees: int) -> np.ndarray:
    """Reference routing: the node of every row in every tree ``(n_trees, n)``, split by split
    (``x < threshold`` left; NaN right)."""
    node = np.zeros((n_trees, X.shape[0]), dtype=np.int64)
    for r in range(splits.level.shape[0]):
        t = int(splits.tree[r])
        here = node[t] == splits.node[r]
        left = X[:, splits.feature[r]] < splits.threshold[r]
        node[t] = np.where(here & left, splits.left[r], np.where(here, splits.right[r], node[t]))
    return node


def exact_fetchers(X: np.ndarray, y: np.ndarray, edges: list[np.ndarray], K: int, n_trees: int):
    """``fetch_histograms``/``fetch_leaves`` that count the pooled windows exactly (no noise)."""
    S = max(e.shape[0] for e in edges) + 2

    def histograms() -> NoisyCounts:
        out = np.zeros((X.shape[1], S, K))
        for j, e in enumerate(edges):
            slot = np.where(np.isnan(X[:, j]), S - 1, np.searchsorted(e.astype(np.float64), X[:, j], side="right"))
            np.add.at(out[j], (slot, y), 1.0)
        return NoisyCounts(out, 0.0)

    def leaves(splits: SplitDecisions, leaf_tree: np.ndarray, leaf_id: np.ndarray) -> NoisyCounts:
        node = route(X, splits, n_trees)
        return NoisyCounts(
            np.array([np.bincount(y[node[t] == i], minlength=K) for t, i in zip(leaf_tree, leaf_id)], dtype=np.float64),
            0.0,
        )

    return histograms, leaves


def gini_decrease(x: np.ndarray, y: np.ndarray, threshold: float, K: int) -> float:
    """The root's Gini decrease of ``x < threshold`` (NaN right), from the windows themselves."""

    def gini(labels: np.ndarray) -> float:
        if labels.size == 0:
            return 0.0
        p = np.bincount(labels, minlength=K) / labels.size
        return 1.0 - float((p * p).sum())

    left = x < threshold
    return gini(y) - left.mean() * gini(y[left]) - (~left).mean() * gini(y[~left])


# --- federated == pooled with exact sums -----------------------------------------------------------


def test_private_growth_from_exact_sums_equals_the_pooled_reference() -> None:
    X, y = pooled(fleet(d=8))
    edges = quantile_edges(X)
    K, T, keep = 3, 5, 3
    histograms, leaves = exact_fetchers(X, y, edges, K, T)
    grown = grow_private_forest(PrivateForestPlan(T, 4, keep, "gini", smoothing=0.3), edges, 7, histograms, leaves)
    # the kept features: the best root splits of every feature, brute force
    best = np.array([max(gini_decrease(X[:, j], y, float(e), K) for e in edges[j]) for j in range(X.shape[1])])
    np.testing.assert_allclose(grown.screening.score, best, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(grown.screening.features, np.sort(np.argsort(-best, kind="stable")[:keep]))
    np.testing.assert_allclose(grown.screening.prior, np.bincount(y, minlength=K) / y.size, rtol=0, atol=1e-15)
    splits = grown.structure.splits
    assert set(splits.feature.tolist()) <= set(grown.screening.features.tolist()) and splits.level.max() == 3
    # every leaf: the class distribution of the pooled windows routed there (the prior where none)
    node = route(X, splits, T)
    for t, tree in enumerate(grown.trees):
        for leaf in np.flatnonzero(tree.feature < 0).tolist():
            counts = np.bincount(y[node[t] == leaf], minlength=K)
            want = counts / counts.sum() if counts.sum() else grown.screening.prior
            np.testing.assert_allclose(tree.value[leaf], want, rtol=0, atol=1e-15)
    # the structure draws on the public seed alone: other sums, same kept features -> same trees
    again = grow_private_forest(
        PrivateForestPlan(T, 4, keep, "gini"),
        edges,
        7,
        histograms,
        lambda s, t, i: NoisyCounts(np.ones((t.shape[0], K)), 0.0),
    )
    assert all(
        a.feature.tolist() == b.feature.tolist() and a.threshold.tolist() == b.threshold.tolist()
        for a, b in zip(grown.trees, again.trees)
    )


def test_the_gateways_vectors_without_their_noise_add_up_to_the_pooled_counts() -> None:
    clients = fleet()
    X, y = pooled(clients)
    edges = quantile_edges(X)
    values, offsets = pack_edges(edges)
    T, S = 3, max(e.shape[0] for e in edges) + 2
    splits = grow_private_forest(PrivateForestPlan(T, 3, 2), edges, 1, *exact_fetchers(X, y, edges, 3, T)).structure
    noise = NoiseShare(50.0, len(clients), COUNT_SCALE)
    hist_sum, leaf_sum = 0, 0
    for k, c in enumerate(clients):
        task = ForestTask(
            "classification",
            "gini",
            "",
            X.shape[1],
            T,
            k,
            np.arange(T),
            0,
            bootstrap=False,
            classes=CLASSES,
            n_clients=len(clients),
        )
        half = FedForestClient(c)
        for body, total in (
            (PrivateForestHistogramRequest(task, np.arange(X.shape[1]), values, offsets, noise), 0),
            (PrivateForestLeavesRequest(task, splits.splits, splits.leaf_tree, splits.leaf_id, noise), 1),
        ):
            half.noise_rng = np.random.default_rng([5, k, total])
            reply = (half.on_private_histograms if total == 0 else half.on_private_leaves)(
                Message.create(body, sender="aggregator", job="j", round=total)
            )
            drawn = skellam_share(body.length, noise.mu, noise.shares, np.random.default_rng([5, k, total]))
            counts = reply.sums.values.astype(np.uint32).view(np.int32).astype(np.int64) - drawn
            assert (counts % COUNT_SCALE == 0).all()
            if total == 0:
                hist_sum = hist_sum + counts // COUNT_SCALE
            else:
                leaf_sum = leaf_sum + counts // COUNT_SCALE
    want_hist, want_leaves = exact_fetchers(X, y, edges, 3, T)
    np.testing.assert_array_equal(hist_sum.reshape(X.shape[1], S, 3), want_hist().counts)
    np.testing.assert_array_equal(
        leaf_sum.reshape(-1, 3), want_leaves(splits.splits, splits.leaf_tree, splits.leaf_id).counts
    )


# --- secure aggregation changes nothing -------------------------------------------------------------


def regression_fleet(n_clients: int = 4, n: int = 150, d: int = 5, seed: int = 0) -> list[ClientData]:
    """y = 3 [x0 > 0] + x1 + noise, some values missing, clients shifted apart."""
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(n_clients):
        X = rng.normal(size=(n, d)) + 0.2 * k
        y = 3.0 * (X[:, 0] > 0) + X[:, 1] + rng.normal(0.0, 0.1, n)
        X[rng.random(X.shape) < 0.05] = np.nan
        clients.append(ClientData(f"gw-{k}", X, y))
    return clients


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_masked_equals_unmasked_given_the_same_noise_draws(monkeypatch, task: str) -> None:
    algorithm = FedForest(task=task, n_trees=4, max_depth=3, dp_epsilon=4.0)
    data = fleet if task == "classification" else regression_fleet
    masked = seeded_run(monkeypatch, private_module, data(), algorithm, plain=False)
    unmasked = seeded_run(monkeypatch, private_module, data(), algorithm, plain=True)
    assert masked == unmasked
    assert masked.metadata["dp_epsilon"] == unmasked.metadata["dp_epsilon"]
    other = Simulation(data()).run(algorithm)
    assert other != masked  # the noise is real: unseeded gateways draw other noise


# --- the sensitivity the accountant charges for ----------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 6), st.integers(1, 4), st.booleans())
def test_one_window_moves_a_release_by_at_most_the_charged_bound(
    seed: int, n_trees: int, depth: int, regression: bool
) -> None:
    """Classification: class counts; regression: ``[windows, round(z scale)]`` of targets within
    the public range and far beyond it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 5))
    X[rng.random(X.shape) < 0.1] = np.nan
    y = rng.integers(0, 3, 30)
    target = rng.normal(size=30) * rng.choice([0.1, 10.0, 1e4])
    clip = TargetClip(1.5, 4.0)
    edges = quantile_edges(X, 4)
    values, offsets = pack_edges(edges)
    S = int(np.diff(offsets).max()) + 2
    forest = grow_private_forest(
        PrivateForestPlan(n_trees, depth, 3), edges, seed, *exact_fetchers(X, y, edges, 3, n_trees)
    ).structure
    drop = int(rng.integers(30))
    rest = np.arange(30) != drop

    def releases(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        terms = (
            np.stack([np.full(int(rows.sum()), COUNT_SCALE), clipped_target(target[rows], clip, COUNT_SCALE)], axis=1)
            if regression
            else np.eye(3, dtype=np.int64)[y[rows]] * COUNT_SCALE
        )
        hist = cell_histograms(X[rows], terms, np.arange(5), values, offsets, S)
        node = route(X[rows], forest.splits, n_trees)
        lookup = {(t, i): p for p, (t, i) in enumerate(zip(forest.leaf_tree.tolist(), forest.leaf_id.tolist()))}
        positions = np.array([lookup[(t, int(i))] for t in range(n_trees) for i in node[t]], dtype=np.int64)
        return hist.ravel(), leaf_sums(positions, np.tile(terms, (n_trees, 1)), len(lookup)).ravel()

    for kind, a, b in zip(("histograms", "leaves"), releases(np.ones(30, bool)), releases(rest)):
        l2, l1 = release_bounds(kind, 5, n_trees, columns=2 if regression else 1)
        diff = (a - b).astype(np.float64)
        assert np.sqrt((diff * diff).sum()) <= l2 + 1e-9 and np.abs(diff).sum() <= l1


# --- the budget, the model, the settings -------------------------------------------------------------


def test_model_reports_what_it_spent_within_the_budget() -> None:
    model = Simulation(fleet()).run(FedForest(n_trees=4, max_depth=3, dp_epsilon=2.0))
    meta = model.metadata
    assert meta["protocol"] == "private" and meta["n_bins"] == 16 and meta["dp_features"] == 2
    assert 1.0 < meta["dp_epsilon"] <= 2.0 and meta["dp_delta"] == 1e-6
    assert meta["dp_rho"] > 0 and 0 <= meta["dp_xi"] < 0.05 * meta["dp_rho"]
    assert meta["dp_releases"] <= 6  # the opening's four at most, the root histograms, the leaves


def test_private_training_learns_a_separable_fleet() -> None:
    clients = fleet(n_clients=5, n=300)
    model = Simulation(clients).run(FedForest(dp_epsilon=8.0))
    X, y = pooled(clients)
    assert np.mean(model.predict(X).astype(int) == y) > 0.8


def test_a_whole_private_forest_sends_few_bytes_per_gateway() -> None:
    """The recordings' shape (10 gateways, 204 features, 7 classes), 50 trees of depth 8: the
    gateways' replies stay far below 5 MB each."""
    rng = np.random.default_rng(0)
    clients = [
        ClientData(f"gw-{k}", rng.normal(size=(170, 204)).astype(np.float32), rng.integers(0, 7, 170))
        for k in range(10)
    ]
    sim = Simulation(clients, record_bodies=False)
    sim.run(FedForest(n_trees=50, max_depth=8))
    assert sim.client_bytes() / len(clients) < 1.5e6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "regression", "protocol": "private", "secure_aggregation": False}, "secure aggregation"),
        ({"protocol": "private", "secure_aggregation": False}, "secure aggregation"),
        ({"dp_epsilon": 0.0}, "dp_epsilon"),
        ({"dp_delta": 0.5}, "dp_delta"),
        ({"dp_features": 0}, "dp_features"),
        ({"client_splits": True}, "does not offer client_splits"),
        ({"thresholds": (np.zeros(1),)}, "does not offer thresholds"),
        ({"n_bins": 1}, "n_bins"),
    ],
)
def test_bad_private_settings_are_one_line(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as info:
        FedForest(**kwargs)
    assert "\n" not in str(info.value)


def test_protocol_defaults_private_for_classifiers_and_regressors(caplog) -> None:
    assert FedForest().protocol == "private" and FedForest().bins == 16
    regression = FedForest(task="regression")
    assert regression.protocol == "private" and regression.bins == 64  # the most: sized to the fleet
    assert FedForest(task="regression", protocol="histogram").bins == 32
    assert FedForest(secure_aggregation=False).protocol == "histogram"  # no DP without secure aggregation
    with caplog.at_level(logging.WARNING):
        Simulation(fleet()).run(FedForest(n_trees=2, max_depth=2, protocol="histogram"))
        Simulation(fleet()).run(FedForest(n_trees=2, max_depth=2, protocol="sketches", secure_aggregation=False))
        Simulation(fleet()).run(FedForest(n_trees=2, max_depth=2))
    warnings = [r.getMessage() for r in caplog.records if "protocol=" in r.getMessage()]
    assert len(warnings) == 2 and all("\n" not in w for w in warnings)
    assert "without differential privacy" in warnings[0] and "reveals per-window data" in warnings[1]


# --- what the server decodes: a window alone in a cell ----------------------------------------------


def lonely_window(clients: list[ClientData], target) -> list[ClientData]:
    """``clients`` where one window (gw-0's first) is the only one without a value of feature 0,
    so it sits alone in that feature's missing slot: its label (target) is ``target``."""
    out = []
    for c in clients:
        X, y = c.X.copy(), c.y.copy()
        X[:, 0] = np.nan_to_num(X[:, 0])
        if c.client_id == "gw-0":
            X[0, 0], y[0] = np.nan, target
        out.append(ClientData(c.client_id, X, y))
    return out


def _lonely_window_fleet(label: int) -> list[ClientData]:
    return lonely_window(fleet(n_clients=3, n=60, d=3, seed=1), label)


def decoded_sums(algorithm: FedForest, clients: list[ClientData], noise_seed: int) -> list[tuple[object, np.ndarray]]:
    """Every fleet sum the server decodes training ``algorithm`` (the gateways' noise seeded by
    ``noise_seed``): (one gateway's request, the int64 total)."""
    decoded = []
    original = FleetSummer.ask

    def ask(self, requests, *args, **kwargs):
        result = original(self, requests, *args, **kwargs)
        decoded.append((next(iter(requests.values())), result.total.view(np.int64).copy()))
        return result

    FleetSummer.ask = ask
    try:
        sim = Simulation(clients)
        for i, participant in enumerate(sim.participants.values()):
            participant.seed_noise(noise_seed * 10 + i)
        sim.run(algorithm)
    finally:
        FleetSummer.ask = original
    return decoded


def _root_missing_cell(algorithm: FedForest, clients: list[ClientData], noise_seed: int) -> np.ndarray:
    """The class counts the server decodes for feature 0's missing slot at the root (the first
    fleet sum after the opening whose request covers feature 0's missing values)."""
    for request, total in decoded_sums(algorithm, clients, noise_seed):
        name = type(request).__name__
        if name == "PrivateForestHistogramRequest":
            return total.reshape(request.features.shape[0], request.slots, -1)[0, -1] / COUNT_SCALE
        if name == "ForestHistogramRequest":  # the histogram protocol: (pairs, slots, 1 + K), root level
            hist = total.reshape(request.features.shape[0], request.slots, request.terms)
            pair = (
                int(np.flatnonzero(request.features[request.feature_offsets[0] : request.feature_offsets[1]] == 0)[0])
                if 0 in request.features[request.feature_offsets[0] : request.feature_offsets[1]]
                else None
            )
            if pair is not None:
                return hist[pair, -1, 1:].astype(np.float64)
    raise AssertionError("no release covered feature 0's missing slot")


def test_the_default_protocol_does_not_give_away_a_lonely_window_s_label() -> None:
    """A window alone in a cell: guessing its label as the largest class count of that cell
    names it every time from exact sums; from the default's noisy release (dp_epsilon 1, which
    bounds any guess between two labels at e/(1+e) = 73 %) about half the time."""
    hits = []
    for trial in range(24):
        label = trial % 2
        cell = _root_missing_cell(
            FedForest(n_trees=2, max_depth=2, max_features=None, dp_epsilon=1.0), _lonely_window_fleet(label), trial
        )
        hits.append(int(np.argmax(cell[:2])) == label)
    assert np.mean(hits) <= 0.8
    exact = _root_missing_cell(
        FedForest(n_trees=2, max_depth=2, max_features=None, protocol="histogram", bootstrap=False, min_crowd=0),
        _lonely_window_fleet(1),
        0,
    )
    assert exact.tolist()[:2] == [0.0, 1.0]  # the non-private protocol: the window's label, exactly


# --- a gateway that lies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "factor"),
    [("on_private_histograms", 1000), ("on_private_leaves", 1000), ("on_private_histograms", -1000)],
)
def test_a_gateway_that_inflates_or_negates_its_counts_stops_the_job_in_one_line(release: str, factor: int) -> None:
    """Honest gateways' class totals agree between the features (and between the trees); one
    gateway's counts scaled by 1000 (or -1000) in one release break that, and the job stops
    with one line instead of growing a forest from them."""
    from aggregator.jobs import TrainingError

    sim = Simulation(fleet())
    half = sim.participants["gw-1"].halves["fedforest"]
    honest = half._private_reply

    def lying(message, counts, body):
        liar = (
            message.body.__class__.__name__
            == {
                "on_private_histograms": "PrivateForestHistogramRequest",
                "on_private_leaves": "PrivateForestLeavesRequest",
            }[release]
        )
        if liar:
            counts = counts.copy()
            counts[: counts.size // 3] *= factor
        return honest(message, counts, body)

    half._private_reply = lying
    with pytest.raises(TrainingError, match="break the protocol's bounds") as info:
        sim.run(FedForest(n_trees=4, max_depth=3))
    assert "\n" not in str(info.value)
