"""FedForest's private protocol for regression: the oracles of the classification protocol
(``test_fedforest_private``) for the releases of ``[windows, Σ z]``, ``z`` the target clipped to
the job's public range and scaled into ``[-1, 1]``:

* growth from exact sums equals a pooled reference (the kept features are the brute-force best
  root variance decreases, every leaf holds the mean target of the pooled windows routed there);
* with the gateways' noise shares zeroed, a whole simulated job grows exactly that forest;
* (masked == unmasked given the same noise draws, and one window moving a release by at most
  the sensitivity the accountant charges for, are ``test_fedforest_private``'s, for both tasks);
* a gateway whose target sums leave the public range stops the job in one line;
* a window alone in a cell keeps its target from the server (the histogram protocol gives it
  back exactly).
"""

from __future__ import annotations

import numpy as np
import pytest

import aggregator.algorithms.fedforest_private as private_module
import aggregator.algorithms.private_fleet as fleet_module
import edge_client.algorithms.fedforest as client_module
import edge_client.fleet_sums as client_sums
from aggregator.algorithms import FedForest
from aggregator.algorithms.fedforest_private import COUNT_SCALE, REGRESSION_RELEASE_PLAN
from aggregator.algorithms.private_fleet import RANGE_BITS, TargetRangeUnreadable, spread_clip, target_range
from aggregator.algorithms.forest_private_growth import (
    NoisyCounts,
    PrivateForestPlan,
    grow_private_forest,
    marginal_split,
)
from aggregator.jobs import TrainingError
from aggregator.simulate import Simulation
from edge_client.algorithms.fedforest import FedForestClient
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
from shared.sketches import float32_keys, pack_edges
from tests.aggregator.test_fedforest_private import (
    decoded_sums,
    lonely_window,
    quantile_edges,
    regression_fleet,
    route,
)

CLIP = TargetClip(1.5, 4.0)


def fleet(n_clients: int = 4, n: int = 150, d: int = 5, seed: int = 0) -> list[ClientData]:
    return regression_fleet(n_clients, n, d, seed)


def pooled(clients: list[ClientData]) -> tuple[np.ndarray, np.ndarray]:
    X = np.vstack([c.X for c in clients]).astype(np.float32).astype(np.float64)
    return X, np.concatenate([c.y for c in clients]).astype(np.float64)


def lattice_z(y: np.ndarray, clip: TargetClip) -> np.ndarray:
    """The reference ``z`` on the lattice, written out independently of the gateway's code."""
    low, high = clip.centre - clip.half_width, clip.centre + clip.half_width
    return np.rint((np.minimum(np.maximum(y, low), high) - clip.centre) / clip.half_width * COUNT_SCALE) / COUNT_SCALE


def exact_fetchers(
    X: np.ndarray, y: np.ndarray, edges: list[np.ndarray], n_trees: int, clip: TargetClip, sigma: float = 0.0
):
    """``fetch_histograms``/``fetch_leaves`` that sum the pooled windows exactly, reporting
    ``sigma`` as the releases' noise."""
    S = max(e.shape[0] for e in edges) + 2
    z = lattice_z(y, clip)

    def histograms() -> NoisyCounts:
        out = np.zeros((X.shape[1], S, 2))
        for j, e in enumerate(edges):
            slot = np.where(np.isnan(X[:, j]), S - 1, np.searchsorted(e.astype(np.float64), X[:, j], side="right"))
            np.add.at(out[j], (slot, 0), 1.0)
            np.add.at(out[j], (slot, 1), z)
        return NoisyCounts(out, sigma)

    def leaves(splits: SplitDecisions, leaf_tree: np.ndarray, leaf_id: np.ndarray) -> NoisyCounts:
        node = route(X, splits, n_trees)
        return NoisyCounts(
            np.array(
                [[np.sum(node[t] == i), z[node[t] == i].sum()] for t, i in zip(leaf_tree, leaf_id)], dtype=np.float64
            ),
            sigma,
        )

    return histograms, leaves


def octave_cells(*targets: float) -> np.ndarray:
    """The target range release's cells (octaves of the float32 keys) of ``targets``."""
    return float32_keys(np.array(targets))[0] >> (32 - RANGE_BITS)


def variance_decrease(x: np.ndarray, z: np.ndarray, threshold: float) -> float:
    """The root's decrease of the variance of ``z`` by ``x < threshold`` (NaN right)."""
    left = x < threshold
    return float(
        z.var()
        - left.mean() * (z[left].var() if left.any() else 0.0)
        - (~left).mean() * (z[~left].var() if (~left).any() else 0.0)
    )


# --- federated == pooled with exact sums -----------------------------------------------------------


def test_private_regression_growth_from_exact_sums_equals_the_pooled_reference() -> None:
    X, y = pooled(fleet(d=6))
    edges = quantile_edges(X)
    T, keep = 5, 3
    grown = grow_private_forest(
        PrivateForestPlan(T, 4, keep, "mse", target=CLIP), edges, 7, *exact_fetchers(X, y, edges, T, CLIP)
    )
    z = lattice_z(y, CLIP)
    best = np.array([max(variance_decrease(X[:, j], z, float(e)) for e in edges[j]) for j in range(X.shape[1])])
    np.testing.assert_allclose(grown.screening.score, best, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(grown.screening.features, np.sort(np.argsort(-best, kind="stable")[:keep]))
    assert set(grown.screening.features.tolist()) >= {0, 1}  # the two features y depends on
    np.testing.assert_allclose(grown.screening.prior, [1.0, z.mean()], rtol=0, atol=1e-12)
    node = route(X, grown.structure.splits, T)
    for t, tree in enumerate(grown.trees):
        for leaf in np.flatnonzero(tree.feature < 0).tolist():
            here = node[t] == leaf
            want = CLIP.centre + CLIP.half_width * (z[here].mean() if here.any() else z.mean())
            np.testing.assert_allclose(tree.value[leaf], [want], rtol=0, atol=1e-9)
    low, high = CLIP.centre - CLIP.half_width, CLIP.centre + CLIP.half_width
    assert all(((t.value >= low - 1e-12) & (t.value <= high + 1e-12)).all() for t in grown.trees)


def test_with_zero_noise_shares_a_simulated_job_grows_the_forest_of_exact_pooled_sums(monkeypatch) -> None:
    """The gateways' encoding, secure aggregation and the server's decoding change nothing: with
    every noise share zeroed (the server still believes in its noise: its thresholds and
    shrinkage use the budget's sigma) the model equals the forest grown from exact pooled sums
    with the same edges, public range, seed and sigma."""
    zero = lambda shape, mu, shares, rng=None: np.zeros(shape, dtype=np.int64)  # noqa: E731
    monkeypatch.setattr(client_module, "skellam_share", zero)
    monkeypatch.setattr(client_sums, "skellam_share", zero)
    seen = {}
    grow = private_module.grow_private_forest

    def spy(plan, edges, seed, fetch_histograms, fetch_leaves):
        def histograms():
            seen["sigma"] = (released := fetch_histograms()).sigma
            return released

        def leaves(*args):
            seen["leaf_sigma"] = (released := fetch_leaves(*args)).sigma
            return released

        seen.update(plan=plan, edges=edges, seed=seed)
        return grow(plan, edges, seed, histograms, leaves)

    monkeypatch.setattr(private_module, "grow_private_forest", spy)
    budget = private_module.ReleasePlan.budget
    planned: list[private_module.ReleasePlan] = []  # the shares the job's budget was made from
    monkeypatch.setattr(
        private_module.ReleasePlan, "budget", lambda self, *args: (planned.append(self), budget(self, *args))[1]
    )
    clients = fleet()
    model = Simulation(clients).run(FedForest(task="regression", n_trees=4, max_depth=4), seed=3)
    assert model.metadata["protocol"] == "private"
    plan, edges = seen["plan"], seen["edges"]
    assert seen["sigma"] > 0 and plan.target is not None
    assert plan.structure == "marginal" and plan.keep == clients[0].X.shape[1]  # every feature
    assert plan.leaf_sigma == pytest.approx(seen["leaf_sigma"], rel=1e-12)  # the noise it weighs splits by
    assert planned == [REGRESSION_RELEASE_PLAN]
    X, y = pooled(clients)
    hist, _ = exact_fetchers(X, y, edges, plan.n_trees, plan.target, seen["sigma"])
    _, leaves = exact_fetchers(X, y, edges, plan.n_trees, plan.target, seen["leaf_sigma"])
    want = grow(plan, edges, seen["seed"], hist, leaves)
    for got, ref in zip(model.trees, want.trees):
        np.testing.assert_array_equal(got.feature, ref.feature)
        np.testing.assert_array_equal(got.threshold, ref.threshold)
        np.testing.assert_allclose(got.value, ref.value, rtol=0, atol=1e-9)


def test_the_gateways_vectors_without_their_noise_add_up_to_the_pooled_sums() -> None:
    clients = fleet()
    X, y = pooled(clients)
    edges = quantile_edges(X)
    values, offsets = pack_edges(edges)
    T, S = 3, max(e.shape[0] for e in edges) + 2
    forest = grow_private_forest(
        PrivateForestPlan(T, 3, 2, "mse", target=CLIP), edges, 1, *exact_fetchers(X, y, edges, T, CLIP)
    ).structure
    noise = NoiseShare(50.0, len(clients), COUNT_SCALE)
    totals = [0, 0]
    for k, c in enumerate(clients):
        task = ForestTask(
            "regression", "mse", "", X.shape[1], T, k, np.arange(T), 0, bootstrap=False, n_clients=len(clients)
        )
        half = FedForestClient(c)
        for i, body in enumerate(
            (
                PrivateForestHistogramRequest(task, np.arange(X.shape[1]), values, offsets, noise, target_clip=CLIP),
                PrivateForestLeavesRequest(
                    task, forest.splits, forest.leaf_tree, forest.leaf_id, noise, target_clip=CLIP
                ),
            )
        ):
            half.noise_rng = np.random.default_rng([5, k, i])
            reply = (half.on_private_histograms if i == 0 else half.on_private_leaves)(
                Message.create(body, sender="aggregator", job="j", round=i)
            )
            drawn = skellam_share(body.length, noise.mu, noise.shares, np.random.default_rng([5, k, i]))
            totals[i] = totals[i] + (reply.sums.values.astype(np.uint32).view(np.int32).astype(np.int64) - drawn)
    want_hist, want_leaves = exact_fetchers(X, y, edges, T, CLIP)
    np.testing.assert_allclose(totals[0].reshape(X.shape[1], S, 2) / COUNT_SCALE, want_hist().counts, atol=1e-9)
    np.testing.assert_allclose(
        totals[1].reshape(-1, 2) / COUNT_SCALE,
        want_leaves(forest.splits, forest.leaf_tree, forest.leaf_id).counts,
        atol=1e-9,
    )


# --- the defaults, the public range --------------------------------------------------------------


def test_regression_defaults_to_the_private_protocol_and_reports_its_range() -> None:
    config = FedForest(task="regression", n_trees=4, max_depth=3)
    assert config.protocol == "private" and config.secure_aggregation
    assert FedForest(task="regression", secure_aggregation=False).protocol == "histogram"
    model = Simulation(fleet()).run(config)
    meta = model.metadata
    assert model.n_outputs == 1 and 7.0 < meta["dp_epsilon"] <= 8.0
    assert meta["n_bins"] == 16  # 600 windows: the fewest bins
    assert len(model.trees) == meta["n_trees"] == 1  # its trees would share one structure: one tree
    assert meta["dp_target_low"] < 0.0 < 3.0 < meta["dp_target_high"] < 15.0  # about y's bulk, not its noise
    X, y = pooled(fleet())
    prediction = model.predict(X).ravel()
    assert prediction.min() >= meta["dp_target_low"] and prediction.max() <= meta["dp_target_high"]


def test_a_job_given_its_target_range_makes_no_range_release_and_trains_where_the_release_cannot(
    monkeypatch,
) -> None:
    """A fleet too small for epsilon 0.5 to read its targets' range is refused in one line;
    given the range (public knowledge), the same job trains within it and makes no range
    release. A JSON list is a pair; a classification cannot take a range."""
    small = fleet(n_clients=3, n=40)
    refused = Simulation(small)
    for i, participant in enumerate(refused.participants.values()):
        participant.seed_noise(40 + i)  # draws that put no cell above the threshold (most do)
    with pytest.raises(TargetRangeUnreadable) as info:
        refused.run(FedForest(task="regression", n_trees=1, max_depth=2, dp_epsilon=0.5))
    assert "\n" not in str(info.value) and "target_range" in str(info.value)
    made = []
    release = fleet_module.release_target_range
    monkeypatch.setattr(fleet_module, "release_target_range", lambda *a, **k: made.append(1) or release(*a, **k))
    config = FedForest(task="regression", n_trees=1, max_depth=2, dp_epsilon=0.5, target_range=[-5, 15])
    assert config.target_range == (-5.0, 15.0)
    model = Simulation(small).run(config)
    assert not made and (model.metadata["dp_target_low"], model.metadata["dp_target_high"]) == (-5.0, 15.0)
    X, _ = pooled(small)
    assert -5.0 <= model.predict(X).min() and model.predict(X).max() <= 15.0
    with pytest.raises(ValueError, match="task='regression'"):
        FedForest(target_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="low < high"):
        FedForest(task="regression", target_range=(1.0, 1.0))


def test_the_public_range_spans_the_full_octaves_and_clips_outliers() -> None:
    counts = np.zeros(1 << RANGE_BITS)
    keys = octave_cells(-3.0, -1.5, 0.7, 1.5, 3.0, 5.0, 1e6, 3e9)
    counts[keys] = [40.0, 30.0, 90.0, 50.0, 70.0, 60.0, 2.0, 15.0]  # 1e6: below the threshold; 3e9: alone
    clip = target_range(counts, min_count=10.0)
    np.testing.assert_allclose([clip.centre - clip.half_width, clip.centre + clip.half_width], [-4.0, 8.0], rtol=1e-6)


def test_a_range_release_with_nothing_above_its_noise_is_refused() -> None:
    """At a budget too small for the fleet the fullest octave is as likely noise as targets:
    ranged over, it gave 5 of 40 trainings on 354 windows at epsilon 1 a range like [-1.8e16,
    -9e15] and predictions to match. Refused instead, saying what would help (a job stops with
    this line: ``test_a_job_given_its_target_range...``)."""
    counts = np.zeros(1 << RANGE_BITS)
    bulk = octave_cells(40.0, 90.0, 200.0, 300.0)
    counts[bulk] = [30.0, 90.0, 140.0, 50.0]
    counts[75] = 150.0  # a noise cell (octave of -1e16) the fullest
    with pytest.raises(TargetRangeUnreadable, match="nothing above their noise") as info:
        target_range(counts, min_count=164.0)
    assert "\n" not in str(info.value) and "raise dp_epsilon" in str(info.value)
    with pytest.raises(TargetRangeUnreadable):
        target_range(np.zeros(1 << RANGE_BITS), 10.0)
    for end in (0, (1 << RANGE_BITS) - 1):  # octaves reaching float32's infinities hold no target
        lone = np.zeros(1 << RANGE_BITS)
        lone[end] = 1e6
        with pytest.raises(TargetRangeUnreadable):
            target_range(lone, 10.0)
    counts[bulk[2]] = 400.0  # the targets' octave clearly above the noise: read
    assert target_range(counts, min_count=164.0) == TargetClip(192.0, 64.0)


def test_the_range_starts_from_the_run_holding_most_windows_not_the_fullest_cell() -> None:
    """A noise cell above the threshold but alone can be the fullest while the targets' octaves
    are only a little above it: the range starts from the run with the most windows."""
    counts = np.zeros(1 << RANGE_BITS)
    counts[octave_cells(90.0, 200.0, 400.0)] = [170.0, 180.0, 170.0]
    counts[[74, 75]] = [90.0, 200.0]  # noise near -1e16: a full run with the fullest cell, 290 windows
    assert target_range(counts, min_count=164.0) == TargetClip(288.0, 224.0)  # [64, 512)


def test_the_narrowing_ignores_the_runs_the_range_left_out() -> None:
    """A far pair of noise octaves holding 2.7 % of the windows is not ranged over, and does not
    count as windows outside the narrowed range either (it would keep the octave range)."""
    counts = np.zeros(1 << RANGE_BITS)
    counts[[0x100 + 128, 0x100 + 129, 0x100 + 130]] = [200.0, 500.0, 300.0]  # [2, 4) .. [8, 16)
    counts[[0x100 + 200, 0x100 + 201]] = [14.0, 14.0]  # about 2**73: noise, not enough to count alone
    clip = target_range(counts, 10.0)
    assert clip == TargetClip(9.0, 7.0)
    assert spread_clip(clip, counts, 10.0, np.array([4.0, 6.0, 8.0], np.float32), 6.0) == TargetClip(6.0, 4.0)


def test_a_weak_run_joins_the_range_only_near_it() -> None:
    """A run of full octaves with too few windows to count alone joins within RANGE_NEAR times
    the range's width of it ([32, 64) beside [2, 8)), not far away ([2**20, 2**21))."""
    counts = np.zeros(1 << RANGE_BITS)
    keys = octave_cells(3.0, 5.0, 40.0, 100.0, 1.5e6, 3e6)
    counts[keys] = [100.0, 100.0, 12.0, 6.0, 12.0, 6.0]
    clip = target_range(counts, min_count=10.0)
    assert (clip.centre - clip.half_width, clip.centre + clip.half_width) == (2.0, 64.0)


def test_a_far_pair_of_noise_cells_does_not_stretch_the_public_range() -> None:
    """Two adjacent cells of noise just above the thresholds, octaves away from the targets,
    happen about once in 7,000 releases (measured with the release's noise on the paper's
    covariate-shift targets); ranged over, they put the range's width at 1e28 and the model's
    predictions with it. A far run that holds real mass still joins."""
    counts = np.zeros(1 << RANGE_BITS)
    bulk = octave_cells(-3.0, -1.5, 0.7, 1.5, 3.0, 5.0)
    counts[bulk] = [40.0, 30.0, 90.0, 50.0, 70.0, 60.0]
    far = octave_cells(-1.5e28, -3e28)
    counts[far] = [14.0, 12.0]  # two full cells, 26 windows: under 2 x 10 x sqrt(2)
    clip = target_range(counts, min_count=10.0)
    np.testing.assert_allclose([clip.centre - clip.half_width, clip.centre + clip.half_width], [-4.0, 8.0], rtol=1e-6)
    mode = octave_cells(1500.0)
    counts[mode] = 22.0  # a far mode of 36 windows in two cells: above 2 x 10 x sqrt(2), under 2 x 10 x 2
    counts[mode - 1] = 14.0
    clip = target_range(counts, min_count=10.0)
    np.testing.assert_allclose(
        [clip.centre - clip.half_width, clip.centre + clip.half_width], [-4.0, 2048.0], rtol=1e-6
    )


# --- a gateway that lies ------------------------------------------------------------------------


@pytest.mark.parametrize("release", ["PrivateForestHistogramRequest", "PrivateForestLeavesRequest"])
def test_a_gateway_whose_target_sums_leave_the_public_range_stops_the_job_in_one_line(release: str) -> None:
    """One gateway multiplies its sums of z by 1000 in every cell of one release: the groups'
    totals still agree with each other (every feature, every tree is scaled alike), but the sums
    exceed the windows they are over -- targets beyond the public range -- and the job stops."""
    sim = Simulation(fleet())
    half = sim.participants["gw-1"].halves["fedforest"]
    honest = half._private_reply

    def lying(message, sums, body):
        if type(message.body).__name__ == release:
            sums = sums.reshape(-1, 2) * np.array([1, 1000])
        return honest(message, sums.ravel(), body)

    half._private_reply = lying
    with pytest.raises(TrainingError, match="beyond the public range") as info:
        sim.run(FedForest(task="regression", n_trees=4, max_depth=3))
    assert "\n" not in str(info.value)


# --- what the server decodes: a window alone in a cell ----------------------------------------------


def _lonely(target: float) -> list[ClientData]:
    return lonely_window(fleet(n_clients=3, n=300, d=3, seed=1), target)


def _missing_cell(algorithm: FedForest, clients: list[ClientData], noise_seed: int) -> np.ndarray:
    """Feature 0's missing slot at the root as the server decodes it: ``[windows, Σ y]``."""
    for request, total in decoded_sums(algorithm, clients, noise_seed):
        if isinstance(request, PrivateForestHistogramRequest):
            cell = total.reshape(request.features.shape[0], request.slots, 2)[0, -1] / COUNT_SCALE
            return np.array([cell[0], request.target_clip.centre * cell[0] + request.target_clip.half_width * cell[1]])
        if type(request).__name__ == "ForestHistogramRequest":  # (pairs, slots, [windows, w, w y, w y^2])
            pair = int(np.flatnonzero(request.features[: request.feature_offsets[1]] == 0)[0])
            cell = total.reshape(request.features.shape[0], request.slots, request.terms)[pair, -1]
            return np.array([cell[0], cell[2] / 2.0**request.frac_bits + request.node_shift[0] * cell[1]])
    raise AssertionError("no release covered feature 0's missing slot")


def test_the_default_protocol_does_not_give_away_a_lonely_window_s_target() -> None:
    """A window alone in a cell, of target 0 or 6 (both within the public range): reading the
    target off the decoded cell (its sum over its count) names it within 1 every time from the
    histogram protocol's exact sums, from the private default's noisy release (dp_epsilon 1)
    no better than a coin."""
    hits = []
    for trial in range(12):
        target = 6.0 * (trial % 2)
        n, total = _missing_cell(
            FedForest(task="regression", n_trees=2, max_depth=2, dp_epsilon=1.0), _lonely(target), trial
        )
        guess = 6.0 * (total / max(n, 1e-9) > 3.0)
        hits.append(guess == target)
    assert np.mean(hits) <= 0.85
    n, total = _missing_cell(
        FedForest(
            task="regression",
            n_trees=2,
            max_depth=2,
            max_features=None,
            protocol="histogram",
            bootstrap=False,
            min_crowd=0,
        ),
        _lonely(6.0),
        0,
    )
    assert n == 1 and abs(total - 6.0) < 1e-6  # the non-private protocol: the window's target, exactly


def test_an_empty_leaf_takes_its_parent_s_mean_when_shrunk_to_the_parent() -> None:
    """With noise (sigma > 0) every node is shrunk; ``shrink_to_parent`` shrinks towards the
    parent's value, so a leaf without windows predicts its parent's (noisy) mean, not the
    fleet's."""
    X, y = pooled(fleet(d=3))
    edges = quantile_edges(X)
    hist, leaves = exact_fetchers(X, y, edges, 1, CLIP, sigma=1.0)

    def emptied(splits, leaf_tree, leaf_id):
        released = leaves(splits, leaf_tree, leaf_id)
        released.counts[0] = 0.0  # the first leaf holds nothing
        return released

    for to_parent in (False, True):
        plan = PrivateForestPlan(1, 3, 3, "mse", target=CLIP, shrink_to_parent=to_parent)
        grown = grow_private_forest(plan, edges, 0, hist, emptied)
        tree, leaf = grown.trees[0], int(grown.structure.leaf_id[0])
        parent = int(np.flatnonzero((tree.left == leaf) | (tree.right == leaf))[0])
        fleet_mean = CLIP.centre + CLIP.half_width * grown.screening.prior[1]
        want = tree.value[parent, 0] if to_parent else fleet_mean
        assert tree.value[leaf, 0] == pytest.approx(want, abs=1e-12)


# --- the structure from the root release's marginals -----------------------------------------------


def marginal_reference(X: np.ndarray, z: np.ndarray, edges: list[np.ndarray], depth: int) -> list[tuple]:
    """The splits ``(depth, feature, threshold)`` of the marginal structure, written out from the
    pooled windows: a node's windows estimated as the fleet's times every feature's share inside
    the node's box, and a split scored by ``n p (1 - p) (m_L - m_R)^2`` with ``p`` and the means
    ``m`` read in the split feature's marginal within the box (no noise: every gain above 0
    splits). Missing values lie in the rightmost box of their feature."""
    d, N = X.shape[1], z.shape[0]
    out: list[tuple] = []

    def in_box(j: int, lo: float, hi: float) -> np.ndarray:
        x = X[:, j]
        inside = (x >= lo) & (x < hi)
        return inside | np.isnan(x) if hi == np.inf else inside

    def grow(box: list[tuple[float, float]], level: int) -> None:
        if level == depth:
            return
        n = N * np.prod([in_box(j, *box[j]).mean() for j in range(d)])
        best, best_gain = None, 0.0
        for j in range(d):
            here = in_box(j, *box[j])
            for t in edges[j][(edges[j] > box[j][0]) & (edges[j] < box[j][1])].astype(np.float64):
                left, right = here & (X[:, j] < t), here & ~(X[:, j] < t)
                if not left.any() or not right.any():
                    continue
                p = left.sum() / here.sum()
                gain = n * p * (1 - p) * (z[left].mean() - z[right].mean()) ** 2
                if gain > best_gain + 1e-12:
                    best, best_gain = (j, t), gain
        if best is None:
            return
        j, t = best
        out.append((level, j, t))
        grow([(box[i][0], t) if i == j else box[i] for i in range(d)], level + 1)
        grow([(t, box[i][1]) if i == j else box[i] for i in range(d)], level + 1)

    grow([(-np.inf, np.inf)] * d, 0)
    return sorted(out, key=lambda r: r[0])  # level order (stable: depth first within a level)


def test_the_marginal_structure_from_exact_sums_is_the_pooled_reference() -> None:
    """With exact sums and no noise the regression structure is :func:`marginal_reference`'s,
    split for split, and its leaves hold the pooled means; it grows one tree (more would repeat
    it)."""
    X, y = pooled(fleet(d=4))
    edges = quantile_edges(X)
    z = lattice_z(y, CLIP)
    T, depth = 1, 3
    with pytest.raises(ValueError, match="grows one tree"):
        PrivateForestPlan(3, depth, 4, "mse", target=CLIP, structure="marginal")
    plan = PrivateForestPlan(T, depth, 4, "mse", target=CLIP, structure="marginal")
    grown = grow_private_forest(plan, edges, 7, *exact_fetchers(X, y, edges, T, CLIP))
    want = marginal_reference(X, z, edges, depth)
    s = grown.structure.splits
    assert len(want) > 4 and s.level.shape[0] == T * len(want)
    for t in range(T):
        mine = s.tree == t
        got = sorted(zip(s.level[mine].tolist(), s.feature[mine].tolist(), s.threshold[mine].tolist()))
        assert got == sorted(want)
    assert {j for _, j, _ in want} == {0, 1}  # the two features y depends on, and no other
    node = route(X, s, T)
    for t, tree in enumerate(grown.trees):
        for leaf in np.flatnonzero(tree.feature < 0).tolist():
            here = node[t] == leaf
            if here.any():
                np.testing.assert_allclose(
                    tree.value[leaf], [CLIP.centre + CLIP.half_width * z[here].mean()], atol=1e-9
                )


def test_the_noisier_the_leaves_the_fewer_the_marginal_splits() -> None:
    """A split must gain more than the noise it adds to the leaves: as the leaves' noise grows,
    the structure shrinks to a stump, then to a single leaf (the fleet mean)."""
    X, y = pooled(fleet(d=3))
    edges = quantile_edges(X)
    sizes = []
    for sigma in (0.0, 2.0, 20.0, 1e4):
        plan = PrivateForestPlan(1, 4, 3, "mse", target=CLIP, structure="marginal", leaf_sigma=sigma)
        grown = grow_private_forest(plan, edges, 0, *exact_fetchers(X, y, edges, 1, CLIP))
        sizes.append(grown.trees[0].n_nodes)
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[2] and sizes[-1] == 1


def test_on_an_additive_target_the_marginal_structure_beats_random_splits() -> None:
    """Where the marginals tell the node statistics (independent features, additive target) the
    marginal structure's one tree fits far better than a forest of random splits, both from
    exact sums (what the structure costs by itself)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 4))
    y = 3.0 * (X[:, 0] > 0) + X[:, 1] + rng.normal(0.0, 0.1, 2000)
    edges = quantile_edges(X, 16)
    X_test = rng.normal(size=(2000, 4))  # one test set for both
    y_test = 3.0 * (X_test[:, 0] > 0) + X_test[:, 1]
    errors = {}
    for structure, T in (("random", 5), ("marginal", 1)):  # the marginal structure grows one tree
        plan = PrivateForestPlan(T, 6, 4, "mse", target=CLIP, structure=structure)
        grown = grow_private_forest(plan, edges, 0, *exact_fetchers(X, y, edges, T, CLIP))
        node = route(X_test, grown.structure.splits, T)
        prediction = np.mean([tree.value[node[t], 0] for t, tree in enumerate(grown.trees)], axis=0)
        errors[structure] = float(np.mean((prediction - y_test) ** 2))
    assert errors["marginal"] < 0.5 * errors["random"], errors


def test_a_marginal_split_is_taken_exactly_while_it_gains_more_than_the_noise_costs() -> None:
    """The node count, the root noise's share of the gap and the leaves' noise cost, pinned with
    numbers worked out by hand: feature 1's box holds 70 % of the windows, so the node holds 70;
    feature 0's one split sends 40 % of them left with mean z -0.5 against 0.5, its sides summing
    2 and 3 release cells. The split is taken just below the leaf noise where gain and cost
    are equal, and not just above it."""
    groups = [
        np.array([[40.0, -20.0, 2.0], [60.0, 30.0, 3.0]]),
        np.array([[30.0, 0.0, 1.0], [70.0, 0.0, 1.0]]),
    ]
    low, high = np.array([0, 1]), np.array([1, 1])  # feature 1 already split: no candidate there
    n, p, root_noise = 70.0, 0.4, 10.0
    bias = root_noise**2 * (1.25 * 2 / 40**2 + 1.25 * 3 / 60**2)  # (1 + m^2) k / n_side^2 per side
    gain = n * p * (1 - p) * (1.0 - bias)
    per_noise = (1 + 0.1**2) * (1 / (n * p) + 1 / (n * (1 - p)) - 1 / n)  # the node's mean z is 0.1
    balance = np.sqrt(gain / per_noise)
    assert marginal_split(groups, 100.0, low, high, 0.999 * balance, root_noise) == (0, 0)
    assert marginal_split(groups, 100.0, low, high, 1.001 * balance, root_noise) is None
    # without the root noise's share the balance lies higher: the term is not a no-op
    assert marginal_split(groups, 100.0, low, high, 1.001 * balance, 0.0) == (0, 0)


def test_a_private_regression_sizes_its_bins_to_the_fleet() -> None:
    """Without ``n_bins`` the bins follow round 1's noisy window count, about 50 windows a bin
    from 16 to 64 (600 windows: 16, as the test above; 8,000: 64); ``n_bins`` set is kept."""
    clients = fleet(n_clients=4, n=2000, d=3)
    assert Simulation(clients).run(FedForest(task="regression", n_trees=2, max_depth=3)).metadata["n_bins"] == 64
    kept = Simulation(clients).run(FedForest(task="regression", n_trees=2, max_depth=3, n_bins=16))
    assert kept.metadata["n_bins"] == 16
