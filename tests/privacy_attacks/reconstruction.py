"""Reconstruction attack on the fleet sums the aggregator decodes (a test and benchmark helper).

The attacker is the aggregator, honest but curious. It reads only what its server half decodes --
every ``FleetSummer.ask`` total, recorded by :func:`capture_sums` -- and the public requests it
sent with it (nodes, features, edges, splits, the noise's variance). From them it

1. finds **singleton cells**: decoded (node, feature, slot) cells whose window count is 1 (on
   noisy sums, the attacker's best effort: whose count rounds to 1, ``|count - 1| < 0.5``). On
   exact sums such a cell's statistics are one window's own. Boosting: nodes the server did not
   ask for but can subtract (a sibling = its parent minus the other child) count as decoded too.
2. reads the window's **label**: boosting -- a cell's G column of class ``k`` sums
   ``p_k - [y = k]``, negative exactly for the window's class: with vector leaves the class is
   the argmin of the G vector; with one tree per class, G < 0 in class k's tree says "k" and
   G > 0 says "not k" (the label is stated once one class is left). FedForest -- the one class
   column that holds the window.
3. **links** cells into records of one window (a label and a slot per feature):
   boosting -- cells of one round and tree with equal (G, H) name the same window (from round 2
   on gradients differ between windows; in round 1 all windows of a class share them). On exact
   sums "equal" is bit for bit; on noisy sums the attacker rounds G and H to the noise's
   standard deviation (best effort). A group that contradicts itself (two slots of one feature,
   two nodes of one level) holds several windows and is dropped. FedForest -- in a node where
   one class's weight fills exactly one slot of every requested feature (a window alone of its
   class there), those slots, joined down the tree's paths (a node's lone window of a class is
   its parent's when the parent has one too). Then (:func:`merge_records`) records of all rounds, trees and levels
   are merged when they agree on at least ``min_overlap`` features, contradict on none and
   their labels are compatible.

Scoring (:func:`score`, against the ground truth, which the attack never reads): each record
that states a label and names at least ``MIN_FEATURES`` (10) features is attributed to the
training window whose true slots agree with most of the record's; the window is **rebuilt**
when the label is its label and at least ``MIN_AGREEMENT`` (half) of the record's slots are its
slots. A label alone, or a record of fewer than 10 features, never counts.

**Label inference**: the attacker labels every training window -- with the label of the record
attributed to it (the best-agreeing one), the fleet's majority class for the others -- and the
share it gets right is compared with the majority-class share (what labelling every window with
the commonest class gets). Boosting's cell claims are also checked one by one
(:func:`claim_accuracy`): of the claimed cells that really hold one window, the share whose label
the claim states (100 % on exact sums: a count-1 cell's G is that window's own).

Layouts the attack reads (:class:`BoostingLevel`, :class:`ForestLevel`) come from the requests'
wire types through :data:`BOOSTING_DECODERS` and :data:`FOREST_DECODERS`: a new request type is
one decoder function and one entry. Not read: FedSCS-XGB's private leaves release (per leaf G
and H, no count; a leaf's count is its node's in the level release, which is read) and
FedForest's private leaves release (per leaf class counts, no bins: a leaf's path bounds its
windows' values by split thresholds, it names no slot).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from aggregator.fleet_sums import FleetSummer
from edge_client.training_data import class_ids
from shared.histograms import histogram_slots, route_round
from shared.protocol.envelope import type_name_of
from shared.protocol.messages.fedforest import ForestHistogramRequest
from shared.protocol.messages.fedscs_xgb import (
    RoundSplits,
    XgbHistogramRequest,
    XgbPrivateLevelRequest,
    XgbTask,
)
from shared.sketches import bin_ids

__all__ = [
    "AttackScore",
    "BoostingLevel",
    "CapturedSum",
    "CellCounts",
    "Claims",
    "ForestLevel",
    "Fragments",
    "Records",
    "Truth",
    "attack_boosting",
    "attack_forest",
    "attack_training",
    "boosting_levels",
    "boosting_truth",
    "bundled_fleet",
    "capture_sums",
    "claim_accuracy",
    "forest_levels",
    "forest_truth",
    "link_boosting",
    "merge_records",
    "score",
    "singleton_cells",
]

#: A record's slot for a feature it does not name.
UNKNOWN = -1
#: The slot code of a missing value (layouts put it last, which moves with the round's features).
MISSING = 1 << 20
#: A record must name this many features to count as a rebuilt window ...
MIN_FEATURES = 10
#: ... and agree with the window's slots on this share of them.
MIN_AGREEMENT = 0.5


# -- what the aggregator decodes ----------------------------------------------------------------


@dataclass(frozen=True)
class CapturedSum:
    """One fleet sum as the server half holds it: the requests it sent (client -> body) and the
    decoded total (int64: the signed sums)."""

    requests: Mapping[str, Any]
    total: np.ndarray


@contextlib.contextmanager
def capture_sums() -> Iterator[list[CapturedSum]]:
    """Record every fleet sum the aggregator decodes while the block runs (wraps
    ``FleetSummer.ask``; restored on exit).

    >>> with capture_sums() as sums:
    ...     pass
    >>> sums
    []
    """
    captured: list[CapturedSum] = []
    original = FleetSummer.ask

    def ask(self, requests, *args, **kwargs):
        result = original(self, requests, *args, **kwargs)
        captured.append(CapturedSum(dict(requests), result.total.view(np.int64).copy()))
        return result

    FleetSummer.ask = ask
    try:
        yield captured
    finally:
        FleetSummer.ask = original


@dataclass(frozen=True)
class BoostingLevel:
    """One decoded depth level of a boosting round, in natural units.

    ``node_tree``/``node_id`` (R,): the nodes (tree of the round, node id); ``features`` (k,):
    the job's columns of the feature axis; ``grad``/``hess`` (R, m, k, S) and ``count`` (R, k, S);
    ``classes_of`` (R, m): the class whose gradient each G column sums; ``slots`` (S,): the slot
    code of each slot (bins, then :data:`MISSING`); ``noise_sd`` (R,): the standard deviation of
    a cell's noise (0: exact); ``children`` (n, 4): the round's splits so far, rows ``(tree,
    node, left, right)``; ``capture``: index of the captured sum it came from."""

    round: int
    level: int
    node_tree: np.ndarray
    node_id: np.ndarray
    features: np.ndarray
    grad: np.ndarray
    hess: np.ndarray
    count: np.ndarray
    classes_of: np.ndarray
    slots: np.ndarray
    noise_sd: np.ndarray
    children: np.ndarray
    capture: int
    n_classes: int


@dataclass(frozen=True)
class _BoostingLayout:
    """What a request type's decoder gives: the level's arrays before round bookkeeping."""

    task: XgbTask
    node_tree: np.ndarray
    node_id: np.ndarray
    features: np.ndarray
    stats: np.ndarray  # (R, 2m + 1, k, S) natural units
    noise_sd: float
    splits: RoundSplits


def _histogram_layout(request: XgbHistogramRequest, total: np.ndarray) -> _BoostingLayout:
    """The histogram protocol: (nodes, 2m + 1, d, S) fixed point with ``frac_bits`` (counts
    plain), then 2 loss entries when ``with_loss``."""
    if request.noise is not None:
        raise ValueError("noisy histogram requests are not decoded here")
    R, d = request.node_tree.shape[0], request.task.n_features
    body = total[: R * request.stats * d * request.slots].reshape(R, request.stats, d, request.slots)
    stats = body.astype(np.float64)
    stats[:, :-1] /= 2.0**request.frac_bits
    return _BoostingLayout(request.task, request.node_tree, request.node_id, np.arange(d), stats, 0.0, request.splits)


def _private_level_layout(request: XgbPrivateLevelRequest, total: np.ndarray) -> _BoostingLayout:
    """The private protocol: (nodes, 2m + 1, k round features, S) on the lattice ``1 / Q``
    (counts too), Skellam noise of variance ``mu`` per cell."""
    R, k, S = request.node_id.shape[0], request.round.features.shape[0], request.round.slots
    scale = float(request.lattice.scale)
    stats = total.reshape(R, request.stats, k, S).astype(np.float64) / scale
    # the request's split features are job columns; the level's layout indexes round features
    return _BoostingLayout(
        request.task,
        np.zeros(R, np.int64),
        request.node_id,
        request.round.features,
        stats,
        math.sqrt(request.noise.mu) / scale,
        request.splits,
    )


#: Request wire type -> decoder of its fleet sum (add a protocol here).
BOOSTING_DECODERS: dict[str, Callable[[Any, np.ndarray], _BoostingLayout]] = {
    "fedscs_xgb.histograms": _histogram_layout,
    "fedscs_xgb.private_level": _private_level_layout,
}


def _wire_name(body: Any) -> str:
    """A request body's message type ("" for a body that is no message)."""
    try:
        return type_name_of(body)
    except TypeError:
        return ""


def _classes_of(task: XgbTask, node_tree: np.ndarray) -> np.ndarray:
    """(R, m): the class whose gradient each G column of each node sums."""
    if task.vector_leaves:
        return np.tile(np.arange(task.n_outputs), (node_tree.shape[0], 1))
    if task.objective == "softmax":
        return node_tree.astype(np.int64)[:, None]
    return np.ones((node_tree.shape[0], 1), np.int64)  # logistic: p - y is negative for class 1


def boosting_levels(captured: Sequence[CapturedSum]) -> list[BoostingLevel]:
    """The boosting levels among ``captured`` (other sums skipped), with the siblings the
    server can subtract added as nodes (a round starts with a level that has no splits)."""
    levels: list[BoostingLevel] = []
    round_no, level_no, known = 0, 0, {}
    for index, item in enumerate(captured):
        request = next(iter(item.requests.values()))
        decoder = BOOSTING_DECODERS.get(_wire_name(request))
        if decoder is None:
            continue
        layout = decoder(request, item.total)
        s = layout.splits
        if s.node.shape[0] == 0:
            round_no, level_no, known = round_no + 1, 0, {}
        else:
            level_no += 1
        m = (layout.stats.shape[1] - 1) // 2
        node_tree, node_id = layout.node_tree.astype(np.int64), layout.node_id.astype(np.int64)
        stats = list(layout.stats)
        sd = [layout.noise_sd] * len(stats)
        for t, n, st in zip(node_tree.tolist(), node_id.tolist(), stats):
            known[(t, n)] = (st, layout.noise_sd)
        children = np.column_stack([s.tree, s.node, s.left, s.right]).astype(np.int64).reshape(-1, 4)
        derived_tree, derived_id = [], []
        for t, parent, left, right in children.tolist():
            have = [(t, c) in known for c in (left, right)]
            if (t, parent) not in known or have[0] == have[1]:
                continue
            fetched, missing = (left, right) if have[0] else (right, left)
            (p_stats, p_sd), (c_stats, c_sd) = known[(t, parent)], known[(t, fetched)]
            known[(t, missing)] = (p_stats - c_stats, math.hypot(p_sd, c_sd))
            derived_tree.append(t)
            derived_id.append(missing)
            stats.append(known[(t, missing)][0])
            sd.append(known[(t, missing)][1])
        node_tree = np.concatenate([node_tree, np.array(derived_tree, np.int64)])
        node_id = np.concatenate([node_id, np.array(derived_id, np.int64)])
        block = np.stack(stats)
        S = block.shape[-1]
        slots = np.arange(S)
        slots[-1] = MISSING
        levels.append(
            BoostingLevel(
                round_no,
                level_no,
                node_tree,
                node_id,
                np.asarray(layout.features, np.int64),
                block[:, :m],
                block[:, m : 2 * m],
                block[:, 2 * m],
                _classes_of(layout.task, node_tree),
                slots,
                np.array(sd),
                children,
                index,
                len(layout.task.classes),
            )
        )
    return levels


@dataclass(frozen=True)
class ForestLevel:
    """One decoded FedForest level: per (node, feature) pair ``p`` -- node ``(pair_tree[p],
    pair_node[p])``, job column ``pair_feature[p]`` -- and slot, the ``windows`` count (P, S) and
    the class weights (P, S, K); ``slots`` (S,) slot codes; ``noise_sd`` per cell (0: exact);
    ``children`` (n, 4): the splits the request announced, rows ``(tree, node, left, right)``."""

    level: int
    pair_tree: np.ndarray
    pair_node: np.ndarray
    pair_feature: np.ndarray
    windows: np.ndarray
    class_weight: np.ndarray
    slots: np.ndarray
    noise_sd: float
    children: np.ndarray
    capture: int


def _forest_histogram_layout(request: ForestHistogramRequest, total: np.ndarray, index: int) -> ForestLevel:
    """FedForest's histogram protocol: (pairs, slots, 1 + K) integers (windows, then the
    bootstrap-weighted class counts), no noise."""
    if request.noise is not None or request.task.task != "classification":
        raise ValueError("only the exact classification histograms are decoded here")
    hist = total.reshape(request.features.shape[0], request.slots, request.terms).astype(np.float64)
    per_node = np.diff(request.feature_offsets)
    slots = np.arange(request.slots)
    slots[-1] = MISSING
    s = request.splits
    return ForestLevel(
        request.level,
        np.repeat(request.node_tree, per_node),
        np.repeat(request.node_id, per_node),
        request.features.astype(np.int64),
        hist[..., 0],
        hist[..., 1:],
        slots,
        0.0,
        np.column_stack([s.tree, s.node, s.left, s.right]).astype(np.int64).reshape(-1, 4),
        index,
    )


def _forest_private_root_layout(request, total: np.ndarray, index: int) -> ForestLevel:
    """FedForest's private root release (``fedforest.dp_histograms``): per feature and slot the
    class counts of all windows, times ``noise.scale``, Skellam noise of variance ``noise.mu``
    per cell; one node (the root of every tree)."""
    P, K = request.features.shape[0], len(request.task.classes)
    counts = total.reshape(P, request.slots, K).astype(np.float64) / request.noise.scale
    slots = np.arange(request.slots)
    slots[-1] = MISSING
    zeros = np.zeros(P, np.int64)
    return ForestLevel(
        0,
        zeros,
        zeros,
        request.features.astype(np.int64),
        counts.sum(axis=-1),
        counts,
        slots,
        math.sqrt(K * request.noise.mu) / request.noise.scale,
        np.zeros((0, 4), np.int64),
        index,
    )


#: Request wire type -> decoder of its fleet sum (add a protocol here).
FOREST_DECODERS: dict[str, Callable[[Any, np.ndarray, int], ForestLevel]] = {
    "fedforest.histograms": _forest_histogram_layout,
    "fedforest.dp_histograms": _forest_private_root_layout,
}


def forest_levels(captured: Sequence[CapturedSum]) -> list[ForestLevel]:
    """The FedForest levels among ``captured`` (other sums skipped)."""
    out = []
    for index, item in enumerate(captured):
        request = next(iter(item.requests.values()))
        decoder = FOREST_DECODERS.get(_wire_name(request))
        if decoder is not None:
            out.append(decoder(request, item.total, index))
    return out


# -- the attack ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fragments:
    """Singleton cells: per cell its level (index into the levels), round, level number, tree,
    node, job feature and slot code, its G and H columns (F, m), and the classes its label can
    be (F, K) by the sign of G."""

    level_index: np.ndarray
    round: np.ndarray
    level: np.ndarray
    tree: np.ndarray
    node: np.ndarray
    feature: np.ndarray
    slot: np.ndarray
    grad: np.ndarray
    hess: np.ndarray
    noise_sd: np.ndarray
    label_mask: np.ndarray

    @property
    def claims(self) -> np.ndarray:
        """The class each cell's window is claimed to have, -1 where G leaves several."""
        return np.where(self.label_mask.sum(axis=1) == 1, self.label_mask.argmax(axis=1), -1)


@dataclass(frozen=True)
class Records:
    """The attacker's reconstructed windows: ``slots`` (r, d) slot codes (:data:`UNKNOWN` for
    features a record does not name) and ``label_mask`` (r, K) the classes still possible."""

    slots: np.ndarray
    label_mask: np.ndarray

    @property
    def named(self) -> np.ndarray:
        return (self.slots != UNKNOWN).sum(axis=1)

    @property
    def label(self) -> np.ndarray:
        """The stated label, -1 when more than one class (or none) is left."""
        return np.where(self.label_mask.sum(axis=1) == 1, self.label_mask.argmax(axis=1), -1)


@dataclass(frozen=True)
class CellCounts:
    """Decoded cells: non-empty (count rounds to >= 1) and singletons (rounds to 1)."""

    nonempty: int
    singletons: int


def singleton_cells(levels: Sequence[BoostingLevel]) -> tuple[Fragments, CellCounts]:
    """Every decoded cell whose count rounds to one window, with the label its G says, and the
    cell counts."""
    parts, nonempty, singletons = [], 0, 0
    for i, lv in enumerate(levels):
        rounded = np.rint(lv.count)
        nonempty += int((rounded >= 1).sum())
        r, j, s = np.nonzero(np.abs(lv.count - 1.0) < 0.5)
        singletons += r.shape[0]
        g = lv.grad[r, :, j, s]  # (F, m)
        h = lv.hess[r, :, j, s]
        classes = lv.classes_of[r]
        mask = np.zeros((r.shape[0], lv.n_classes), bool)
        rows = np.arange(r.shape[0])
        if g.shape[1] > 1:  # vector leaves: the window's class is the one negative column
            mask[rows, classes[rows, np.argmin(g, axis=1)]] = True
        else:  # one output: G < 0 says "this class", G >= 0 "another"
            mask[:] = (g[:, 0] >= 0)[:, None]
            mask[rows, classes[:, 0]] = g[:, 0] < 0
        parts.append(
            Fragments(
                np.full(r.shape[0], i),
                np.full(r.shape[0], lv.round),
                np.full(r.shape[0], lv.level),
                lv.node_tree[r],
                lv.node_id[r],
                lv.features[j],
                lv.slots[s],
                g,
                h,
                lv.noise_sd[r],
                mask,
            )
        )
    if not parts:
        raise ValueError("no boosting level among the captured sums")
    joined = Fragments(*(np.concatenate([getattr(p, f) for p in parts]) for f in Fragments.__dataclass_fields__))
    return joined, CellCounts(nonempty, singletons)


def _conflicting(group: np.ndarray, key: np.ndarray, value: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, whether some ``key`` of it comes with two different ``value``s."""
    pairs = np.unique(np.column_stack([group, key, value]), axis=0)
    keys, counts = np.unique(pairs[:, :2], axis=0, return_counts=True)
    bad = np.zeros(n_groups, bool)
    bad[keys[counts > 1, 0]] = True
    return bad


def link_boosting(fragments: Fragments, n_features: int) -> Records:
    """Records of the groups of singleton cells with equal (G, H) in one round and tree (on
    noisy cells: equal after rounding to the noise's standard deviation), groups that
    contradict themselves dropped."""
    step = np.where(fragments.noise_sd > 0, fragments.noise_sd, 1.0)[:, None]
    values = np.concatenate([fragments.grad, fragments.hess], axis=1)
    values = np.where(fragments.noise_sd[:, None] > 0, np.rint(values / step), values)
    key = np.column_stack([fragments.round, fragments.tree, values])
    _, group = np.unique(key, axis=0, return_inverse=True)
    group = group.ravel()
    n = int(group.max(initial=-1)) + 1
    bad = _conflicting(group, fragments.feature, fragments.slot, n)
    level_key = fragments.tree * 1024 + fragments.level
    bad |= _conflicting(group, level_key, fragments.node, n)
    keep = ~bad[group]
    new_id = np.cumsum(~bad) - 1
    g = new_id[group[keep]]
    r = int((~bad).sum())
    slots = np.full((r, n_features), UNKNOWN, np.int64)
    slots[g, fragments.feature[keep]] = fragments.slot[keep]
    mask = np.ones((r, fragments.label_mask.shape[1]), bool)
    np.logical_and.at(mask, g, fragments.label_mask[keep])
    return Records(slots, mask)


def merge_records(records: Records, min_overlap: int = 3) -> Records:
    """Greedy merge, largest records first: a record joins the merged record it agrees with on
    the most features (at least ``min_overlap``) if they contradict on no feature and share a
    possible class; otherwise it starts a new one. Records naming fewer than ``min_overlap``
    features stay as they are."""
    d, K = records.slots.shape[1], records.label_mask.shape[1]
    order = np.argsort(-records.named, kind="stable")
    slots = np.full((order.shape[0], d), UNKNOWN, np.int64)
    masks = np.zeros((order.shape[0], K), bool)
    index: dict[tuple[int, int], list[int]] = {}  # (feature, slot) -> merged records holding it
    n = 0
    for i in order.tolist():
        row = records.slots[i]
        named = np.flatnonzero(row != UNKNOWN)
        target = -1
        if named.shape[0] >= min_overlap:
            hits = [index.get((j, s), ()) for j, s in zip(named.tolist(), row[named].tolist())]
            flat = np.fromiter((c for h in hits for c in h), np.int64)
            if flat.size:
                agree = np.bincount(flat, minlength=n)
                for c in np.argsort(-agree, kind="stable").tolist():
                    if agree[c] < min_overlap:
                        break
                    theirs = slots[c, named]
                    if ((theirs != UNKNOWN) & (theirs != row[named])).any() or not (
                        masks[c] & records.label_mask[i]
                    ).any():
                        continue
                    target = c
                    break
        if target < 0:
            target, n = n, n + 1
            masks[target] = records.label_mask[i]
        else:
            masks[target] &= records.label_mask[i]
        new = named[slots[target, named] == UNKNOWN]
        slots[target, new] = row[new]
        for j in new.tolist():
            index.setdefault((j, int(row[j])), []).append(target)
    return Records(slots[:n], masks[:n])


def attack_boosting(
    levels: Sequence[BoostingLevel], n_features: int, *, min_overlap: int = 3
) -> tuple[Records, Fragments, CellCounts]:
    """The whole attack on boosting levels: singleton cells, linked by (G, H), merged by bins."""
    fragments, cells = singleton_cells(levels)
    return merge_records(link_boosting(fragments, n_features), min_overlap), fragments, cells


def attack_forest(
    levels: Sequence[ForestLevel], n_features: int, *, min_overlap: int = 3
) -> tuple[Records, CellCounts]:
    """FedForest: per node and class whose weight fills exactly one slot of each of the node's
    features (one window alone of its class there; noisy weights: rounded), a record of that
    class and those slots. A node's lone window of a class is its parent's too when the parent
    has one as well (it sits in one of the children): such records are joined down each tree's
    paths. Then the records are merged by bins (:func:`merge_records`)."""
    if not levels:
        raise ValueError("no FedForest level among the captured sums")
    n_classes = levels[0].class_weight.shape[-1]
    rows: dict[tuple[int, int, int], np.ndarray] = {}
    parent: dict[tuple[int, int], int] = {}
    nonempty = singletons = 0
    for lv in levels:
        for t, node, left, right in lv.children.tolist():
            parent[(t, left)] = parent[(t, right)] = node
        windows = np.rint(lv.windows)
        nonempty += int((windows >= 1).sum())
        singletons += int((np.abs(lv.windows - 1.0) < 0.5).sum())
        present = np.rint(lv.class_weight) >= 1  # (P, S, K)
        lone = present.sum(axis=1) == 1  # (P, K): the class sits in one slot of the pair's feature
        node_key = lv.pair_tree * (1 << 32) + lv.pair_node
        nodes, pair_node = np.unique(node_key, return_inverse=True)
        pair_node = pair_node.ravel()
        all_lone = np.ones((nodes.shape[0], n_classes), bool)
        np.logical_and.at(all_lone, pair_node, lone)
        for node, c in zip(*np.nonzero(all_lone)):
            pairs = np.flatnonzero(pair_node == node)
            row = np.full(n_features, UNKNOWN, np.int64)
            row[lv.pair_feature[pairs]] = lv.slots[present[pairs, :, c].argmax(axis=1)]
            rows[(int(lv.pair_tree[pairs[0]]), int(lv.pair_node[pairs[0]]), int(c))] = row
    top: dict[tuple[int, int, int], tuple[int, int, int]] = {}  # a record's highest ancestor record

    def root(key: tuple[int, int, int]) -> tuple[int, int, int]:
        if key not in top:
            up = (key[0], parent.get((key[0], key[1]), -1), key[2])
            top[key] = root(up) if up in rows else key
        return top[key]

    joined: dict[tuple[int, int, int], np.ndarray] = {}
    for key in sorted(rows):
        row = joined.setdefault(root(key), np.full(n_features, UNKNOWN, np.int64))
        new = (row == UNKNOWN) & (rows[key] != UNKNOWN)
        row[new] = rows[key][new]
    keys = list(joined)
    records = Records(
        np.array([joined[k] for k in keys], np.int64).reshape(-1, n_features),
        np.array([np.arange(n_classes) == k[2] for k in keys], bool).reshape(-1, n_classes),
    )
    return merge_records(records, min_overlap), CellCounts(nonempty, singletons)


# -- ground truth and scores --------------------------------------------------------------------


def _slot_codes(X: np.ndarray, edges: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(slot codes with :data:`MISSING`, raw slots) of ``X`` under ``edges``, as a gateway bins."""
    n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
    raw = histogram_slots(bin_ids(np.asarray(X, np.float32), list(edges)), n_edges)
    missing = int(n_edges.max(initial=0)) + 1
    return np.where(raw == missing, MISSING, raw), raw


@dataclass(frozen=True)
class Truth:
    """What the test knows: every training window's label and slot codes (n, d), in the order of
    the clients (-2 for a feature no request binned), and the windows' rows per client (the
    first window's index in ``offset``)."""

    labels: np.ndarray
    slots: np.ndarray
    X: Mapping[str, np.ndarray]
    offset: Mapping[str, int]


def _labels(clients, task_classes: tuple[str, ...]) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, int]]:
    labels, X, offset, at = [], {}, {}, 0
    for c in clients:
        y = class_ids(np.asarray(c.y), task_classes)
        X[c.client_id] = np.asarray(c.X, np.float64)[y >= 0]
        labels.append(y[y >= 0])
        offset[c.client_id] = at
        at += labels[-1].shape[0]
    return np.concatenate(labels), X, offset


def boosting_truth(clients, captured: Sequence[CapturedSum]) -> Truth:
    """The ground truth of a boosting job (``clients``: the simulation's ``ClientData``)."""
    requests = [next(iter(c.requests.values())) for c in captured]
    requests = [r for r in requests if _wire_name(r) in BOOSTING_DECODERS]
    labels, X, offset = _labels(clients, requests[0].task.classes)
    pooled = np.concatenate([X[c.client_id] for c in clients])
    slots = np.full(pooled.shape, -2, np.int64)
    for r in requests:
        if isinstance(r, XgbPrivateLevelRequest):
            features, edges = r.round.features, r.round.edges()
        else:
            features, edges = np.arange(r.task.n_features), r.edges()
        slots[:, features] = _slot_codes(pooled[:, features], edges)[0]
    return Truth(labels, slots, X, offset)


def forest_truth(clients, captured: Sequence[CapturedSum]) -> Truth:
    """The ground truth of a FedForest job: labels and slot codes under the job's edges."""
    request = next(r for r in (next(iter(c.requests.values())) for c in captured) if _wire_name(r) in FOREST_DECODERS)
    labels, X, offset = _labels(clients, request.task.classes)
    pooled = np.concatenate([X[c.client_id] for c in clients])
    o = request.edge_offsets
    slots = np.empty(pooled.shape, np.int64)
    for j in range(pooled.shape[1]):
        slot = np.searchsorted(request.edge_values[o[j] : o[j + 1]].astype(np.float64), pooled[:, j], side="right")
        slots[:, j] = np.where(np.isnan(pooled[:, j]), MISSING, slot)
    return Truth(labels, slots, X, offset)


@dataclass(frozen=True)
class Claims:
    """Label claims on singleton cells: how many cells, how many of them really hold one window
    (``isolated``), and for how many of those the claimed label is that window's."""

    cells: int = 0
    isolated: int = 0
    right: int = 0

    @property
    def accuracy(self) -> float:
        """Share of the claims on real singletons that state the window's label (NaN: none)."""
        return self.right / self.isolated if self.isolated else float("nan")

    def __add__(self, other: Claims) -> Claims:
        return Claims(self.cells + other.cells, self.isolated + other.isolated, self.right + other.right)


def claim_accuracy(
    levels: Sequence[BoostingLevel], fragments: Fragments, captured: Sequence[CapturedSum], truth: Truth
) -> Claims:
    """The singleton cells the attacker states a label for, checked against the windows really
    in them (routed through the level's splits, as the gateways route)."""
    claims = fragments.claims
    isolated = right = 0
    for i, lv in enumerate(levels):
        at = np.flatnonzero((fragments.level_index == i) & (claims >= 0))
        if not at.size:
            continue
        keys, labels = _cell_keys(lv, captured[lv.capture].requests, truth)
        order = np.argsort(keys, kind="stable")
        keys, labels = keys[order], labels[order]
        column = np.searchsorted(lv.features, fragments.feature[at])
        claim_keys = _cell_key(fragments.tree[at], fragments.node[at], column, fragments.slot[at], lv.features.shape[0])
        lo, hi = np.searchsorted(keys, claim_keys, "left"), np.searchsorted(keys, claim_keys, "right")
        alone = hi - lo == 1
        isolated += int(alone.sum())
        right += int((labels[lo[alone]] == claims[at][alone]).sum())
    return Claims(int((claims >= 0).sum()), isolated, right)


def _cell_key(tree, node, column, slot, k: int) -> np.ndarray:
    slot = np.where(np.asarray(slot) == MISSING, (1 << 20) - 1, slot)
    return ((np.asarray(tree, np.int64) * (1 << 20) + node) * k + column) * (1 << 20) + slot


def _cell_keys(lv: BoostingLevel, requests: Mapping[str, Any], truth: Truth) -> tuple[np.ndarray, np.ndarray]:
    """Every (window, tree, feature) of the level's request: its cell key and the window's label."""
    keys, labels = [], []
    for client, request in requests.items():
        X = truth.X[client]
        y = truth.labels[truth.offset[client] : truth.offset[client] + X.shape[0]]
        s = request.splits
        if isinstance(request, XgbPrivateLevelRequest):
            codes, raw = _slot_codes(X[:, request.round.features], request.round.edges())
            position = route_round(
                raw,
                request.round.slots - 1,
                1,
                np.zeros_like(s.tree),
                s.node,
                np.searchsorted(request.round.features, s.feature),
                s.bin,
                s.default_left,
                s.left,
                s.right,
            )
        else:
            codes, raw = _slot_codes(X, request.edges())
            position = route_round(
                raw,
                request.slots - 1,
                request.task.trees_per_round,
                s.tree,
                s.node,
                s.feature,
                s.bin,
                s.default_left,
                s.left,
                s.right,
            )
        T, n = position.shape
        k = codes.shape[1]
        tree = np.repeat(np.arange(T), n * k)
        node = np.repeat(position.ravel(), k)
        column = np.tile(np.arange(k), T * n)
        keys.append(_cell_key(tree, node, column, np.tile(codes.ravel(), T), k))
        labels.append(np.tile(np.repeat(y, k), T))
    return np.concatenate(keys), np.concatenate(labels)


@dataclass(frozen=True)
class AttackScore:
    """How far the attack got (module docstring): windows, decoded cells, the records scored
    (stating a label, naming >= :data:`MIN_FEATURES` features), rebuilt windows (with the
    median number of features their records name), the records' label accuracy, the windows
    whose label the attacker gets right when it labels every window (a record's label where one
    is attributed to it, else the majority class), the cell claims, and the majority-class
    share to compare with."""

    windows: int
    nonempty_cells: int
    singleton_cells: int
    records: int
    rebuilt: int
    median_features: float
    record_label_accuracy: float
    labelled_right: int
    claims: Claims
    majority: float

    @property
    def singleton_share(self) -> float:
        return self.singleton_cells / max(self.nonempty_cells, 1)

    @property
    def rebuilt_share(self) -> float:
        return self.rebuilt / self.windows

    @property
    def label_rate(self) -> float:
        """Share of the training windows whose label the attacker states right."""
        return self.labelled_right / self.windows


def score(records: Records, truth: Truth, cells: CellCounts, claims: Claims = Claims()) -> AttackScore:
    """Attribute every record that states a label and names >= :data:`MIN_FEATURES` features to
    the window whose slots agree most with its own (sparse one-hot products), and count the
    windows rebuilt and labelled right (module docstring).

    Examples
    --------
    >>> truth = Truth(np.array([0, 1]), np.array([[3] * 12, [5] * 12]), {}, {})
    >>> record = Records(np.array([[5] * 10 + [0, UNKNOWN]]), np.array([[False, True]]))
    >>> s = score(record, truth, CellCounts(0, 0))
    >>> s.rebuilt, s.labelled_right, s.majority
    (1, 2, 0.5)
    """
    labels = truth.labels
    K = int(records.label_mask.shape[1])
    counts = np.bincount(labels, minlength=K)
    majority = float(counts.max() / labels.shape[0])
    guess = np.full(labels.shape[0], int(counts.argmax()))  # windows no record names: the majority class
    eligible = np.flatnonzero((records.named >= MIN_FEATURES) & (records.label >= 0))
    if not eligible.size:
        return AttackScore(
            labels.shape[0],
            cells.nonempty,
            cells.singletons,
            0,
            0,
            0.0,
            float("nan"),
            int((guess == labels).sum()),
            claims,
            majority,
        )
    rec = records.slots[eligible]
    codes = np.unique(np.concatenate([rec[rec != UNKNOWN], truth.slots.ravel()]))
    width = codes.shape[0]

    def one_hot(slots: np.ndarray) -> sparse.csr_matrix:
        rows, cols = np.nonzero(slots != UNKNOWN)
        column = cols * width + np.searchsorted(codes, slots[rows, cols])
        return sparse.csr_matrix(
            (np.ones(rows.shape[0], np.int32), (rows, column)), shape=(slots.shape[0], slots.shape[1] * width)
        )

    agree = (one_hot(rec) @ one_hot(np.where(truth.slots == -2, UNKNOWN, truth.slots)).T).toarray()
    best = agree.argmax(axis=1)
    named = records.named[eligible]
    share = agree[np.arange(best.shape[0]), best] / named
    stated = records.label[eligible]
    label_right = stated == labels[best]
    rebuilt = label_right & (share >= MIN_AGREEMENT)
    windows, first = np.unique(best[rebuilt], return_index=True)
    order = np.argsort(share, kind="stable")  # a window named by several records: the best-agreeing one's label
    guess[best[order]] = stated[order]
    return AttackScore(
        labels.shape[0],
        cells.nonempty,
        cells.singletons,
        int(eligible.shape[0]),
        int(windows.shape[0]),
        float(np.median(named[rebuilt][first])) if windows.size else 0.0,
        float(label_right.mean()),
        int((guess == labels).sum()),
        claims,
        majority,
    )


def bundled_fleet(folder, *, every: int = 1, windows_per_gateway: int | None = None) -> list:
    """The bundled recordings (``firmware_bridge.importers.seglearn_watch``, imported into
    ``folder``) as one simulated gateway each: its labelled windows in time order, every
    ``every``-th feature, the first ``windows_per_gateway`` windows (None: all)."""
    from edge_client.processing import extract_recording
    from edge_client.training_data import ClientData
    from firmware_bridge.importers import seglearn_watch

    clients = []
    for i, path in enumerate(seglearn_watch.import_all(folder)):
        table, _ = extract_recording(path)
        labelled = np.flatnonzero([y is not None for y in table.labels])
        rows = labelled[np.argsort(table.start_us[labelled], kind="stable")][:windows_per_gateway]
        clients.append(
            ClientData(
                f"gw-{i:02d}",
                table.X[rows][:, ::every].astype(np.float32),
                np.array([str(v) for v in table.labels[rows]]),
            )
        )
    return clients


def attack_training(clients, algorithm, *, seed: int = 0, noise_seed: int | None = None) -> AttackScore:
    """Train ``algorithm`` on ``clients`` (``aggregator.simulate.Simulation``; ``noise_seed``
    seeds the gateways' noise draws), capture the sums the aggregator decodes, attack them and
    score the attack."""
    from aggregator.simulate import Simulation

    sim = Simulation(clients)
    if noise_seed is not None:
        for participant in sim.participants.values():
            participant.seed_noise(noise_seed)
    with capture_sums() as sums:
        sim.run(algorithm, seed=seed)
    n_features = int(np.asarray(clients[0].X).shape[1])
    levels = boosting_levels(sums)
    if levels:
        records, fragments, cells = attack_boosting(levels, n_features)
        truth = boosting_truth(clients, sums)
        return score(records, truth, cells, claim_accuracy(levels, fragments, sums, truth))
    forest = forest_levels(sums)
    if not forest:
        raise ValueError(f"{type(algorithm).__name__}: no sum the attack can decode was captured")
    truth = forest_truth(clients, sums)
    records, cells = attack_forest(forest, n_features)
    return score(records, truth, cells)
