"""Split maths: Eq. 1 and leaf weights, the bin convention, impurities and pooled gains from
additive summaries (checked on raw samples and against scikit-learn), Fisher ordering (checked
against brute force over all subsets)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shared.model import Tree
from shared.sketches import bin_ids
from shared.splitting import (
    check_edges,
    entropy,
    fisher_order,
    gini,
    impurity,
    leaf_weight,
    mse,
    pooled_gain,
    prefix_summaries,
    split_gain,
)

finite = st.floats(-100, 100, allow_nan=False)
nonneg = st.floats(0, 100, allow_nan=False)


# --- Eq. 1 and leaf weights ------------------------------------------------------------------------


def test_split_gain_by_hand_and_broadcasting() -> None:
    # 1/2 [4/2 + 9/3 - 1/4] - 0.5
    assert split_gain(2.0, 1.0, -3.0, 2.0, 1.0, 0.5) == pytest.approx(0.5 * (2 + 3 - 0.25) - 0.5)
    out = split_gain(np.arange(3.0)[:, None], 1.0, np.arange(4.0)[None, :], 2.0, 1.0)
    assert out.shape == (3, 4)
    assert split_gain(5.0, 2.0, 0.0, 0.0, 1.0, 0.25) == -0.25  # nothing on one side: gain 0 - gamma


@settings(max_examples=200, deadline=None)
@given(finite, nonneg, finite, nonneg, st.floats(1e-3, 10))
def test_gain_is_the_objective_decrease_of_optimal_leaves(gl, hl, gr, hr, lam) -> None:
    """Eq. 1 (gamma = 0) = obj(parent) - obj(left) - obj(right) with obj(w) = G w + (H + lambda) w^2 / 2
    at the optimal weight w = leaf_weight. (It can be negative: lambda regularises both children.)"""

    def best_objective(g, h):
        w = leaf_weight(g, h, lam)
        return g * w + 0.5 * (h + lam) * w * w

    expected = best_objective(gl + gr, hl + hr) - best_objective(gl, hl) - best_objective(gr, hr)
    gain = split_gain(gl, hl, gr, hr, lam)
    scale = 1.0 + (gl * gl + gr * gr) / lam
    assert gain == pytest.approx(expected, abs=1e-9 * scale)


def test_leaf_weight() -> None:
    np.testing.assert_allclose(leaf_weight([2.0, -3.0], [1.0, 2.0], 1.0), [-1.0, 1.0])
    assert leaf_weight(1.0, 0.0, 0.0) == 0.0  # H + lambda = 0: weight 0, like XGBoost


# --- bins ------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=8, unique=True),
    hnp.arrays(np.float32, st.integers(1, 30), elements=st.one_of(st.floats(-12, 12, width=32), st.just(np.nan))),
)
def test_bins_agree_with_tree_routing(edge_values, x) -> None:
    """bin <= b iff x < edges[b], i.e. the model's routing of the split with threshold edges[b]."""
    edges = [np.sort(np.array(edge_values, dtype=np.float32))]
    bins = bin_ids(x[:, None], edges)[:, 0].astype(np.int64)
    missing = len(edges[0]) + 1
    np.testing.assert_array_equal(bins == missing, np.isnan(x))
    present = ~np.isnan(x)
    for b, threshold in enumerate(edges[0]):
        np.testing.assert_array_equal(bins[present] <= b, x[present] < threshold)
        tree = Tree.from_arrays(
            feature=[0, -1, -1], threshold=[threshold, 0, 0], left=[1, -1, -1], right=[2, -1, -1], value=[0.0, 1.0, 2.0]
        )
        from shared.model import TreeEnsemble

        model = TreeEnsemble(trees=(tree,), kind="single", link="identity", n_outputs=1, feature_names=("x",))
        routed_left = model.leaves(x[present][:, None])[:, 0] == 1
        np.testing.assert_array_equal(routed_left, bins[present] <= b)


def test_check_edges() -> None:
    with pytest.raises(ValueError, match="increasing"):
        check_edges([np.array([1.0, 1.0])])
    with pytest.raises(ValueError, match="finite"):
        check_edges([np.array([np.nan])])
    with pytest.raises(ValueError, match="1-D"):
        check_edges([np.zeros((2, 2))])


# --- impurities from additive summaries --------------------------------------------------------------


def class_summary(y: np.ndarray, C: int, w: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(y, weights=w, minlength=C).astype(float)


def reg_summary(y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    w = np.ones_like(y) if w is None else w
    return np.array([w.sum(), (w * y).sum(), (w * y * y).sum()])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=40), st.integers(0, 2**32 - 1))
def test_pooled_gain_equals_direct_impurity_decrease(labels, seed) -> None:
    y = np.array(labels)
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 2, y.size)
    goes_left = rng.random(y.size) < 0.5
    yr = y * 1.3 + rng.normal(size=y.size)
    for criterion in ("gini", "entropy"):
        direct = {
            "gini": lambda p: 1 - (p**2).sum(),
            "entropy": lambda p: -(p[p > 0] * np.log2(p[p > 0])).sum(),
        }[criterion]

        def psi(mask, direct=direct):
            if not mask.any():
                return 0.0
            return direct(np.bincount(y[mask], weights=w[mask], minlength=4) / w[mask].sum())

        everything = np.ones(y.size, bool)
        expected = (
            psi(everything)
            - w[goes_left].sum() / w.sum() * psi(goes_left)
            - w[~goes_left].sum() / w.sum() * psi(~goes_left)
        )
        got = pooled_gain(class_summary(y, 4, w), class_summary(y[goes_left], 4, w[goes_left]), criterion)
        assert got == pytest.approx(expected, abs=1e-12)
        assert got >= -1e-12

    def var(mask):
        return (
            0.0
            if not mask.any()
            else np.average((yr[mask] - np.average(yr[mask], weights=w[mask])) ** 2, weights=w[mask])
        )

    everything = np.ones(y.size, bool)
    expected = (
        var(everything)
        - w[goes_left].sum() / w.sum() * var(goes_left)
        - w[~goes_left].sum() / w.sum() * var(~goes_left)
    )
    got = pooled_gain(reg_summary(yr, w), reg_summary(yr[goes_left], w[goes_left]), "mse")
    assert got == pytest.approx(expected, abs=1e-9)


def test_summaries_are_additive_over_clients() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 90)
    parts = np.array_split(rng.permutation(90), 4)
    pooled = class_summary(y, 3)
    np.testing.assert_array_equal(sum(class_summary(y[p], 3) for p in parts), pooled)
    assert gini(pooled) == pytest.approx(1 - ((np.bincount(y) / 90) ** 2).sum())


def test_impurities_match_scikit_learn_nodes() -> None:
    tree_mod = pytest.importorskip("sklearn.tree")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] + rng.normal(scale=0.5, size=300) > 0).astype(int) + (X[:, 1] > 0.5)
    for criterion in ("gini", "entropy"):
        clf = tree_mod.DecisionTreeClassifier(criterion=criterion, max_depth=3, random_state=0).fit(X, y)
        t = clf.tree_
        counts = t.value[:, 0, :] * t.weighted_n_node_samples[:, None]  # sklearn >= 1.4 stores fractions
        np.testing.assert_allclose(impurity(counts, criterion), t.impurity, atol=1e-12)
        internal = t.children_left >= 0
        decrease = pooled_gain(counts[internal], counts[t.children_left[internal]], criterion)
        n, nl, nr = (
            t.weighted_n_node_samples[i] for i in (internal, t.children_left[internal], t.children_right[internal])
        )
        np.testing.assert_allclose(
            decrease,
            t.impurity[internal]
            - nl / n * t.impurity[t.children_left[internal]]
            - nr / n * t.impurity[t.children_right[internal]],
            atol=1e-12,
        )
    yr = X[:, 0] * 2 + rng.normal(size=300)
    reg = tree_mod.DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, yr)
    leaf_of = reg.apply(X)
    t = reg.tree_
    for node in np.flatnonzero(t.children_left == -1):
        mask = leaf_of == node
        assert mse(reg_summary(yr[mask])) == pytest.approx(t.impurity[node], rel=1e-9, abs=1e-12)


def test_empty_nodes_and_edge_cases() -> None:
    assert gini(np.zeros(3)) == 0 and entropy(np.zeros(3)) == 0 and mse(np.zeros(3)) == 0
    assert entropy([5.0, 5.0]) == pytest.approx(1.0)  # base 2
    assert entropy([5.0, 5.0], base=np.e) == pytest.approx(np.log(2))
    assert pooled_gain(np.zeros(2), np.zeros(2), "gini") == 0
    assert pooled_gain([3.0, 1.0], [0.0, 0.0], "gini") == pytest.approx(0.0)
    assert mse([2.0, 2e8, 2e16]) >= 0.0  # constant y = 1e8: cancellation clamped
    with pytest.raises(ValueError):
        impurity([1.0, 2.0], "variance")
    with pytest.raises(ValueError):
        mse([1.0, 2.0])


# --- Fisher ordering ---------------------------------------------------------------------------------


def best_subset_gain(summaries: np.ndarray, criterion: str) -> float:
    m = summaries.shape[0]
    parent = summaries.sum(axis=0)
    best = 0.0
    for r in range(1, m):
        for subset in itertools.combinations(range(m), r):
            best = max(best, float(pooled_gain(parent, summaries[list(subset)].sum(axis=0), criterion)))
    return best


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_fisher_contiguous_groupings_are_optimal(m, seed) -> None:
    """Fisher (regression) and Breiman (binary classification): the best split of categories is
    one of the m-1 contiguous groupings in order of the mean / class-1 proportion."""
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 20, m).astype(float)
    mean = rng.normal(size=m)
    sum_y = n * mean
    sum_y2 = sum_y * mean + n * rng.uniform(0.1, 2, m)
    regression = np.stack([n, sum_y, sum_y2], axis=1)
    ones = np.floor(rng.random(m) * (n + 1))
    binary = np.stack([n - ones, ones], axis=1)
    for summaries, criteria in ((regression, ("mse",)), (binary, ("gini", "entropy"))):
        for criterion in criteria:
            order = fisher_order(summaries, criterion)
            lefts = prefix_summaries(summaries, order)
            assert lefts.shape == (m - 1, summaries.shape[1])
            contiguous = pooled_gain(summaries.sum(axis=0), lefts, criterion).max()
            assert contiguous == pytest.approx(best_subset_gain(summaries, criterion), abs=1e-9)


def test_fisher_order_ties_empties_and_batches() -> None:
    counts = np.array([[1.0, 1.0], [0.0, 0.0], [3.0, 1.0], [2.0, 2.0], [0.0, 5.0]])  # proportions .5, -, .25, .5, 1
    np.testing.assert_array_equal(fisher_order(counts, "gini"), [2, 0, 3, 4, 1])
    batch = np.stack([counts, counts[::-1]])
    np.testing.assert_array_equal(fisher_order(batch, "gini")[1], [2, 1, 4, 0, 3])
    lefts = prefix_summaries(batch, fisher_order(batch, "gini"))
    np.testing.assert_array_equal(lefts[0, 0], [3.0, 1.0])
    np.testing.assert_array_equal(lefts[0, -1], counts.sum(axis=0))  # the empty category adds nothing
