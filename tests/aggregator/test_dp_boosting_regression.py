"""FedSCS-XGB's private regression (squared error under ``protocol="private"``, the default):

* noise off (zero noise shares, lattice rounding to nearest) the federated trees equal a pooled
  exact computation of the same growth on the same public range, edges and features;
* masked == unmasked given the same noise draws;
* one window moves every release by at most the L2/L1 bound the accountant charges for;
* the model reports what it spent, within the budget, and the public range it clipped to;
* a gateway whose residuals exceed the public bound stops the job in one line;
* regression's default is now the private protocol, not the histogram one it replaces.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aggregator.algorithms.fedscs_xgb_private as private_module
import edge_client.algorithms.fedscs_xgb as client_module
from aggregator.algorithms import FedSCSXGB
from aggregator.algorithms.fedforest_private import COUNT_SCALE
from aggregator.algorithms.fedscs_xgb_private import (
    LATTICE_SCALE,
    PrivateBoosting,
    _cell_bounds,
    objective_lattice,
    round_features,
)
from aggregator.algorithms.private_fleet import release_target_range, residual_bound
from aggregator.algorithms.private_growth import PrivateGrowth, grow_private_tree
from aggregator.jobs import TrainingError
from aggregator.simulate import Simulation
from edge_client.training_data import ClientData
from shared.differential_privacy import clip_norm, stochastic_round
from shared.model import TreeEnsemble
from shared.protocol.messages.fedforest import TargetClip
from shared.protocol.messages.fedscs_xgb import PrivateRoundFeatures, XgbPrivateLeavesRequest, XgbPrivateLevelRequest
from shared.sketches import pack_edges

from .test_dp_boosting import _exact_fetchers, seeded_run


def fleet(n_clients: int = 4, n: int = 150, d: int = 5, seed: int = 0) -> list[ClientData]:
    """Gateways whose targets (around 100, spread about 25) follow two of their features."""
    rng = np.random.default_rng(seed)
    clients = []
    for k in range(n_clients):
        X = rng.normal(size=(n, d)).astype(np.float32).astype(np.float64)
        y = 100.0 + 20.0 * X[:, 0] + 10.0 * np.sin(3.0 * X[:, 1]) + rng.normal(scale=2.0, size=n)
        clients.append(ClientData(f"gw-{k}", X, y))
    return clients


def pooled(clients: list[ClientData]) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([c.X for c in clients]), np.concatenate([c.y for c in clients])


# --- noise off: federated == pooled ------------------------------------------------------------------


def _pooled_fetchers(Xf, edges, qg, grad_scale, features):
    """``fetch_level``/``fetch_leaves`` over the pooled windows' lattice residuals ``qg``
    (integers), in natural units: G per ``grad_scale``, H = count in windows (the exact fetchers
    of the classification test with every H 1)."""
    return _exact_fetchers(Xf, edges, (qg / grad_scale)[:, None], np.ones((qg.shape[0], 1)), features)


def test_noise_off_equals_the_pooled_exact_computation_of_the_same_growth(monkeypatch) -> None:
    monkeypatch.setattr(client_module, "skellam_share", lambda shape, mu, shares, rng=None: np.zeros(shape, np.int64))
    monkeypatch.setattr(
        client_module, "stochastic_round", lambda v, scale, rng=None: np.rint(np.asarray(v) * scale).astype(np.int64)
    )
    servers: list[PrivateBoosting] = []
    run = PrivateBoosting.run

    def recording(self: PrivateBoosting) -> TreeEnsemble:  # keep the server's public values
        servers.append(self)
        return run(self)

    monkeypatch.setattr(PrivateBoosting, "run", recording)
    clients = fleet(n=200)
    config = FedSCSXGB(objective="squared_error", n_rounds=4, max_depth=3, dp_features=3, dp_epsilon=8.0)
    model = Simulation(clients).run(config, seed=5)
    (server,) = servers
    lattice = server.lattice
    assert lattice.grad_bound == model.metadata["dp_grad_bound"] > 0
    X, y = pooled(clients)
    X32 = X.astype(np.float32)
    usable = np.array([e.shape[0] > 0 for e in server.edges])
    margins = np.full(y.shape[0], float(model.base_score[0]))
    trees = []
    for t in range(1, config.n_rounds + 1):
        features = round_features(server.n_features, usable, config.dp_features, 5, t)
        round_ = PrivateRoundFeatures(features, *pack_edges([server.edges[j] for j in features]))
        edges = round_.edges()
        growth = PrivateGrowth(config.growth, features, edges, server.min_counts[t - 1], server.leaf_clip)
        g = clip_norm((margins - y)[:, None], lattice.grad_bound)[:, 0]
        qg = np.rint(g * lattice.gradient_scale)
        level, leaves = _pooled_fetchers(X32[:, features], edges, qg, lattice.gradient_scale, features)
        tree = grow_private_tree(growth, 1, level, leaves).tree
        trees.append(tree)
        margins = (
            margins
            + TreeEnsemble(
                trees=(tree,),
                kind="boosted",
                link="identity",
                n_outputs=1,
                feature_names=model.feature_names,
                tree_output=np.zeros(1, np.int32),
            ).predict_margin(X32)[:, 0]
        )
    assert model.n_trees == len(trees) == 4 and sum(t.n_nodes > 1 for t in trees) >= 2
    for fed, ref in zip(model.trees, trees):
        assert fed.n_nodes == ref.n_nodes
        np.testing.assert_array_equal(fed.feature, ref.feature)
        np.testing.assert_array_equal(fed.threshold, ref.threshold)
        np.testing.assert_array_equal(fed.left, ref.left)
        np.testing.assert_array_equal(fed.right, ref.right)
        np.testing.assert_allclose(fed.value, ref.value, rtol=0, atol=1e-9)
    # and the growth learned: the trees cut the squared error of the base score
    assert np.mean((model.predict(X).ravel() - y) ** 2) < 0.5 * np.mean((model.base_score[0] - y) ** 2)


# --- secure aggregation changes nothing -------------------------------------------------------------


def test_masked_equals_unmasked_given_the_same_noise_draws(monkeypatch) -> None:
    algorithm = FedSCSXGB(objective="squared_error", n_rounds=3, max_depth=3, dp_epsilon=4.0)
    masked = seeded_run(monkeypatch, private_module, fleet(), algorithm, plain=False)
    unmasked = seeded_run(monkeypatch, private_module, fleet(), algorithm, plain=True)
    assert masked == unmasked
    assert masked.metadata["dp_target_low"] == unmasked.metadata["dp_target_low"]
    assert masked.metadata["dp_epsilon"] == unmasked.metadata["dp_epsilon"]
    other = Simulation(fleet()).run(algorithm)
    assert other != masked  # the noise is real: unseeded gateways draw other noise


# --- the sensitivity the accountant charges for ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.floats(-1e6, 1e6),
    st.floats(-1e6, 1e6),
    st.floats(1e-3, 1e5),
    st.floats(-1e3, 1e3),
    st.integers(0, 2**31),
)
def test_one_window_moves_each_release_by_at_most_the_charged_bound(
    margin: float, y: float, half_width: float, centre: float, seed: int
) -> None:
    """Whatever its residual, one window adds to a level cell (G, count) and a leaf cell (G, H)
    vectors within the charged norms."""
    rng = np.random.default_rng(seed)
    lattice = objective_lattice("squared_error", residual_bound(TargetClip(centre, half_width), np.empty(0), centre))
    g = np.array([[margin - y]])
    qg = stochastic_round(clip_norm(g, lattice.grad_bound), lattice.gradient_scale, rng)
    qh = stochastic_round(clip_norm(np.ones((1, 1)), lattice.hess_bound), lattice.scale, rng)
    level = np.array([qg[0, 0], lattice.scale], dtype=np.float64)
    l2, l1 = _cell_bounds(lattice, 1, with_count=True, unit_hessian=True)
    assert np.sqrt((level * level).sum()) <= l2 and np.abs(level).sum() <= l1
    leaf = np.array([qg[0, 0], qh[0, 0]], dtype=np.float64)
    leaf_l2, leaf_l1 = _cell_bounds(lattice, 1, with_count=False)
    assert np.sqrt((leaf * leaf).sum()) <= leaf_l2 and np.abs(leaf).sum() <= leaf_l1
    # the charge is that of one window's count: G weighs at most a window (plus rounding)
    assert l2 <= np.sqrt((LATTICE_SCALE + 1.0) ** 2 + LATTICE_SCALE**2) + 1e-9


def test_the_range_release_is_charged_one_window_count() -> None:
    """The target range release spends the opening's per-release share at sensitivity
    ``COUNT_SCALE`` (one window's count in one octave cell), L2 and L1."""
    budget = FedSCSXGB(objective="squared_error").release_plan.budget(8.0, 1e-6, 20, 6)
    charged = []

    class Recording:
        def mu(self, kind, l2, l1):
            charged.append((kind, l2, l1))
            return budget.mu(kind, l2, l1)

        def spend(self, release):
            budget.spend(release)

    class Summer:
        active = ("a", "b", "c")

        def secure_round(self, client, cohort):
            return None

        def ask(self, requests, expect, values, length, word_bits):
            class Result:
                contributors = ("a", "b", "c")
                total = np.zeros(length, np.int64)

            Result.total[0x100 + 128] = 500 * COUNT_SCALE  # 500 windows of targets in [2, 4)
            return Result()

    clip = release_target_range(Summer(), Recording(), "", 3)
    assert charged == [("opening", float(COUNT_SCALE), float(COUNT_SCALE))]
    assert clip == TargetClip(3.0, 1.0) and budget.spent().releases == 1


# --- the budget ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target_range", [None, (40.0, 160.0)])
def test_model_reports_what_it_spent_within_the_budget(target_range) -> None:
    config = FedSCSXGB(objective="squared_error", n_rounds=4, max_depth=3, dp_epsilon=2.0, target_range=target_range)
    model = Simulation(fleet()).run(config)
    meta = model.metadata
    assert meta["protocol"] == "private" and meta["secure_aggregation"] == 1
    assert 1.0 < meta["dp_epsilon"] <= 2.0 and meta["dp_delta"] == 1e-6
    assert meta["dp_rho"] > 0 and 0 <= meta["dp_xi"] < 0.05 * meta["dp_rho"]
    low, high = meta["dp_target_low"], meta["dp_target_high"]
    assert 0 < meta["dp_grad_bound"] <= (high - low) / 2
    if target_range is None:  # the octaves around the targets (about 30 to 175 here)
        assert low <= 64.0 and high >= 128.0 and high - low <= 1024.0
    else:
        assert (low, high) == target_range
    assert low <= float(model.base_score[0]) <= high
    X, _ = pooled(fleet())
    assert np.all(np.isfinite(model.predict(X)))


def test_private_regression_learns() -> None:
    clients = fleet(n_clients=5, n=300)
    X, y = pooled(clients)
    model = Simulation(clients).run(FedSCSXGB(objective="squared_error", n_rounds=10, max_depth=3, dp_epsilon=8.0))
    assert np.sqrt(np.mean((model.predict(X).ravel() - y) ** 2)) < 0.8 * y.std()


# --- a lying gateway --------------------------------------------------------------------------------


@pytest.mark.parametrize("release", [XgbPrivateLevelRequest, XgbPrivateLeavesRequest])
def test_a_gateway_whose_residuals_exceed_the_bound_stops_the_job_in_one_line(release) -> None:
    sim = Simulation(fleet())
    half = sim.participants["gw-1"].halves["fedscs_xgb"]
    honest = half._private_positions

    def lying(message, body):  # residuals 50 times the public bound: no clipping could give them
        qg, qh, slots, position = honest(message, body)
        return (qg * 50 if isinstance(body, release) else qg), qh, slots, position

    half._private_positions = lying
    what = "level" if release is XgbPrivateLevelRequest else "leaf"
    with pytest.raises(TrainingError, match=f"fleet's {what} sums .*G sum") as info:
        sim.run(FedSCSXGB(objective="squared_error", n_rounds=3, max_depth=3, dp_epsilon=4.0))
    assert "\n" not in str(info.value)


# --- the default it replaces ---------------------------------------------------------------------------


def test_regression_defaults_to_the_private_protocol_not_the_histogram_one(caplog) -> None:
    regression = FedSCSXGB(objective="squared_error")
    assert regression.protocol == "private" and regression.bins == 8
    assert (regression.n_rounds, regression.max_depth) == (20, 6)
    # without secure aggregation there is no distributed noise: the histogram protocol, as before
    assert FedSCSXGB(objective="squared_error", secure_aggregation=False).protocol == "histogram"
    old = FedSCSXGB(objective="squared_error", protocol="histogram", n_rounds=2, max_depth=2)
    with caplog.at_level(logging.WARNING):
        model = Simulation(fleet()).run(old)
    warnings = [r.getMessage() for r in caplog.records if "protocol='histogram'" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert model.metadata["protocol"] == "histogram" and "dp_epsilon" not in model.metadata


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "squared_error", "target_range": (3.0, 3.0)}, "low < high"),
        ({"objective": "squared_error", "target_range": (0.0, float("inf"))}, "low < high"),
        ({"objective": "squared_error", "target_range": (0.0, 1.0), "protocol": "histogram"}, "target_range"),
        ({"target_range": (0.0, 1.0)}, "squared_error"),
    ],
)
def test_bad_target_ranges_are_one_line(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message) as info:
        FedSCSXGB(**kwargs)
    assert "\n" not in str(info.value)


def test_targets_beyond_the_lattice_s_reach_are_refused_in_one_line() -> None:
    clients = [ClientData(c.client_id, c.X, c.y * 1e34) for c in fleet()]
    with pytest.raises(TrainingError, match="rescale the targets") as info:
        Simulation(clients).run(FedSCSXGB(objective="squared_error", n_rounds=1, max_depth=2))
    assert "\n" not in str(info.value)


def test_a_gateway_refuses_a_histogram_protocol_request_that_asks_for_noise_in_one_line() -> None:
    """Noise travels in the private protocol's requests; a histogram request with a noise share
    is refused with a code (it used to crash the handler)."""
    from edge_client.algorithms.fedscs_xgb import FedSCSXGBClient
    from edge_client.dispatcher import RequestRejected
    from shared.protocol.envelope import Message
    from shared.protocol.messages.fedscs_xgb import ModelDelta, RoundSplits, XgbHistogramRequest, XgbTask
    from shared.protocol.messages.fleet_sums import NoiseShare

    (gateway,) = fleet(n_clients=1, d=2)
    client = FedSCSXGBClient(gateway)
    edges = [np.array([0.0], np.float32), np.array([0.0], np.float32)]
    body = XgbHistogramRequest(
        XgbTask("squared_error", "", 2, np.array([100.0])),
        ModelDelta(),
        *pack_edges(edges),
        RoundSplits.empty(),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        frac_bits=16,
        gradient_bound=1e3,
        noise=NoiseShare(100.0, 3),
    )
    with pytest.raises(RequestRejected, match="adds no noise") as info:
        client.on_histograms(Message.create(body, sender="aggregator", job="job-1", round=1))
    assert info.value.code == "bad_request" and "\n" not in str(info.value)
