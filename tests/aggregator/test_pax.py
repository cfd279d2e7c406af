"""PAX (the FedSCS-XGB paper's baseline) end to end in simulation, and its surrogate histogram.

Oracles:
* one party: nothing to align, so PAX is histogram XGBoost on that party's cuts -- margins equal
  ``xgboost.train(tree_method="hist")``'s to float32 precision over several rounds (the data hold
  few distinct values per feature, so both give every value its own bin);
* the surrogate histogram folded from the parties' own histograms equals the one built window by
  window from its definition (each window counted at its party bin's upper cut), exactly;
* the candidate grid is the union of the parties' cuts when small, else quantiles drawn from it;
* the same data give the same model bit for bit; a toy problem is learnt.
"""

from __future__ import annotations

import numpy as np
import pytest

import aggregator
from aggregator.baselines import PAX
from aggregator.baselines.pax import PartyGrid, global_grid, slot_maps, surrogate_histogram
from edge_client.training_data import ClientData
from shared.sketches import bin_ids, exact_edges
from tests.aggregator.test_fedscs_xgb import make_clients, pooled

xgb = pytest.importorskip("xgboost")


def discrete_party(seed: int, n: int = 400, d: int = 4):
    """Integer features 0..9 (every value ~10 % of the windows), 3 classes."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 10, size=(n, d)).astype(np.float64)
    score = X[:, 0] + 0.5 * X[:, 1] - 0.3 * X[:, 2] + rng.normal(scale=1.5, size=n)
    y = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    return X, y


def test_one_party_equals_xgboost_hist_on_its_cuts() -> None:
    X, y = discrete_party(0)
    config = PAX(n_rounds=5, max_depth=3, n_bins=64, learning_rate=0.3, gamma=0.2, reg_lambda=1.0)
    model = aggregator.simulate(config, [ClientData("only", X, y)])
    booster = xgb.train(
        dict(
            objective="multi:softprob",
            num_class=3,
            tree_method="hist",
            max_bin=64,
            max_depth=3,
            eta=0.3,
            gamma=0.2,
            reg_lambda=1.0,
            min_child_weight=1.0,
            nthread=1,
            seed=0,
        ),
        xgb.DMatrix(X.astype(np.float32), label=y),
        num_boost_round=5,
    )
    theirs = booster.predict(xgb.DMatrix(X.astype(np.float32)), output_margin=True)
    ours = model.predict_margin(X.astype(np.float32))
    assert model.n_trees == 15
    assert sum(t.n_nodes for t in model.trees) > 15 * 5  # real trees, not stumps
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5)


def test_surrogate_histogram_equals_its_definition_window_by_window() -> None:
    """Fold each party's histogram (on its cuts plus extra thresholds) onto the grid; compare with
    placing every window at the upper cut of its own party bin, then binning on the grid."""
    rng = np.random.default_rng(3)
    d, n_bins = 3, 8
    parties = [rng.normal(loc=0.4 * k, scale=1 + 0.3 * k, size=(200 + 30 * k, d)).astype(np.float32) for k in range(3)]
    for X in parties:
        X[rng.random(X.shape) < 0.05] = np.nan
    cuts = [[exact_edges(X[:, j], None, n_bins) for j in range(d)] for X in parties]
    grid = [global_grid([c[j] for c in cuts], [X.shape[0] for X in parties], n_bins) for j in range(d)]
    grid_slots = max(g.size for g in grid) + 2
    extra = [np.float32(rng.normal(size=2)) for _ in range(d)]  # thresholds a round has chosen
    got = np.zeros((1, 3, d, grid_slots), np.int64)
    want = np.zeros_like(got)
    for X, party_cuts in zip(parties, cuts):
        g = rng.integers(-50, 50, size=X.shape[0])  # fixed-point gradients, one node, all windows
        stats = np.stack([g, np.abs(g), np.ones_like(g)])
        grids = [PartyGrid.with_thresholds(party_cuts[j], extra[j]) for j in range(d)]
        S = max(pg.edges.size for pg in grids) + 2
        hist = np.zeros((1, 3, d, S), np.int64)
        for j, pg in enumerate(grids):
            b = bin_ids(X[:, j], pg.edges)
            b = np.where(b == pg.edges.size + 1, S - 1, b)
            for s in range(3):
                np.add.at(hist[0, s, j], b, stats[s])
        maps = slot_maps([pg.surrogate_slots(grid[j]) for j, pg in enumerate(grids)], S, grid, grid_slots)
        got += surrogate_histogram(hist, maps, grid_slots)
        for j in range(d):  # the definition
            x = X[:, j].astype(np.float64)
            own_bin = bin_ids(X[:, j], party_cuts[j]).astype(np.int64).clip(max=party_cuts[j].size)
            upper = np.append(party_cuts[j].astype(np.float64), np.inf)[own_bin]
            slot = np.where(np.isnan(x), grid_slots - 1, np.searchsorted(grid[j].astype(np.float64), upper, "left"))
            for s in range(3):
                np.add.at(want[0, s, j], slot, stats[s])
    np.testing.assert_array_equal(got, want)
    assert (got[0, 2].sum(axis=1) == sum(X.shape[0] for X in parties)).all()


def test_the_grid_is_the_union_of_the_cuts_or_quantiles_drawn_from_it() -> None:
    a, b = np.float32([0.0, 1.0, 2.0]), np.float32([0.5, 1.0, 3.0])
    np.testing.assert_array_equal(global_grid([a, b], [10, 10], 8), np.float32([0, 0.5, 1, 2, 3]))
    reduced = global_grid([a, b], [10, 10], 3)
    assert reduced.size <= 2 and np.isin(reduced, np.union1d(a, b)).all()
    # a party with 9x the windows pulls the quantiles to its own cuts
    heavy = global_grid([np.float32([0, 1, 2]), np.float32([10, 11, 12])], [900, 100], 3)
    assert (heavy <= 2).all()


def test_straddling_party_bins_count_on_the_right() -> None:
    """Party cuts [1, 3]; the grid holds 2 (another party's cut): the party bin [1, 3) is counted
    at 3, i.e. right of the threshold 2, whatever the request's own edges."""
    party = PartyGrid.with_thresholds(np.float32([1, 3]), np.float32([2]))
    np.testing.assert_array_equal(party.edges, np.float32([1, 2, 3]))
    grid = np.float32([1, 2, 3])
    # slots: x<1, [1,2), [2,3), >=3 -> grid bins 0, 2, 2, 3; then padding, missing
    np.testing.assert_array_equal(party.surrogate_slots(grid), [0, 2, 2, 3])
    np.testing.assert_array_equal(slot_maps([party.surrogate_slots(grid)], 6, [grid], 5), [[0, 2, 2, 3, 3, 4]])


def test_same_data_same_model_and_a_toy_problem_is_learnt() -> None:
    clients = make_clients(1)
    config = PAX(n_rounds=8, max_depth=3, n_bins=32)
    a = aggregator.simulate(config, clients, seed=0)
    b = aggregator.simulate(config, clients, seed=5)
    assert a.trees == b.trees
    X, y = pooled(clients)
    pax_acc = (a.predict(X.astype(np.float32)) == y).mean()
    central = xgb.train(
        dict(
            objective="multi:softprob",
            num_class=3,
            tree_method="hist",
            max_bin=32,
            max_depth=3,
            eta=0.2,
            gamma=0.2,
            nthread=1,
        ),
        xgb.DMatrix(X.astype(np.float32), label=y),
        8,
    )
    central_acc = (central.predict(xgb.DMatrix(X.astype(np.float32))).argmax(axis=1) == y).mean()
    assert pax_acc > 0.8
    assert pax_acc > central_acc - 0.05
    assert a.metadata["algorithm"] == "pax"


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_bins": 1}, "n_bins"),
        ({"n_rounds": -1}, "n_rounds"),
        ({"summary_size": 0}, "summary_size"),
        ({"gamma": -1.0}, "gamma"),
        ({"objective": "poisson"}, "objective"),
    ],
)
def test_bad_settings_are_one_clear_error(kwargs, name) -> None:
    with pytest.raises(ValueError, match=name):
        PAX(**kwargs)
