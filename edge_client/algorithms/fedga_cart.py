"""CART on a gateway, vectorised over many trees at once (FedGA-Tree's client side, §III-B).

Two uses, one level-wise grower:

* plain CART (every feature is tried at every node): the client's own trees -- the depth chosen
  by K-fold cross-validation, the local structure it contributes to the population;
* CART on a *fixed structure*: each node may only split on the feature the structure puts there,
  and CART picks the threshold (and the leaves their values) from the client's data. One call
  fits a whole population of structures.

The rules are scikit-learn's ``DecisionTreeClassifier``/``Regressor`` with default settings
(``criterion="gini"``/``"squared_error"``, ``min_samples_split=2``, ``min_samples_leaf=1``): a
node with fewer than two samples, or pure (impurity <= machine epsilon), or with no two distinct
values of its feature, stays a leaf; otherwise it splits where the proxy impurity improvement
``sum(c_L^2)/n_L + sum(c_R^2)/n_R`` (class counts, or target sums for regression) is largest,
the lowest threshold on ties, at the midpoint of the two neighbouring values. WheelFed routes
left iff ``x < threshold`` (scikit-learn: ``x <= midpoint``), so the stored threshold is the
next float above scikit-learn's midpoint: both send every input the same way. Missing values
(NaN) never define a threshold and always go right (``default_left=False``).

Why level-wise and sort-based: per level, every (tree, node, feature) candidate's samples are
one segment of a single ``argsort`` over integer keys (pair, rank of the value), and prefix sums
over that array give every threshold's left statistics at once -- no Python loop over samples,
nodes or trees. Nodes are addressed by heap index (root 1, children 2h and 2h+1), so a grown
tree at depth 15 costs only the nodes that exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from shared.model import Tree, TreeEnsemble
from shared.model.ensemble import ClassLabel, MetadataValue
from shared.tree_encoding import NIL, layout, string_length

__all__ = [
    "Grown",
    "Samples",
    "cv_scores",
    "f1_macro",
    "grow",
    "mse",
    "predict",
    "r2",
    "route",
    "to_ensemble",
    "to_strings",
]

_EPSILON = np.finfo(np.float64).eps


@dataclass(frozen=True, eq=False)
class Samples:
    """A client's data prepared for growing: ``X`` (n, F) float64, ``rank`` (n, F) dense rank of
    each value in its column (NaN: ``n``, above every value), ``terms`` (n, S) the one-hot class
    of each sample (classification) or its target (regression)."""

    X: np.ndarray
    rank: np.ndarray
    terms: np.ndarray
    regression: bool

    @classmethod
    def of(cls, X: np.ndarray, target: np.ndarray, *, regression: bool, n_classes: int = 0) -> Samples:
        """``target``: class ids ``0 .. n_classes-1`` or real values."""
        X = np.asarray(X, dtype=np.float64)
        n = X.shape[0]
        order = np.argsort(X, axis=0, kind="stable")  # NaN sorts last
        ordered = np.take_along_axis(X, order, axis=0)
        new = np.ones_like(ordered, dtype=bool)
        new[1:] = ordered[1:] != ordered[:-1]  # NaN != NaN, but NaNs get rank n below
        dense = np.cumsum(new, axis=0) - 1
        rank = np.empty_like(dense)
        np.put_along_axis(rank, order, dense, axis=0)
        rank[np.isnan(X)] = n
        terms = (
            np.asarray(target, np.float64)[:, None] if regression else np.eye(n_classes)[np.asarray(target, np.int64)]
        )
        return cls(X, rank.astype(np.int64), terms, regression)

    @property
    def n(self) -> int:
        return self.X.shape[0]


@dataclass(frozen=True, eq=False)
class Grown:
    """``n_trees`` grown trees as one table of their existing nodes, sorted by
    ``key = tree * stride + heap index``: ``feature`` (-1 at leaves), ``threshold`` (WheelFed's:
    go left iff ``x < threshold``), ``value`` (class distribution or mean, every node) and
    ``count`` (training samples in the node)."""

    n_trees: int
    depth: int
    key: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    count: np.ndarray

    @property
    def stride(self) -> int:
        return 1 << (self.depth + 1)

    def lookup(self, tree: np.ndarray, heap: np.ndarray) -> np.ndarray:
        """Row of node ``heap`` of ``tree`` in the table (the node must exist)."""
        return np.searchsorted(self.key, tree * self.stride + heap)


def _segment_starts(sorted_ids: np.ndarray) -> np.ndarray:
    """Where each run of equal values starts in a sorted array (none for an empty one)."""
    if sorted_ids.size == 0:
        return np.zeros(0, np.int64)
    new = np.ones(sorted_ids.size, bool)
    new[1:] = sorted_ids[1:] != sorted_ids[:-1]
    return np.flatnonzero(new)


def _segment_ids(sorted_ids: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... numbering the runs of equal values of a sorted array."""
    ids = np.zeros(sorted_ids.size, np.int64)
    np.cumsum(sorted_ids[1:] != sorted_ids[:-1], out=ids[1:])
    return ids


def _first_max(values: np.ndarray, segment: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Index of the first maximum of ``values`` in each contiguous segment."""
    best = np.maximum.reduceat(values, starts)
    index = np.arange(values.shape[0])
    return np.minimum.reduceat(np.where(values == best[segment], index, values.shape[0]), starts)


def _threshold(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """scikit-learn's midpoint (``low/2 + high/2``, ``low`` if that rounds to ``high``), then the
    next float up so that ``x < t`` is ``x <= midpoint``."""
    mid = low / 2.0 + high / 2.0
    mid = np.where((mid == high) | ~np.isfinite(mid), low, mid)
    return np.nextafter(mid, np.inf)


def grow(samples: Samples, depth: int, structures: np.ndarray | None = None) -> Grown:
    """Grow CART trees of maximum depth ``depth`` on ``samples``.

    ``structures``: ``(T, 2^depth - 1)`` integer strings (``shared.tree_encoding``); tree ``t``
    may split node ``h`` only on the feature of its slot (``NIL``: a leaf). ``None``: one plain
    CART tree trying every feature (the lowest feature id wins ties).
    """
    n, n_features = samples.X.shape
    n_trees = 1 if structures is None else structures.shape[0]
    constraint = None if structures is None else (structures, layout(depth).slot_of_heap)
    S = samples.terms.shape[1]
    stride = 1 << (depth + 1)
    # every (tree, sample) entry still in an internal-candidate node: its tree and node
    tree = np.repeat(np.arange(n_trees), n)
    row = np.tile(np.arange(n), n_trees)
    heap = np.ones(tree.shape[0], np.int64)
    keys, features, thresholds, values, counts = [], [], [], [], []
    for level in range(depth + 1):
        node_key = tree * stride + heap
        order = np.argsort(node_key, kind="stable")
        tree, row, heap, node_key = tree[order], row[order], heap[order], node_key[order]
        starts = _segment_starts(node_key)
        if starts.size == 0:
            break
        group = _segment_ids(node_key)
        sums = np.add.reduceat(samples.terms[row], starts, axis=0)
        count = np.diff(starts, append=node_key.size).astype(np.float64)
        value = sums / count[:, None]
        if samples.regression:
            squares = np.add.reduceat(samples.terms[row, 0] ** 2, starts)
            impurity = squares / count - value[:, 0] ** 2
        else:
            impurity = 1.0 - (value**2).sum(axis=1)
        g_tree, g_heap = tree[starts], heap[starts]
        may_split = (count >= 2) & (impurity > _EPSILON) & (level < depth)
        if constraint is None:
            pair_group = np.repeat(np.flatnonzero(may_split), n_features)
            pair_feature = np.tile(np.arange(n_features), int(may_split.sum()))
        else:
            required = np.full(g_heap.shape, NIL)
            inside = g_heap < (1 << depth)
            strings, slot_of_heap = constraint
            required[inside] = strings[g_tree[inside], slot_of_heap[g_heap[inside]]]
            may_split &= required != NIL
            pair_group = np.flatnonzero(may_split)
            pair_feature = required[pair_group]
        split_feature = np.full(starts.size, NIL)
        split_threshold = np.full(starts.size, np.nan)
        if pair_group.size:
            best_pair, threshold = _best_splits(samples, row, group, starts, count, sums, pair_group, pair_feature)
            found = best_pair >= 0
            split_feature[pair_group[best_pair[found]]] = pair_feature[best_pair[found]]
            split_threshold[pair_group[best_pair[found]]] = threshold[found]
        keys.append(g_tree * stride + g_heap)
        features.append(split_feature)
        thresholds.append(split_threshold)
        values.append(value)
        counts.append(count)
        # move the entries of split nodes to their children; the others have reached a leaf
        f = split_feature[group]
        moving = f != NIL
        x = samples.X[row[moving], f[moving]]
        go_right = ~(x < split_threshold[group][moving])
        tree, row, heap = tree[moving], row[moving], 2 * heap[moving] + go_right
    key = np.concatenate(keys)
    order = np.argsort(key, kind="stable")
    return Grown(
        n_trees,
        depth,
        key[order],
        np.concatenate(features)[order],
        np.concatenate(thresholds)[order],
        np.concatenate(values)[order] if values else np.zeros((0, S)),
        np.concatenate(counts)[order],
    )


def _best_splits(
    samples: Samples,
    row: np.ndarray,
    group: np.ndarray,
    starts: np.ndarray,
    count: np.ndarray,
    sums: np.ndarray,
    pair_group: np.ndarray,
    pair_feature: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per node of ``pair_group``'s nodes: the best of its (node, feature) pairs (index into the
    pairs, -1 if none of them has a valid threshold) and that pair's threshold."""
    n = samples.n
    sizes = np.diff(starts, append=row.shape[0])[pair_group]
    pair = np.repeat(np.arange(pair_group.size), sizes)
    offsets = np.repeat(starts[pair_group] - (np.cumsum(sizes) - sizes), sizes)
    entry = np.arange(pair.size) + offsets  # position in the node-sorted entry arrays
    r = row[entry]
    feature = pair_feature[pair]
    rank = samples.rank[r, feature]
    order = np.argsort(pair * (n + 1) + rank, kind="stable")
    pair, r, rank, feature = pair[order], r[order], rank[order], feature[order]
    prefix = np.cumsum(samples.terms[r], axis=0)
    pstart = _segment_starts(pair)
    base = np.where(pstart > 0, pstart - 1, 0)
    before = np.where((pstart > 0)[:, None], prefix[base], 0.0)
    left = prefix - before[pair]
    n_left = (np.arange(pair.size) - pstart[pair] + 1).astype(np.float64)
    g = pair_group[pair]
    right = sums[g] - left
    n_right = count[g] - n_left
    valid = np.zeros(pair.size, bool)
    valid[:-1] = (pair[1:] == pair[:-1]) & (rank[1:] != rank[:-1]) & (rank[1:] < n)
    with np.errstate(divide="ignore", invalid="ignore"):
        proxy = (left**2).sum(axis=1) / n_left + (right**2).sum(axis=1) / n_right
    proxy = np.where(valid, proxy, -np.inf)
    best_entry = _first_max(proxy, pair, pstart)
    has = valid[best_entry]
    # best pair per node: pairs of a node are contiguous and in feature order
    pair_score = np.where(has, proxy[best_entry], -np.inf)
    node_starts = _segment_starts(pair_group)
    node_of_pair = _segment_ids(pair_group)
    best_pair = _first_max(pair_score, node_of_pair, node_starts)
    ok = has[best_pair]
    e = best_entry[best_pair]
    low = samples.X[r[e], feature[e]]
    high = samples.X[r[np.minimum(e + 1, r.size - 1)], feature[e]]
    threshold = _threshold(low, high)
    # report per pair-group entry: the chosen pair index (aligned with pair_group) or -1
    out_pair = np.full(pair_group.size, -1)
    out_thr = np.full(pair_group.size, np.nan)
    out_pair[node_starts[ok]] = best_pair[ok]
    out_thr[node_starts[ok]] = threshold[ok]
    return out_pair, out_thr


def route(grown: Grown, X: np.ndarray, *, levels: bool = False) -> np.ndarray:
    """Row (in ``grown``'s table) of the leaf each sample of ``X`` reaches in each tree:
    ``(n_trees, m)``; with ``levels``, ``(depth + 1, n_trees, m)``: the node reached after each
    level, i.e. the prediction of the tree cut at that depth."""
    X = np.asarray(X, dtype=np.float64)
    m = X.shape[0]
    tree = np.repeat(np.arange(grown.n_trees), m)
    sample = np.tile(np.arange(m), grown.n_trees)
    heap = np.ones(tree.size, np.int64)
    out = []
    for _ in range(grown.depth + 1):
        at = grown.lookup(tree, heap)
        out.append(at)
        f = grown.feature[at]
        split = f != NIL
        x = X[sample[split], f[split]]
        heap[split] = 2 * heap[split] + ~(x < grown.threshold[at[split]])
    shape = (grown.n_trees, m)
    return np.stack(out).reshape(-1, *shape) if levels else out[-1].reshape(shape)


def f1_macro(truth: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    """Macro-averaged F1 of each row of ``predicted`` (class ids, ``(T, m)``) against ``truth``
    (``(m,)``), over the classes present in the truth or the prediction -- scikit-learn's
    ``f1_score(average="macro")`` with ``zero_division=0``."""
    T = predicted.shape[0]
    cells = (np.arange(T)[:, None] * n_classes + truth[None, :]) * n_classes + predicted
    confusion = np.bincount(cells.ravel(), minlength=T * n_classes * n_classes).reshape(T, n_classes, n_classes)
    tp = np.diagonal(confusion, axis1=1, axis2=2).astype(np.float64)
    actual, chosen = confusion.sum(axis=2), confusion.sum(axis=1)
    present = (actual + chosen) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(present, 2 * tp / (actual + chosen), 0.0)
    return f1.sum(axis=1) / np.maximum(present.sum(axis=1), 1)


def mse(truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Mean squared error of each row of ``predicted`` (``(T, m)``)."""
    return ((predicted - truth[None, :]) ** 2).mean(axis=-1)


def r2(truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """R² of each row of ``predicted`` (scikit-learn's ``r2_score``: 1 for a perfect fit of a
    constant target, 0 for an imperfect one)."""
    sse = ((predicted - truth) ** 2).sum(axis=-1)
    sst = ((truth - truth.mean()) ** 2).sum()
    if sst == 0:
        return np.where(sse == 0, 1.0, 0.0)
    return 1.0 - sse / sst


def predict(grown: Grown, leaf_rows: np.ndarray, *, regression: bool) -> np.ndarray:
    """Values (regression) or class ids (the most probable class, the first on ties, as
    ``TreeEnsemble.predict`` does) at the given table rows."""
    value = grown.value[leaf_rows]
    return value[..., 0] if regression else np.argmax(value, axis=-1)


def to_strings(grown: Grown, depth: int) -> np.ndarray:
    """The structures of the grown trees (thresholds and values dropped), ``(T, 2^depth-1)``."""
    lay = layout(depth)
    out = np.full((grown.n_trees, string_length(depth)), NIL, np.int64)
    tree, heap = np.divmod(grown.key, grown.stride)
    inside = (heap < (1 << depth)) & (grown.feature != NIL)
    out[tree[inside], lay.slot_of_heap[heap[inside]]] = grown.feature[inside]
    return out


def to_ensemble(
    grown: Grown,
    t: int,
    *,
    feature_names: Iterable[str],
    classes: Iterable[ClassLabel] = (),
    feature_set_version: str = "",
    metadata: Mapping[str, MetadataValue] | None = None,
) -> TreeEnsemble:
    """Tree ``t`` as a ``kind="single"`` WheelFed model (nodes in heap order)."""
    rows = np.flatnonzero(grown.key // grown.stride == t)
    heap = grown.key[rows] % grown.stride
    index = {int(h): i for i, h in enumerate(heap.tolist())}
    feature = grown.feature[rows]
    left = np.array([index.get(2 * h, -1) if f != NIL else -1 for h, f in zip(heap.tolist(), feature.tolist())])
    right = np.where(left >= 0, left + 1, -1)
    tree = Tree.from_arrays(
        feature, np.where(feature != NIL, grown.threshold[rows], 0.0), left, right, grown.value[rows]
    )
    return TreeEnsemble(
        trees=(tree,),
        kind="single",
        link="identity",
        n_outputs=grown.value.shape[1],
        feature_names=feature_names,
        classes=tuple(classes),
        feature_set_version=feature_set_version,
        metadata={} if metadata is None else metadata,
    )


def cv_scores(
    X: np.ndarray, target: np.ndarray, folds: list[np.ndarray], depths: np.ndarray, *, regression: bool, n_classes: int
) -> np.ndarray:
    """K-fold cross-validation of CART: ``scores[k, j]`` is the validation score (macro-F1, or R²
    for regression) of fold ``k`` (``folds[k]``: its held-out rows) at depth ``depths[j]``. One
    tree of the largest depth per fold serves every depth: CART is greedy top-down, so the depth-j
    tree is that tree cut at level j."""
    scores = np.zeros((len(folds), depths.size))
    for k, held in enumerate(folds):
        train = np.setdiff1d(np.arange(X.shape[0]), held)
        grown = grow(Samples.of(X[train], target[train], regression=regression, n_classes=n_classes), int(depths[-1]))
        at = route(grown, X[held], levels=True)[depths, 0]
        predicted = predict(grown, at, regression=regression)
        scores[k] = r2(target[held], predicted) if regression else f1_macro(target[held], predicted, n_classes)
    return scores
