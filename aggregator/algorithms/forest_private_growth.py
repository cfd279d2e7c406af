"""FedForest's private growth: a random forest from two noisy fleet releases (pure functions).

The private protocol (``fedforest_private``) releases, after the opening, only two fleet sums of
class counts, each with distributed Skellam noise; everything here is post-processing of them
(which costs no privacy) and of public randomness. Regression releases, per cell, ``[windows,
Σ z]`` instead of class counts, ``z`` the target clipped to the job's public range and scaled
into ``[-1, 1]`` (``TargetClip``); every step below reads them through the same functions, with
``criterion="mse"``: a cell's windows are its first column rather than the sum of its columns,
a feasible cell has ``|Σ z| <= windows``, the split score is the variance decrease of ``z``
(``n_L n_R / n^2 (mean_L - mean_R)^2``, which reads no sum of squares), the prior is the
fleet's mean ``z`` and a node's value its noisy mean shrunk towards its parent's (the root's
towards the prior; ``PrivateForestPlan.shrink_to_parent``), mapped back to the target's units
(within the public range).

1. **the root release** -- per feature and slot of the opening's edges, the fleet's class counts
   (all windows; one window adds 1 to one cell per feature). :func:`screen_features` takes the
   fleet's class totals as the mean of the features' totals, scores every feature by
   its best impurity decrease among the edges (children of fewer than ``min_count`` noisy windows
   are not candidates: a split into a near-empty child would be chosen for its noise) and keeps
   the ``keep`` best: the features the trees may split on. The totals, clipped at 0, give the
   fleet's class distribution (the leaves' prior).
2. **the structure** -- classification: :func:`random_forest` grows every tree to ``max_depth``
   with random splits from the public ``seed``: at each node a kept feature drawn uniformly
   among those with an edge inside the node's box (the slot ranges its ancestors' splits leave
   it), and an edge drawn uniformly inside that range, among the edges :func:`useful_edges`
   keeps (those with enough noisy windows between them). No data goes into it: which features
   and edges are kept is all it takes from a release. Regression: :func:`marginal_forest` splits
   each node where the root release's per-feature marginals (:func:`grouped_marginals`) say a
   split decreases the squared error more than it adds leaf noise (:func:`marginal_split`),
   reading the node's statistics as if the features were independent and the target additive
   in them; a node with no such split is a leaf.
3. **the leaves release** -- per leaf of every tree, the fleet's class counts (one window adds 1
   to one class of one leaf per tree). :func:`leaf_values`: the counts clipped at 0 and shrunk
   towards the prior by ``smoothing`` noise standard deviations, ``(c + a p) / (sum c + a)``;
   an inner node's counts are its leaves' (children add up to their parent).

Why no noisy histograms per node: every window is in every tree, so a release of all trees'
node histograms must carry noise for a window's contribution to each of the ``n_trees`` trees --
``sqrt(n_trees)`` times the root release's noise for the same budget (about 7x at 50 trees), per
level, while a node deep in a tree holds a small share of the windows the root histograms count.
The marginals cost nothing beyond the root release; ``docs/algorithms/fedforest.md`` has what
they get right and wrong.

``grow_private_forest`` runs the three steps; ``fetch_histograms()`` and ``fetch_leaves(splits,
leaf_tree, leaf_id)`` are its only I/O and return decoded noisy counts in windows
(:class:`NoisyCounts`). Tests pass functions that count pooled windows exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from shared.model import Tree, TreeBuilder
from shared.protocol.messages.fedforest import SplitDecisions, TargetClip
from shared.splitting import impurity, pooled_gain

from .private_growth import TAIL_SIGMAS

__all__ = [
    "MIN_COUNT_SIGMAS",
    "NoisyCounts",
    "PrivateForest",
    "PrivateForestPlan",
    "RandomForest",
    "Screening",
    "count_violation",
    "feasible",
    "grouped_marginals",
    "grow_private_forest",
    "leaf_values",
    "marginal_forest",
    "marginal_split",
    "random_forest",
    "screen_features",
    "useful_edges",
    "window_counts",
]

#: Noise standard deviations of a candidate child's count (a sum of up to half a feature's
#: slots) that a child must reach for its split to score a feature.
MIN_COUNT_SIGMAS = 2.0


class NoisyCounts(NamedTuple):
    """A decoded release: class counts in windows (float; regression: ``[windows, Σ z]``) and
    each cell's noise standard deviation in windows (0: exact)."""

    counts: np.ndarray
    sigma: float


#: ``fetch_histograms() -> (d, S, K)`` class counts per feature and slot (the last slot: missing).
FetchHistograms = Callable[[], NoisyCounts]
#: ``fetch_leaves(splits, leaf_tree, leaf_id) -> (L, K)`` class counts per leaf.
FetchLeaves = Callable[[SplitDecisions, np.ndarray, np.ndarray], NoisyCounts]


@dataclass(frozen=True)
class PrivateForestPlan:
    """The private forest's settings: ``n_trees`` trees of depth ``max_depth`` splitting on the
    ``keep`` best features of the root release (scored by ``criterion``), leaves shrunk towards
    the fleet's class distribution (regression: its mean) by ``smoothing`` noise standard
    deviations. Regression (``criterion="mse"``) needs the job's public ``target`` range.
    ``structure``: ``"random"`` splits (:func:`random_forest`) or, for regression, the splits
    the root release's marginals call for (:func:`marginal_forest`), weighed against a leaf
    cell's noise ``leaf_sigma`` (in windows). ``shrink_to_parent``: a node is shrunk towards
    its parent's value (top down) rather than the fleet's."""

    n_trees: int
    max_depth: int
    keep: int
    criterion: str = "gini"
    smoothing: float = 0.3
    target: TargetClip | None = None
    shrink_to_parent: bool = False
    structure: Literal["random", "marginal"] = "random"
    leaf_sigma: float = 0.0

    def __post_init__(self) -> None:
        if (self.criterion == "mse") != (self.target is not None):
            raise ValueError("a private forest needs a target range for criterion 'mse', and only there")
        if self.structure == "marginal" and (self.criterion != "mse" or self.n_trees != 1):
            raise ValueError("the marginal structure is regression's (criterion 'mse') and grows one tree")


@dataclass(frozen=True, eq=False)
class Screening:
    """What the root release says: the kept ``features`` (ascending), every feature's ``score``
    (its best impurity decrease; ``-inf`` without a candidate), the fleet's class distribution
    ``prior`` (regression: ``[1, mean z]``, the cell of one average window) and its noisy window
    count ``total``."""

    features: np.ndarray
    score: np.ndarray
    prior: np.ndarray
    total: float


def window_counts(cells: np.ndarray, criterion: str) -> np.ndarray:
    """The windows of released cells ``(..., C)``: the sum of the class counts, or the first
    column of ``[windows, Σ z]`` (``criterion="mse"``)."""
    cells = np.asarray(cells, dtype=np.float64)
    return cells[..., 0] if criterion == "mse" else cells.sum(axis=-1)


def feasible(cells: np.ndarray, criterion: str) -> np.ndarray:
    """Released cells ``(..., C)`` made ones that windows can give (post-processing): counts
    clipped at 0, and for ``criterion="mse"`` the sums of ``z`` within ``[-windows, windows]``.

    Examples
    --------
    >>> feasible(np.array([[3.0, -5.0], [-1.0, 0.5]]), "mse").tolist()
    [[3.0, -3.0], [0.0, 0.0]]
    """
    c = np.array(cells, dtype=np.float64)
    if criterion != "mse":
        return np.clip(c, 0.0, None)
    c[..., 0] = np.clip(c[..., 0], 0.0, None)
    c[..., 1] = np.clip(c[..., 1], -c[..., 0], c[..., 0])
    return c


def screen_features(hist: np.ndarray, n_edges: np.ndarray, keep: int, criterion: str, min_count: float) -> Screening:
    """Score every feature of the root release ``hist`` ``(d, S, K)`` (slot ``b < n_edges[j] + 1``:
    present values, the last slot: missing) and keep the ``keep`` best (module docstring).
    Candidate ``b`` sends present slots ``<= b`` left and missing values right; ties keep the
    lower feature index. Regression (``criterion="mse"``, cells ``[windows, Σ z]``): the score is
    the variance decrease of ``z``, ``(S_L^2/n_L + S_R^2/n_R - S^2/n) / n``.

    Examples
    --------
    >>> hist = np.zeros((2, 3, 2))
    >>> hist[0, 0] = [5, 0]; hist[0, 1] = [0, 5]  # feature 0 separates the classes
    >>> hist[1, 0] = [3, 2]; hist[1, 1] = [2, 3]
    >>> s = screen_features(hist, np.array([1, 1]), keep=1, criterion="gini", min_count=0.0)
    >>> s.features.tolist(), s.prior.tolist()
    ([0], [0.5, 0.5])
    >>> reg = np.zeros((2, 3, 2))
    >>> reg[0, 0] = [5, -5]; reg[0, 1] = [5, 5]  # feature 0: z = -1 left of its edge, +1 right
    >>> reg[1, 0] = [5, 0]; reg[1, 1] = [5, 0]
    >>> s = screen_features(reg, np.array([1, 1]), keep=1, criterion="mse", min_count=0.0)
    >>> s.features.tolist(), s.score.tolist(), s.prior.tolist()
    ([0], [1.0, 0.0], [1.0, 0.0])
    """
    n_edges = np.asarray(n_edges, dtype=np.int64)
    d, S, K = np.shape(hist)
    present = np.arange(S)[None, :] <= n_edges[:, None]
    present[:, -1] = True  # the missing slot
    h = np.where(present[:, :, None], np.asarray(hist, dtype=np.float64), 0.0)  # slots a feature lacks hold 0
    total = feasible(h.sum(axis=1).mean(axis=0), criterion) if d else np.zeros(K)
    left = feasible(np.cumsum(h[:, : S - 2], axis=1), criterion)  # (d, S-2, K)
    if criterion == "mse":
        left[..., 0] = np.minimum(left[..., 0], total[0])
    else:
        left = np.minimum(left, total)
    gain = pooled_gain(total, left, criterion)
    n_left = window_counts(left, criterion)
    n = float(window_counts(total, criterion))
    candidate = np.arange(S - 2)[None, :] < n_edges[:, None]
    valid = candidate & (n_left >= min_count) & (n - n_left >= min_count)
    scored = np.where(valid, gain, -np.inf)
    score = scored.max(axis=1, initial=-np.inf)
    usable = np.flatnonzero(n_edges > 0)
    order = usable[np.lexsort((usable, -score[usable]))]
    if n > 0:
        prior = total / n
    else:
        prior = np.array([1.0, 0.0]) if criterion == "mse" else np.full(K, 1.0 / K)
    return Screening(np.sort(order[:keep]).astype(np.int64), score, prior, n)


def useful_edges(hist: np.ndarray, n_edges: np.ndarray, min_count: float, criterion: str = "gini") -> list[np.ndarray]:
    """Per feature, the edges (indices into its edges, ascending) that keep at least
    ``min_count`` noisy windows of the root release ``hist`` ``(d, S, K)`` between any two kept
    edges and beyond the outermost: slots are grouped from the left until their count reaches
    ``min_count``, an edge is kept after each full group, and a short last group joins the one
    before it. Edges around ranges the fleet hardly fills (noisy bin edges placed where there
    is no data) are dropped, so that random splits do not spend depth on them.

    Examples
    --------
    >>> hist = np.array([[[2.0], [0.1], [5.0], [6.0], [0.0]]])  # 4 present slots, then missing
    >>> useful_edges(hist, np.array([3]), min_count=3.0)[0].tolist()  # slots 0-2 fill one group
    [2]
    """
    totals = window_counts(hist, criterion)
    out = []
    for j, n in enumerate(np.asarray(n_edges, dtype=np.int64).tolist()):  # a loop over features
        kept, group = [], 0.0
        for slot in range(n + 1):
            group += totals[j, slot]
            if group >= min_count and slot < n:
                kept.append(slot)
                group = 0.0
        if kept and group < min_count:
            kept.pop()
        out.append(np.array(kept, dtype=np.int64))
    return out


@dataclass(frozen=True, eq=False)
class RandomForest:
    """The forest's structure: one builder per tree, every split as the gateways apply them
    (``splits``, level order) and the leaves ``(leaf_tree[i], leaf_id[i])`` (tree order)."""

    builders: list[TreeBuilder]
    splits: SplitDecisions
    leaf_tree: np.ndarray
    leaf_id: np.ndarray


Choose = Callable[[np.random.Generator, int, np.ndarray, np.ndarray], "tuple[int, int] | None"]


def _grow(
    edges: Sequence[np.ndarray],
    features: np.ndarray,
    n_trees: int,
    max_depth: int,
    n_outputs: int,
    seed: int,
    choose: Choose,
) -> RandomForest:
    """Trees grown top down, tree ``t`` from the stream ``default_rng([seed, t])``: at a node of
    ``level`` whose box is slots ``low[i]..high[i]`` of ``edges[features[i]]``, ``choose(rng,
    level, low, high)`` returns the split ``(i, b)`` (``low[i] <= b < high[i]``) or None (a
    leaf). Split ``(i, b)`` sends ``x < edges[features[i]][b]`` left and missing values right."""
    n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
    features = np.asarray(features, dtype=np.int64)
    builders, rows, leaves = [], [], []
    for t in range(n_trees):
        rng = np.random.default_rng([seed, t])
        builder = TreeBuilder(np.zeros(n_outputs))
        frontier = [(0, np.zeros(features.size, np.int64), n_edges[features].copy())]  # node, box low, box high
        for level in range(max_depth + 1):
            children = []
            for node, low, high in frontier:
                chosen = None if level == max_depth or not (high > low).any() else choose(rng, level, low, high)
                if chosen is None:
                    leaves.append((t, node))
                    continue
                i, b = chosen
                j = int(features[i])
                left, right = builder.split(node, j, float(edges[j][b]), default_left=False)
                rows.append((level, t, node, j, float(edges[j][b]), left, right))
                left_high, right_low = high.copy(), low.copy()
                left_high[i], right_low[i] = b, b + 1
                children += [(left, low, left_high), (right, right_low, high)]
            frontier = children
        builders.append(builder)
    rows.sort(key=lambda r: r[0])  # level order, trees in order within a level (a stable sort)
    leaf_tree, leaf_id = (np.array(c, dtype=np.int64) for c in zip(*leaves)) if leaves else (np.zeros(0, np.int64),) * 2
    return RandomForest(builders, _decisions(rows), leaf_tree, leaf_id)


def random_forest(
    edges: Sequence[np.ndarray], features: np.ndarray, n_trees: int, max_depth: int, n_outputs: int, seed: int
) -> RandomForest:
    """Trees grown by random splits on ``features`` (module docstring), tree ``t`` from the
    stream ``default_rng([seed, t])``. A node where no feature has an edge inside its box is a
    leaf. Split ``(j, b)`` sends ``x < edges[j][b]`` left and missing values right.

    Examples
    --------
    >>> forest = random_forest([np.array([0.0, 1.0], np.float32)], np.array([0]), 2, 3, 2, seed=0)
    >>> [b.n_nodes for b in forest.builders]  # two edges: at most two splits on the one feature
    [5, 5]
    """

    def choose(rng: np.random.Generator, level: int, low: np.ndarray, high: np.ndarray) -> tuple[int, int]:
        open_ = np.flatnonzero(high > low)
        i = int(open_[rng.integers(open_.size)])
        return i, int(rng.integers(low[i], high[i]))

    return _grow(edges, features, n_trees, max_depth, n_outputs, seed, choose)


def grouped_marginals(
    hist: np.ndarray, n_edges: np.ndarray, kept: Sequence[np.ndarray], criterion: str = "mse"
) -> list[np.ndarray]:
    """Per feature ``j``, the root release's cells :func:`feasible` and summed between its kept
    edges ``kept[j]`` (slot indices, ascending), with the number of cells each sums as one more
    column: ``(len(kept[j]) + 1, C + 1)``, group ``g`` the slots ``kept[j][g-1] + 1 ..
    kept[j][g]``; the last group holds the missing slot too (missing values go right).

    Examples
    --------
    >>> hist = np.array([[[2.0, 1.0], [3.0, -1.0], [1.0, 1.0], [0.5, 0.5]]])  # 3 present slots
    >>> grouped_marginals(hist, np.array([2]), [np.array([1])])[0].tolist()
    [[5.0, 0.0, 2.0], [1.5, 1.5, 2.0]]
    """
    out = []
    for j, keep in enumerate(kept):  # a loop over features
        n = int(n_edges[j])
        starts = np.r_[0, np.asarray(keep, dtype=np.int64) + 1]
        cells = feasible(np.asarray(hist[j, : n + 1]), criterion)
        groups = np.add.reduceat(cells, starts, axis=0)
        groups[-1] += feasible(np.asarray(hist[j, -1]), criterion)
        slots = np.diff(np.r_[starts, n + 1]).astype(np.float64)
        slots[-1] += 1.0  # the missing slot
        out.append(np.column_stack([groups, slots]))
    return out


def marginal_split(
    groups: Sequence[np.ndarray], total: float, low: np.ndarray, high: np.ndarray, noise: float, root_noise: float = 0.0
) -> tuple[int, int] | None:
    """The regression split of a node from the root release alone (post-processing), or None.

    ``groups[i]`` is kept feature ``i``'s :func:`grouped_marginals` ``[windows, Σ z, cells]``
    and the node its box ``low[i]..high[i]`` of groups. Read as if the features were independent
    and ``z`` additive in them (where both hold, exactly the node's statistics): the node holds
    ``total`` times the product of its box's shares of every feature's windows (a feature
    without windows counts as 1), and a split ``(i, b)`` sends left the share ``p`` of them that
    feature ``i``'s groups ``low[i]..b`` hold, their mean ``z`` differing from the right
    child's by the gap ``m_L - m_R`` of feature ``i``'s marginal. The split decreases the node's
    squared error by ``n p (1 - p) gap^2``, less what the release's noise (``root_noise`` per
    cell, summed over a side's ``k`` cells) adds to ``gap^2`` on average, ``root_noise^2 k (1 +
    m^2) / n_side^2`` per side (``n_side`` the side's windows in the marginal), and adds to the
    leaves' noise ``noise^2 (1 + m^2) (1 / (n p) + 1 / (n (1 - p)) - 1 / n)`` (``noise`` a leaf
    cell's standard deviation in windows): the best split that gains more than it adds (ties:
    the first kept feature, then the lowest edge), or None.

    Examples
    --------
    >>> groups = [np.array([[50.0, -25.0, 1], [50.0, 25.0, 1]]), np.array([[50.0, 0.0, 1], [50.0, 0.0, 1]])]
    >>> marginal_split(groups, 100.0, np.array([0, 0]), np.array([1, 1]), 1.0)
    (0, 0)
    >>> marginal_split(groups, 100.0, np.array([0, 0]), np.array([1, 1]), 40.0) is None  # too noisy
    True
    """
    shares = np.array(
        [g[lo : hi + 1, 0].sum() / g[:, 0].sum() if g[:, 0].sum() > 0 else 1.0 for g, lo, hi in zip(groups, low, high)]
    )
    n = total * float(np.prod(shares))
    best, best_net = None, 0.0
    for i, (g, lo, hi) in enumerate(zip(groups, low.tolist(), high.tolist())):  # a loop over kept features
        if hi <= lo or n <= 0:
            continue
        box = g[lo : hi + 1]
        left = np.cumsum(box[:-1], axis=0)
        whole = box.sum(axis=0)
        n_left, n_right = left[:, 0], whole[0] - left[:, 0]
        ok = (n_left > 0) & (n_right > 0)
        if not ok.any():
            continue
        n_l, n_r = np.where(ok, n_left, 1.0), np.where(ok, n_right, 1.0)
        m_l, m_r = left[:, 1] / n_l, (whole[1] - left[:, 1]) / n_r
        k_l, k_r = left[:, 2], whole[2] - left[:, 2]
        bias = root_noise**2 * ((1 + m_l**2) * k_l / n_l**2 + (1 + m_r**2) * k_r / n_r**2)
        p = np.where(ok, n_l / whole[0], 0.5)
        mean = whole[1] / whole[0]
        cost = noise**2 * (1.0 + mean**2) * (1.0 / (n * p) + 1.0 / (n * (1 - p)) - 1.0 / n)
        net = np.where(ok, n * p * (1 - p) * ((m_l - m_r) ** 2 - bias) - cost, -np.inf)
        b = int(np.argmax(net))
        if net[b] > best_net:
            best, best_net = (i, lo + b), float(net[b])
    return best


def marginal_forest(
    groups: Sequence[np.ndarray],
    edges: Sequence[np.ndarray],
    features: np.ndarray,
    total: float,
    noise: float,
    root_noise: float,
    max_depth: int,
) -> RandomForest:
    """One regression tree split by :func:`marginal_split` on ``features`` (``groups`` and
    ``edges``, the kept edges' values, per feature). Its splits are a function of the root
    release alone, so more trees would repeat its structure, and their average would be this
    tree with the leaf noise of one tree's share of the budget."""
    kept = np.asarray(features, dtype=np.int64)
    groups_kept = [groups[j] for j in kept.tolist()]

    def choose(rng: np.random.Generator, level: int, low: np.ndarray, high: np.ndarray) -> tuple[int, int] | None:
        return marginal_split(groups_kept, total, low, high, noise, root_noise)

    return _grow(edges, kept, 1, max_depth, 1, 0, choose)


def _decisions(rows: list[tuple[int, int, int, int, float, int, int]]) -> SplitDecisions:
    n = len(rows)
    ints = [np.array([r[i] for r in rows], dtype=np.int64) for i in (0, 1, 2, 3, 5, 6)]
    level, tree, node, feature, left, right = ints
    return SplitDecisions(
        level=level,
        tree=tree,
        node=node,
        feature=feature,
        threshold=np.array([r[4] for r in rows], dtype=np.float64),
        categorical=np.zeros(n, np.uint8),
        left=left,
        right=right,
        category_offsets=np.zeros(n + 1, np.int64),
        categories=np.zeros(0, np.int64),
        default_left=np.zeros(n, np.uint8),
    )


def count_violation(counts: np.ndarray, group: np.ndarray, sigma: float, criterion: str = "gini") -> str | None:
    """What a decoded release of class counts ``(cells, K)`` (windows, noise deviation ``sigma``
    per cell) shows that honest gateways cannot produce, or None. Every group of cells (a
    feature's slots in the root release, a tree's leaves in the leaves release; ``group[i]`` is
    cell ``i``'s) counts every window once, so honest groups have the same class totals. A
    violation: a count below 0, or a group's class total away from the median group's, each by
    more than ``TAIL_SIGMAS`` noise deviations of the quantities compared. Regression
    (``criterion="mse"``, cells ``[windows, Σ z]`` with ``|z| <= 1``): the same of the windows
    and of the groups' totals of both columns, and a sum of ``z`` beyond its cell's windows (a
    target outside the public range).

    Examples
    --------
    >>> counts = np.array([[6.0, 4.0], [4.0, 6.0], [10.0, 0.0], [0.0, 10.0], [5.0, 5.0], [5.0, 5.0]])
    >>> group = np.array([0, 0, 1, 1, 2, 2])
    >>> count_violation(counts, group, 0.5) is None
    True
    >>> counts[4, 0] = 500.0
    >>> count_violation(counts, group, 0.5)
    'class totals of 505 windows in one group where the others hold about 10'
    >>> count_violation(np.array([[4.0, 40.0], [4.0, -4.0]]), np.array([0, 1]), 0.5, "mse")
    'a target sum of 40 over 4 windows, beyond the public range'
    """
    tail = TAIL_SIGMAS * sigma
    windows = counts[:, :1] if criterion == "mse" else counts
    if (windows < -tail).any():
        return f"a class count of {float(windows.min()):.4g} windows"
    if criterion == "mse":
        beyond = np.abs(counts[:, 1]) - counts[:, 0] - tail * np.sqrt(2.0)
        if (beyond > 0).any():
            i = int(np.argmax(beyond))
            return (
                f"a target sum of {float(counts[i, 1]):.4g} over {float(counts[i, 0]):.4g} windows, beyond the "
                "public range"
            )
    n_groups = int(group.max()) + 1
    totals = np.zeros((n_groups, counts.shape[1]))
    np.add.at(totals, group, counts)
    cells = np.sqrt(np.bincount(group, minlength=n_groups))
    reference = np.median(totals, axis=0)
    over = np.abs(totals - reference) - tail * (cells[:, None] + cells.max())
    if (over > 0).any():
        g, k = np.unravel_index(np.argmax(over), over.shape)
        return (
            f"class totals of {float(totals[g, k]):.4g} windows in one group where the others hold about "
            f"{float(reference[k]):.4g}"
        )
    return None


def leaf_values(counts: np.ndarray, prior: np.ndarray, weight: float, criterion: str = "gini") -> np.ndarray:
    """Leaf values from their noisy ``counts`` ``(L, K)`` (:func:`feasible`), with ``weight``
    windows of the ``prior`` added: class distributions (the counts normalised), or for
    ``criterion="mse"`` the mean ``z`` ``(L, 1)`` (``Σ z / windows``); a leaf with nothing left
    is the prior's value.

    Examples
    --------
    >>> leaf_values(np.array([[3.0, -1.0], [0.0, 0.0]]), np.array([0.5, 0.5]), 2.0).tolist()
    [[0.8, 0.2], [0.5, 0.5]]
    >>> leaf_values(np.array([[4.0, 4.0], [0.0, 0.0]]), np.array([1.0, -0.5]), 4.0, "mse").tolist()
    [[0.25], [-0.5]]
    """
    prior = np.asarray(prior, dtype=np.float64)
    c = feasible(counts, criterion) + weight * prior[None, :]
    total = window_counts(c, criterion)[:, None]
    fallback = prior[1:] if criterion == "mse" else prior
    sums = c[:, 1:] if criterion == "mse" else c
    return np.where(total > 0, sums / np.where(total > 0, total, 1.0), fallback[None, :])


@dataclass(frozen=True, eq=False)
class PrivateForest:
    """The grown forest: its ``trees``, the root release's :class:`Screening` and the noisy leaf
    counts (:func:`feasible`) as released, per leaf of ``structure``."""

    trees: tuple[Tree, ...]
    screening: Screening
    structure: RandomForest
    leaf_counts: np.ndarray

    def importance(self) -> np.ndarray:
        """Per feature, its root impurity decrease from the root release, normalised over the
        kept features (0 for the others and where no kept feature decreases it)."""
        out = np.zeros(self.screening.score.shape[0])
        kept = self.screening.features
        out[kept] = np.clip(self.screening.score[kept], 0.0, None)
        return out / out.sum() if out.sum() > 0 else out

    def root_gain(self, criterion: str) -> float:
        """The best root decrease relative to the root impurity (0 for a pure root). Regression
        releases no sum of squares: relative to the largest variance of a ``z`` in ``[-1, 1]``
        with the fleet's mean, ``1 - mean^2`` (a lower bound on the share explained)."""
        prior = self.screening.prior
        root = 1.0 - float(prior[1]) ** 2 if criterion == "mse" else float(impurity(prior, criterion))
        best = float(self.screening.score[self.screening.features].max(initial=0.0))
        return max(best, 0.0) / root if root > 0 else 0.0


def grow_private_forest(
    plan: PrivateForestPlan,
    edges: Sequence[np.ndarray],
    seed: int,
    fetch_histograms: FetchHistograms,
    fetch_leaves: FetchLeaves,
) -> PrivateForest:
    """The private forest from the root release and the leaves release (module docstring)."""
    n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
    crit = plan.criterion
    root = fetch_histograms()
    S = root.counts.shape[1]
    min_count = MIN_COUNT_SIGMAS * root.sigma * np.sqrt(S / 2)
    screening = screen_features(root.counts, n_edges, plan.keep, crit, min_count)
    K = screening.prior.shape[0]
    count_cells = 1 if crit == "mse" else K  # the noisy cells a slot's window count adds up
    slot_count = MIN_COUNT_SIGMAS * root.sigma * np.sqrt(count_cells)
    kept = useful_edges(root.counts, n_edges, slot_count, crit)
    candidates = [e[keep] for e, keep in zip(edges, kept)]
    n_outputs = 1 if crit == "mse" else K
    if plan.structure == "marginal":
        groups = grouped_marginals(root.counts, n_edges, kept, crit)
        forest = marginal_forest(
            groups, candidates, screening.features, screening.total, plan.leaf_sigma, root.sigma, plan.max_depth
        )
    else:
        forest = random_forest(candidates, screening.features, plan.n_trees, plan.max_depth, n_outputs, seed)
    leaves = fetch_leaves(forest.splits, forest.leaf_tree, forest.leaf_id)
    counts = feasible(np.asarray(leaves.counts, dtype=np.float64).reshape(-1, K), crit)
    node_counts = {
        (t, node): counts[i] for i, (t, node) in enumerate(zip(forest.leaf_tree.tolist(), forest.leaf_id.tolist()))
    }
    s = forest.splits
    for r in range(s.level.shape[0] - 1, -1, -1):  # deepest splits first: children add up to their parent
        t = int(s.tree[r])
        node_counts[(t, int(s.node[r]))] = node_counts[(t, int(s.left[r]))] + node_counts[(t, int(s.right[r]))]
    keys = list(node_counts)
    weight = plan.smoothing * leaves.sigma
    if plan.shrink_to_parent:
        value_of = {
            (t, 0): leaf_values(node_counts[(t, 0)][None, :], screening.prior, weight, crit)[0]
            for t in range(plan.n_trees)
            if (t, 0) in node_counts
        }
        for r in range(s.level.shape[0]):  # level order: a parent's value before its children's
            t, parent = int(s.tree[r]), value_of[(int(s.tree[r]), int(s.node[r]))]
            prior = np.r_[1.0, parent] if crit == "mse" else parent
            for child in (int(s.left[r]), int(s.right[r])):
                value_of[(t, child)] = leaf_values(node_counts[(t, child)][None, :], prior, weight, crit)[0]
        values = np.array([value_of[k] for k in keys])
    else:
        values = leaf_values(np.array([node_counts[k] for k in keys]).reshape(-1, K), screening.prior, weight, crit)
    if plan.target is not None:  # z back to the target's units, within the public range
        values = plan.target.centre + plan.target.half_width * values
    for (t, node), value, c in zip(keys, values, (node_counts[k] for k in keys)):
        forest.builders[t].set_value(node, value, cover=float(window_counts(c, crit)))
    return PrivateForest(tuple(b.build() for b in forest.builders), screening, forest, counts)
