"""FedSCS-XGB server tree growth (``aggregator.algorithms.histogram_growth``).

Three oracles:

1. A brute-force reference booster written here straight from Eq. 1: per node, per feature, per
   edge, per missing direction, Python loops over the raw feature values (``x < edge`` goes left,
   NaN follows the direction). With dyadic statistics (multiples of 1/8) every sum is exact in
   any order, so the two implementations compute bit-identical gains and must agree *exactly*,
   ties included (which makes the tie-break testable). With continuous statistics they must agree
   in structure and to 1e-9 in the leaves.
2. Atoms vs samples (Lemma 1): per-sample rows, atoms merged on one client, and atoms merged on
   several clients then again on the server give the same tree. Merging re-associates the sums of
   G and H, so with continuous statistics gains differ by ~1e-16 relative: structure must be
   identical unless two candidate gains are that close (random data: never in practice), leaves
   within 1e-9. With dyadic statistics the trees are bit-identical.
3. XGBoost 3.x ``hist`` with its own cuts as our edges, one round of softmax with random base
   margins and sample weights (no exact gain ties), gradients from ``shared.objectives``: same
   splits, thresholds and default directions; leaves and covers to float32 precision; the same
   ``gamma`` (XGBoost's ``min_split_loss``) prunes the same splits. Documented gaps tested
   around, not hidden: XGBoost's gains are float32 (near-ties), its gradients float32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aggregator.algorithms import histogram_growth
from aggregator.algorithms.histogram_growth import (
    GrowthParams,
    grow_tree,
    grow_trees,
)
from shared.model import Tree, TreeEnsemble
from shared.objectives import Softmax
from shared.atoms import merge_atoms
from shared.sketches import bin_ids

# --- the brute-force reference ---------------------------------------------------------------------


def reference_tree(X: np.ndarray, edges: list[np.ndarray], G, H, W, params: GrowthParams) -> dict[str, Any]:
    """Histogram XGBoost from Eq. 1 with loops: candidates "x < edges[j][b]" for every feature and
    edge, missing values right then left. Candidates compete on the float32-rounded loss change
    (Eq. 1's bracket without the 1/2) and the first of equal ones in XGBoost's scan order wins
    (features ascending; missing right with edges ascending; missing left with edges
    descending); the winner splits iff its float32 loss change is >= gamma and > 1e-6."""
    lam, gamma, mcw, eta = params.reg_lambda, params.gamma, params.min_child_weight, params.learning_rate
    n, d = X.shape

    def sums(rows):
        g = h = w = 0.0
        for i in rows:
            g += G[i]
            h += H[i]
            w += W[i]
        return g, h, w

    def build(rows, depth):
        g, h, w = sums(rows)
        node = {"value": eta * (-g / (h + lam)), "cover": h, "count": w}
        if depth == params.max_depth:
            return node
        best_key, best_change, best = -math.inf, 0.0, None  # compared as XGBoost does
        for j in range(d):
            scan = [(b, False) for b in range(len(edges[j]))] + [(b, True) for b in reversed(range(len(edges[j])))]
            for b, default_left in scan:
                threshold = float(edges[j][b])
                left, right = [], []
                for i in rows:
                    x = X[i, j]
                    goes_left = default_left if math.isnan(x) else x < threshold
                    (left if goes_left else right).append(i)
                GL, HL, WL = sums(left)
                GR, HR, WR = sums(right)
                if WL <= 0 or WR <= 0 or HL < mcw or HR < mcw:
                    continue
                change = GL * GL / (HL + lam) + GR * GR / (HR + lam) - (GL + GR) * (GL + GR) / (HL + HR + lam)
                key = float(np.float32(change))  # XGBoost's loss change, rounded to float32
                if key > best_key:
                    best_key, best_change, best = key, change, (j, threshold, default_left, left, right)
        if best is None or not (best_key > np.float32(1e-6) and best_key >= np.float32(gamma)):
            return node
        j, threshold, default_left, left, right = best
        node.update(
            feature=j,
            threshold=threshold,
            default_left=default_left,
            gain=best_change,
            left=build(left, depth + 1),
            right=build(right, depth + 1),
        )
        return node

    return build(list(range(n)), 0)


def nested(
    tree: Tree, gains: np.ndarray | None = None, counts: np.ndarray | None = None, node: int = 0
) -> dict[str, Any]:
    """A tree as the reference's nested dicts (node numbering no longer matters)."""
    out: dict[str, Any] = {"value": float(tree.value[node, 0])}
    if tree.cover is not None:
        out["cover"] = float(tree.cover[node])
    if counts is not None:
        out["count"] = float(counts[node])
    if tree.left[node] == -1:
        return out
    out.update(
        feature=int(tree.feature[node]),
        threshold=float(tree.threshold[node]),
        default_left=bool(tree.default_left[node]),
        left=nested(tree, gains, counts, int(tree.left[node])),
        right=nested(tree, gains, counts, int(tree.right[node])),
    )
    if gains is not None:
        out["gain"] = float(gains[node])
    return out


def structure(t: dict[str, Any]) -> Any:
    if "feature" not in t:
        return "leaf"
    return (t["feature"], t["threshold"], t["default_left"], structure(t["left"]), structure(t["right"]))


def assert_same_tree(
    got: dict[str, Any], want: dict[str, Any], *, exact: bool, tol: float = 1e-9, keys=("value",), internal_values=True
) -> None:
    assert structure(got) == structure(want)

    def walk(a, b):
        for key in keys + (("gain",) if "gain" in a and "gain" in b else ()):
            if key == "value" and "feature" in a and not internal_values:
                continue
            if exact:
                assert a[key] == b[key], (key, a[key], b[key])
            else:
                assert a[key] == pytest.approx(b[key], rel=tol, abs=tol), (key, a[key], b[key])
        if "feature" in a:
            walk(a["left"], b["left"])
            walk(a["right"], b["right"])

    walk(got, want)


def grow_nested(X, edges, G, H, W, params) -> dict[str, Any]:
    result = grow_tree(bin_ids(X, edges), G, H, W, edges, params)
    result.tree.validate(X.shape[1], 1)
    return nested(result.tree, result.loss_change, result.count)


# --- hypothesis strategies: small data on a coarse grid, NaNs, edges on and off the data -------------

GRID = [0.0, 1.0, 2.0, 3.0, 4.0]
EDGE_POOL = [-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 3.5, 4.0, 5.0, 7.0]


@st.composite
def problems(draw, *, dyadic: bool = True):
    n = draw(st.integers(1, 30))
    d = draw(st.integers(1, 3))
    cell = st.one_of(st.sampled_from(GRID), st.just(math.nan))
    X = np.array(draw(st.lists(st.lists(cell, min_size=d, max_size=d), min_size=n, max_size=n)), dtype=np.float64)
    edges = [
        np.array(sorted(draw(st.sets(st.sampled_from(EDGE_POOL), max_size=6))), dtype=np.float32) for _ in range(d)
    ]

    def eighths(lo: int, hi: int):
        return st.integers(lo, hi).map(lambda k: k / 8.0)

    G = np.array(draw(st.lists(eighths(-24, 24), min_size=n, max_size=n)))
    H = np.array(draw(st.lists(eighths(0, 16), min_size=n, max_size=n)))
    W = np.array(draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)), dtype=np.float64)
    params = GrowthParams(
        max_depth=draw(st.integers(0, 3)),
        reg_lambda=draw(st.sampled_from([0.5, 1.0, 3.0])),
        gamma=draw(st.sampled_from([0.0, 0.125, 1.0])),
        min_child_weight=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
        learning_rate=draw(st.sampled_from([0.3, 1.0])),
    )
    return X, edges, G, H, W, params


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_oracle_exact_on_dyadic_statistics(problem) -> None:
    X, edges, G, H, W, params = problem
    want = reference_tree(X, edges, G, H, W, params)
    got = grow_nested(X, edges, G, H, W, params)
    assert_same_tree(got, want, exact=True, keys=("value", "cover", "count"))


@pytest.mark.parametrize("seed", range(12))
def test_oracle_on_continuous_statistics(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, d = 120, 3
    X = rng.integers(0, 8, size=(n, d)).astype(np.float64)  # ties in x
    X[:, 2] = np.round(rng.normal(size=n), 1)
    X[rng.random(X.shape) < 0.15] = np.nan
    edges = [
        np.array([0.5, 2.0, 3.0, 5.5, 6.0], np.float32),
        np.arange(-1, 9, dtype=np.float32),
        np.linspace(-2, 2, 9).astype(np.float32),
    ]
    margin = rng.normal(size=(n, 3))
    y = rng.integers(0, 3, n)
    g, h = Softmax(3).gradients(margin, y, rng.uniform(0.5, 2.0, n))
    params = GrowthParams(max_depth=3, reg_lambda=1.0, gamma=0.05, min_child_weight=0.5, learning_rate=0.2)
    for k in range(3):
        want = reference_tree(X, edges, g[:, k], h[:, k], np.ones(n), params)
        got = grow_nested(X, edges, g[:, k], h[:, k], np.ones(n), params)
        assert_same_tree(got, want, exact=False, keys=("value", "cover"))


# --- atoms vs samples (Lemma 1) -------------------------------------------------------------------


def grow_from_clients(X, edges, G, H, params, n_clients: int, rng) -> histogram_growth.GrownTree:
    """Every client merges its samples into atoms; the server concatenates and merges by key."""
    bins = bin_ids(X, edges)
    owner = rng.integers(0, n_clients, X.shape[0])
    parts = [
        merge_atoms(bins[owner == c], G[owner == c], H[owner == c]) for c in range(n_clients) if (owner == c).any()
    ]
    keys, g, h, w = (np.concatenate([p[i] for p in parts]) for i in range(4))
    keys, g, h, w = merge_atoms(keys, g, h, w)
    return grow_tree(keys, g, h, w, edges, params)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_atoms_equal_samples_exactly_on_dyadic_statistics(problem, n_clients: int, seed: int) -> None:
    X, edges, G, H, _, params = problem
    samples = grow_tree(bin_ids(X, edges), G, H, None, edges, params)
    atoms = grow_from_clients(X, edges, G, H, params, n_clients, np.random.default_rng(seed))
    assert atoms.tree == samples.tree  # bit-exact, every field
    np.testing.assert_array_equal(atoms.loss_change, samples.loss_change)
    np.testing.assert_array_equal(atoms.count, samples.count)


@pytest.mark.parametrize("seed", range(8))
def test_atoms_equal_samples_on_continuous_statistics(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n, d, K = 3000, 4, 4
    X = rng.integers(0, 4, size=(n, d)).astype(np.float64)  # few distinct values -> many samples per atom
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 2]) > 1).astype(int) + (np.nan_to_num(X[:, 0]) > 1) + (rng.random(n) < 0.2)
    edges = [np.array([-1.0, 0.5, 1.0, 1.5, 2.5, 9.0], np.float32) for _ in range(d)]
    g, h = Softmax(K).gradients(rng.normal(scale=0.5, size=(n, K)), y, rng.uniform(0.5, 2, n))
    params = GrowthParams(max_depth=4, reg_lambda=1.0, gamma=0.05, min_child_weight=1.0, learning_rate=0.2)
    bins = bin_ids(X, edges)
    keys, G, H, W = merge_atoms(bins, g, h)
    assert keys.shape[0] < n / 3  # really aggregated
    per_sample = grow_trees(bins, g, h, None, edges, params)
    clients = [grow_from_clients(X, edges, g[:, k], h[:, k], params, 5, np.random.default_rng(seed)) for k in range(K)]
    for k, (a, b, c) in enumerate(zip(per_sample, grow_trees(keys, G, H, W, edges, params), clients)):
        want = nested(a.tree, a.loss_change)
        assert_same_tree(nested(b.tree, b.loss_change), want, exact=False, keys=("value", "cover"))
        assert_same_tree(nested(c.tree, c.loss_change), want, exact=False, keys=("value", "cover"))


def test_grown_tree_routes_raw_values_like_its_atoms() -> None:
    """The bin convention and the model's routing rule (x < threshold, NaN default) agree: every
    sample's leaf from growth is the leaf the inference engine reaches from the raw values."""
    rng = np.random.default_rng(7)
    n, d = 2000, 4
    X = np.round(rng.normal(size=(n, d)), 1).astype(np.float32)  # values equal to edges occur
    X[rng.random(X.shape) < 0.1] = np.nan
    y = (np.nan_to_num(X[:, 0], nan=1.0) > 0.3).astype(int) + (X[:, 1] < -0.2)
    edges = [np.round(np.linspace(-1.5, 1.5, 16), 1).astype(np.float32)] * d
    g, h = Softmax(3).gradients(np.zeros((n, 3)), y)
    result = grow_trees(bin_ids(X, edges), g, h, None, edges, GrowthParams(max_depth=4, learning_rate=0.5))
    ensemble = TreeEnsemble(
        trees=tuple(r.tree for r in result),
        kind="boosted",
        link="softmax",
        n_outputs=3,
        feature_names=tuple(f"f{j}" for j in range(d)),
        tree_output=np.arange(3, dtype=np.int32),
        classes=(0, 1, 2),
    )
    leaves = ensemble.leaves(X)
    for k, r in enumerate(result):
        assert r.tree.n_nodes > 3
        np.testing.assert_array_equal(leaves[:, k], r.atom_leaf)
    margin = ensemble.predict_margin(X)
    np.testing.assert_allclose(margin, np.stack([r.tree.value[r.atom_leaf, 0] for r in result], axis=1))


# --- hand-made cases: tie-breaks, missing values, parameters --------------------------------------


def one_feature(values, G, H, edges, **params):
    X = np.array(values, dtype=np.float64)[:, None]
    kwargs = dict(max_depth=1, reg_lambda=1.0, min_child_weight=0.0, learning_rate=1.0) | params
    return grow_tree(bin_ids(X, edges), G, H, None, edges, GrowthParams(**kwargs))


def test_identical_features_tie_to_the_lowest_index() -> None:
    x = np.array([0.0, 0.0, 1.0, 1.0])
    X = np.stack([x, x, x], axis=1)
    edges = [np.array([0.5], np.float32)] * 3
    r = grow_tree(bin_ids(X, edges), [1.0, 1.0, -1.0, -1.0], [1.0] * 4, None, edges, GrowthParams(max_depth=1))
    assert r.tree.feature[0] == 0


def test_equivalent_thresholds_follow_xgboost_order() -> None:
    # Data at 0 and 10 only: edges 1, 2, 3 all give the same partition.
    edges = [np.array([1.0, 2.0, 3.0], np.float32)]
    G, H = [2.0, 2.0, -2.0, -2.0], [1.0] * 4
    r = one_feature([0, 0, 10, 10], G, H, edges)
    assert (r.tree.threshold[0], r.tree.default_left[0]) == (1.0, False)  # no NaN: missing right, lowest edge
    # A NaN sample like the low values: missing left, and the highest of the equivalent edges.
    r = one_feature([0, 0, 10, 10, np.nan], G + [2.0], H + [1.0], edges)
    assert (r.tree.threshold[0], r.tree.default_left[0]) == (3.0, True)  # missing left: highest edge
    # A NaN sample like the high values: missing right, lowest edge.
    r = one_feature([0, 0, 10, 10, np.nan], G + [-2.0], H + [1.0], edges)
    assert (r.tree.threshold[0], r.tree.default_left[0]) == (1.0, False)


def test_missing_only_split_and_node_without_missing() -> None:
    # All present values alike, NaNs different: the split separates NaN from present values.
    edges = [np.array([-5.0, 0.5, 5.0], np.float32)]
    r = one_feature([0.0, 1.0, np.nan, np.nan], [1.0, 1.0, -3.0, -3.0], [1.0] * 4, edges)
    # Edge -5 with missing left and edge 5 with missing right give this partition: XGBoost's order
    # (missing right first) picks the latter.
    assert (r.tree.threshold[0], r.tree.default_left[0]) == (5.0, False)
    left, right = r.tree.left[0], r.tree.right[0]
    assert (r.count[left], r.count[right]) in ((2.0, 2.0),)
    # The NaN side has the negative gradients: its value is positive.
    nan_child = left if r.tree.default_left[0] else right
    assert r.tree.value[nan_child, 0] > 0 and r.sum_grad[nan_child] == -6.0


def test_max_depth_zero_gamma_and_min_child_weight() -> None:
    edges = [np.array([0.5], np.float32)]
    G, H = [1.0, 1.0, -1.0, -1.0], [0.5] * 4
    r = one_feature([0, 0, 1, 1], G, H, edges, max_depth=0, learning_rate=0.3)
    assert r.tree.n_nodes == 1 and r.tree.value[0, 0] == pytest.approx(0.3 * -0.0 / 3.0) and r.tree.cover[0] == 2.0
    full = one_feature([0, 0, 1, 1], G, H, edges)
    # loss change: 2^2/2 + 2^2/2 - 0 = 4 (Eq. 1's gain: half of it)
    assert full.loss_change[0] == pytest.approx(4.0) and full.tree.value[1, 0] == pytest.approx(-2 / 2.0)
    assert one_feature([0, 0, 1, 1], G, H, edges, gamma=4.0).tree.n_nodes == 3  # XGBoost splits on equality
    assert one_feature([0, 0, 1, 1], G, H, edges, gamma=4.001).tree.n_nodes == 1
    assert one_feature([0, 0, 1, 1], G, H, edges, min_child_weight=1.0).tree.n_nodes == 3
    assert one_feature([0, 0, 1, 1], G, H, edges, min_child_weight=1.01).tree.n_nodes == 1


def test_features_without_edges_and_empty_input() -> None:
    X = np.array([[0.0, 0.0], [1.0, 1.0]])
    edges = [np.zeros(0, np.float32), np.array([0.5], np.float32)]
    r = grow_tree(bin_ids(X, edges), [1.0, -1.0], [1.0, 1.0], None, edges, GrowthParams(min_child_weight=0))
    assert r.tree.feature[0] == 1
    empty = grow_tree(np.zeros((0, 2), np.int32), [], [], None, edges, GrowthParams())
    assert empty.tree.n_nodes == 1 and empty.tree.value[0, 0] == 0.0


def test_missing_values_have_their_feature_s_own_id_and_input_checks() -> None:
    X = np.array([[0.0, 0.0], [1.0, 1.0], [np.nan, 2.0], [np.nan, np.nan]])
    edges = [np.array([0.5], np.float32), np.array([0.5, 1.5, 2.5], np.float32)]
    G, H = [1.0, -1.0, 2.0, 2.0], [1.0] * 4
    bins = bin_ids(X, edges)
    np.testing.assert_array_equal(bins[:, 0], [0, 1, 2, 2])
    np.testing.assert_array_equal(bins[:, 1], [0, 1, 2, 4])
    r = grow_tree(bins, G, H, None, edges, GrowthParams(min_child_weight=0, max_depth=1))
    # the best split isolates the two NaN rows of feature 0 (G = 4) from the others (G = 0)
    assert r.tree.feature[0] == 0 and r.count[r.tree.left[0]] + r.count[r.tree.right[0]] == 4
    with pytest.raises(ValueError, match="outside"):
        grow_tree(np.array([[3, 0], [0, 0], [1, 0], [1, 0]]), G, H, None, edges, GrowthParams())
    edges = [np.array([0.5], np.float32)]
    X = X[:, :1]
    with pytest.raises(ValueError, match="outside"):
        grow_tree(np.array([[5], [0], [1], [1]]), G, H, None, edges, GrowthParams())
    with pytest.raises(ValueError, match="shape"):
        grow_tree(bin_ids(X, edges), G[:3], H, None, edges, GrowthParams())
    with pytest.raises(ValueError, match="hess"):
        grow_tree(bin_ids(X, edges), G, [-1.0] * 4, None, edges, GrowthParams())
    with pytest.raises(ValueError, match="edge arrays"):
        grow_tree(bin_ids(X, edges), G, H, None, edges * 2, GrowthParams())
    with pytest.raises(ValueError, match="strictly increasing"):
        grow_tree(bin_ids(X, edges), G, H, None, [np.array([1.0, 1.0])], GrowthParams())
    with pytest.raises(ValueError):
        GrowthParams(max_depth=-1)
    with pytest.raises(ValueError):
        GrowthParams(reg_lambda=-1.0)
    with pytest.raises(ValueError, match="gamma"):
        GrowthParams(gamma=-0.1)
    with pytest.raises(ValueError, match="multi_strategy"):
        GrowthParams(multi_strategy="one_tree")


def test_feature_blocks_give_the_same_tree(monkeypatch) -> None:
    rng = np.random.default_rng(3)
    n, d = 500, 7
    X = np.round(rng.normal(size=(n, d)), 1)
    X[rng.random(X.shape) < 0.1] = np.nan
    edges = [np.linspace(-1, 1, 5 + j).astype(np.float32) for j in range(d)]
    g, h = Softmax(2).gradients(rng.normal(size=(n, 2)), (X[:, 3] > 0).astype(int))
    args = (bin_ids(X, edges), g[:, 0], h[:, 0], None, edges, GrowthParams(max_depth=3, min_child_weight=0.1))
    whole = grow_tree(*args)
    monkeypatch.setattr(histogram_growth, "BLOCK_ELEMENTS", 2 * n)  # two features per block
    blocked = grow_tree(*args)
    assert whole.tree == blocked.tree and whole.tree.n_nodes > 3


def test_merge_atoms_sums_by_key() -> None:
    bins = np.array([[1, 2], [0, 0], [1, 2], [0, 3]])
    keys, G, H, W = merge_atoms(bins, np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]), np.ones((4, 2)))
    np.testing.assert_array_equal(keys, [[0, 0], [0, 3], [1, 2]])
    np.testing.assert_array_equal(G, [[3.0, 4.0], [7.0, 8.0], [6.0, 8.0]])
    np.testing.assert_array_equal(H, [[1, 1], [1, 1], [2, 2]])
    np.testing.assert_array_equal(W, [1, 1, 2])


def test_moderate_size_is_fast() -> None:
    """Paper-sized level: 20k atoms, 60 features, 256 bins, depth 4, 4 classes."""
    import time

    rng = np.random.default_rng(0)
    n, d, K = 20000, 60, 4
    bins = rng.integers(0, 257, size=(n, d)).astype(np.int32)
    bins[rng.random(bins.shape) < 0.05] = 257  # the default missing id
    edges = [np.arange(256, dtype=np.float32)] * d
    g, h = Softmax(K).gradients(rng.normal(size=(n, K)), rng.integers(0, K, n))
    start = time.perf_counter()
    trees = grow_trees(bins, g, h, None, edges, GrowthParams(max_depth=4, gamma=0.05))
    elapsed = time.perf_counter() - start
    assert all(t.tree.depth == 4 for t in trees)
    assert elapsed < 20.0, elapsed


# --- against XGBoost ---------------------------------------------------------------------------------

xgb = pytest.importorskip("xgboost")


def xgboost_case(seed: int, *, n: int = 1500, K: int = 3, nan_fraction: float = 0.1):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 5)), 1).astype(np.float32)  # ~60 distinct values per feature
    X[:, 3] = rng.integers(0, 5, n)
    X[rng.random(X.shape) < nan_fraction] = np.nan
    score = np.nan_to_num(X[:, 0]) + (X[:, 3] > 2) - np.isnan(X[:, 1])
    y = np.digitize(score + rng.normal(scale=0.7, size=n), np.quantile(score, np.linspace(0, 1, K + 1)[1:-1]))
    weight = rng.uniform(0.5, 2.0, n).astype(np.float32)
    margin = rng.normal(scale=0.5, size=(n, K)).astype(np.float32)
    return X, y, weight, margin


@pytest.mark.parametrize(
    ("seed", "max_depth", "reg_lambda", "min_split_loss", "min_child_weight", "nan_fraction"),
    [
        (0, 3, 1.0, 0.0, 1.0, 0.1),
        (1, 3, 1.0, 0.2, 1.0, 0.1),  # the paper's gamma = 0.1 in Eq. 1
        (2, 2, 2.0, 1.0, 5.0, 0.2),
        (3, 3, 0.5, 0.0, 0.0, 0.0),
        (4, 1, 1.0, 0.0, 1.0, 0.3),
    ],
)
def test_one_round_matches_xgboost_hist(
    seed, max_depth, reg_lambda, min_split_loss, min_child_weight, nan_fraction
) -> None:
    from tests.shared.model.xgboost_json import booster_to_ensemble

    K, eta = 3, 0.2
    X, y, weight, margin = xgboost_case(seed, K=K, nan_fraction=nan_fraction)
    dtrain = xgb.DMatrix(X, label=y, weight=weight, base_margin=margin)
    booster = xgb.train(
        dict(
            objective="multi:softprob",
            num_class=K,
            tree_method="hist",
            max_bin=256,
            max_depth=max_depth,
            eta=eta,
            reg_lambda=reg_lambda,
            gamma=min_split_loss,
            min_child_weight=min_child_weight,
            base_score=0.5,
            nthread=1,
            seed=0,
        ),
        dtrain,
        num_boost_round=1,
    )
    ptr, values = dtrain.get_quantile_cut()  # per feature: XGBoost's minimum, then its cuts
    edges = [values[ptr[j] : ptr[j + 1]] for j in range(X.shape[1])]
    theirs = booster_to_ensemble(booster).trees

    g, h = Softmax(K).gradients(margin.astype(np.float64), y, weight.astype(np.float64))
    params = GrowthParams(
        max_depth=max_depth,
        reg_lambda=reg_lambda,
        gamma=min_split_loss,
        min_child_weight=min_child_weight,
        learning_rate=eta,
    )
    ours = grow_trees(bin_ids(X, edges), g, h, None, edges, params)
    assert len(theirs) == K
    n_splits = 0
    for k in range(K):
        mine, other = nested(ours[k].tree), nested(theirs[k])
        assert structure(mine) == structure(other), f"class {k}"
        # Leaves and covers to float32 precision (XGBoost's internal values are unshrunk).
        assert_same_tree(mine, other, exact=False, tol=2e-5, keys=("value", "cover"), internal_values=False)
        n_splits += int((ours[k].tree.left >= 0).sum())
        # XGBoost's loss_changes, in float32.
        theirs_gain = np.asarray(_xgb_tree_json(booster, k)["loss_changes"])
        internal = ours[k].tree.left >= 0
        np.testing.assert_allclose(
            np.sort(ours[k].loss_change[internal]), np.sort(theirs_gain[theirs_gain > 0]), rtol=1e-4
        )
    assert n_splits >= K  # the comparison is not vacuous


def _xgb_tree_json(booster, k: int) -> dict[str, Any]:
    import json

    return json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"][k]


def _loss_changes_of_a_free_tree(dtrain, base) -> np.ndarray:
    free = xgb.train(base, dtrain, num_boost_round=1)
    changes = np.asarray(_xgb_tree_json(free, 0)["loss_changes"])
    return np.sort(changes[changes > 0])


@pytest.mark.parametrize("quantile", [0.0, 0.25, 0.5, 0.75, 1.1])
def test_gamma_is_xgboost_min_split_loss(quantile: float) -> None:
    """The same ``gamma`` given to XGBoost and to us prunes the same splits: gamma between the
    loss changes of an unpenalised tree (so it prunes some), 0, and above all of them. Halving
    it (Eq. 1's penalty, the old meaning) grows another tree."""
    from tests.shared.model.xgboost_json import booster_to_ensemble

    K = 3
    X, y, weight, margin = xgboost_case(11, K=K)
    dtrain = xgb.DMatrix(X, label=y, weight=weight, base_margin=margin)
    base = dict(objective="multi:softprob", num_class=K, tree_method="hist", max_depth=3, eta=0.3, nthread=1)
    changes = _loss_changes_of_a_free_tree(dtrain, base)
    i = int(quantile * (len(changes) - 1))
    gamma = 0.0 if quantile == 0 else 1.1 * changes[-1] if quantile > 1 else float(changes[i] + changes[i + 1]) / 2
    theirs = booster_to_ensemble(xgb.train(base | {"gamma": gamma}, dtrain, num_boost_round=1)).trees

    ptr, values = dtrain.get_quantile_cut()
    edges = [values[ptr[j] : ptr[j + 1]] for j in range(X.shape[1])]
    g, h = Softmax(K).gradients(margin.astype(np.float64), y, weight.astype(np.float64))
    ours = grow_trees(bin_ids(X, edges), g, h, None, edges, GrowthParams(max_depth=3, learning_rate=0.3, gamma=gamma))
    for k in range(K):
        assert structure(nested(ours[k].tree)) == structure(nested(theirs[k])), f"class {k}"
    if quantile > 1:
        assert theirs[0].n_nodes == 1
    if 0 < quantile < 1:
        assert 1 < theirs[0].n_nodes < 15
        half = grow_tree(
            bin_ids(X, edges),
            g[:, 0],
            h[:, 0],
            None,
            edges,
            GrowthParams(max_depth=3, learning_rate=0.3, gamma=gamma / 2),
        )
        assert half.tree.n_nodes > theirs[0].n_nodes or changes[i] < gamma / 2


def test_gains_equal_in_exact_arithmetic_tie_like_in_xgboost() -> None:
    """Round 1 of softmax: a sample's gradient depends on its label only, so splits with the same
    label counts on each side have equal exact gains, computed with different roundings. XGBoost
    compares float32 loss changes and keeps the first feature; so must we (was feature 2)."""
    xgb = pytest.importorskip("xgboost")
    import json

    rng = np.random.default_rng(173)
    n, d = 60, 6
    y = rng.integers(0, 3, n)
    X = rng.integers(0, 8, (n, d)).astype(np.float32)
    g, h = Softmax(3).gradients(np.zeros((n, 3)), y)
    edges = [np.arange(1, 8, dtype=np.float32)] * d
    ours = grow_tree(bin_ids(X, edges), g[:, 0], h[:, 0], None, edges, GrowthParams(max_depth=1, gamma=0.0))
    booster = xgb.train(
        {
            "objective": "multi:softprob",
            "num_class": 3,
            "tree_method": "hist",
            "max_depth": 1,
            "gamma": 0,
            "min_child_weight": 0,
            "base_score": 0.5,
        },
        xgb.DMatrix(X, label=y, base_margin=np.zeros((n, 3))),
        1,
    )
    theirs = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"][0]
    assert ours.tree.feature[0] == theirs["split_indices"][0] == 0


@pytest.mark.parametrize(
    ("seed", "min_child_weight", "gamma"), [(0, 0.0, 0.0), (1, 1.0, 1.0), (2, 3.0, 0.0), (3, 1.0, 3.0), (4, 3.0, 3.0)]
)
def test_multi_output_tree_matches_xgboost_hist(seed: int, min_child_weight: float, gamma: float) -> None:
    """``multi_strategy="multi_output_tree"`` (the paper's shared structure, gains summed over
    classes, vector leaves) == XGBoost's hist ``multi_output_tree`` given its cuts: same splits,
    thresholds and directions, leaves to float32 precision. Small deep trees so that
    ``min_child_weight`` (which zeroes a class's weight in XGBoost 3.2) and ``gamma`` bite."""
    from tests.shared.model.xgboost_json import booster_to_ensemble

    if min_child_weight > 0 and tuple(int(v) for v in xgb.__version__.split(".")[:2]) >= (3, 4):
        pytest.skip("XGBoost 3.4 made min_child_weight a bound on the children's mean Hessian")
    K = 3
    X, y, weight, margin = xgboost_case(seed, K=K, n=200)
    dtrain = xgb.DMatrix(X, label=y, weight=weight, base_margin=margin)
    booster = xgb.train(
        dict(
            objective="multi:softprob",
            num_class=K,
            tree_method="hist",
            max_depth=6,
            eta=0.2,
            multi_strategy="multi_output_tree",
            min_child_weight=min_child_weight,
            gamma=gamma,
            base_score=0.5,
            nthread=1,
        ),
        dtrain,
        num_boost_round=1,
    )
    ptr, values = dtrain.get_quantile_cut()
    edges = [values[ptr[j] : ptr[j + 1]] for j in range(X.shape[1])]
    g, h = Softmax(K).gradients(margin.astype(np.float64), y, weight.astype(np.float64))
    params = GrowthParams(
        max_depth=6,
        learning_rate=0.2,
        min_child_weight=min_child_weight,
        gamma=gamma,
        multi_strategy="multi_output_tree",
    )
    (ours,) = grow_trees(bin_ids(X, edges), g, h, None, edges, params)
    (theirs,) = booster_to_ensemble(booster).trees
    assert ours.tree.n_outputs == K and ours.tree.n_nodes > 20
    assert structure(nested(ours.tree)) == structure(nested(theirs))
    leaf = ours.tree.left < 0
    np.testing.assert_allclose(ours.tree.value[leaf], theirs.value[theirs.left < 0], rtol=0, atol=1e-7)
    np.testing.assert_allclose(
        np.sort(ours.loss_change[~leaf]),
        np.sort(_xgb_tree_json(booster, 0)["loss_changes"])[-int((~leaf).sum()) :],
        rtol=1e-5,
    )
    if min_child_weight > 0:  # some class of some leaf had too little Hessian: weight 0, as in XGBoost
        assert (ours.tree.value[leaf] == 0).any() or (ours.sum_hess[leaf] >= min_child_weight).all()


def test_multi_output_tree_sums_the_classes_gains() -> None:
    """One class alone would split on feature 1, the three together on feature 0: the shared
    structure maximises the summed gain (Alg. 1 step 19)."""
    X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]] * 2, dtype=np.float64)
    edges = [np.array([0.5], np.float32)] * 2
    # class 0: feature 1 separates its gradients; classes 1 and 2: feature 0 does
    G = np.array([[1.0, 1.0, 1.0], [-1.0, 1.0, 1.0], [1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]] * 2)
    H = np.ones_like(G)
    per_class = grow_trees(bin_ids(X, edges), G, H, None, edges, GrowthParams(max_depth=1, min_child_weight=0))
    (shared,) = grow_trees(
        bin_ids(X, edges),
        G,
        H,
        None,
        edges,
        GrowthParams(max_depth=1, min_child_weight=0, multi_strategy="multi_output_tree"),
    )
    assert per_class[0].tree.feature[0] == 1 and shared.tree.feature[0] == 0
    assert shared.tree.value.shape == (3, 3)
