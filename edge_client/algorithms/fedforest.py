"""FedForest's client half (paper Alg. 1, lines 4 and 7-17): bootstrap, node membership, per-level
summaries and quantile sketches, left-child summaries of the server's candidates.

Per job the client keeps its snapshot, one client-stratified bootstrap per tree (its own n_k
rows drawn with replacement, seeded by the job seed, the tree and its client index so a restart
draws the same rows), and the node every bootstrap row sits in, per tree. Level requests carry
the split decisions of every level the client has not applied (the server tracks what each
client acknowledged), so a client that missed a level -- or restarted and lost its state --
catches up by replaying them; decisions are applied at most once.

All statistics come from ``shared.node_statistics`` (one sort per feature for all nodes of all
trees). What leaves the gateway depends on the job's protocol (PRIVACY.md has the table):

* ``private`` (differential privacy, the default): two integer vectors of class counts -- per
  feature and bin of the fleet-wide edges over all the gateway's windows
  (:func:`class_histograms`), then per leaf of the forest (:func:`leaf_class_counts`) -- or,
  for regression, of ``[windows, Σ z]`` with ``z`` the target clipped to the job's public range
  and scaled into ``[-1, 1]`` (:func:`clipped_target`), each scaled, plus this gateway's share
  of Skellam noise, masked by secure aggregation; every window is in every tree, once (no
  bootstrap);
* ``histogram`` (secure sums without differential privacy): per level one integer vector -- per
  requested (node, feature) pair and bin of the fleet-wide edges, the window count and the
  weighted class counts (or ``[n, Σy, Σy²]``) -- masked by secure aggregation unless the job
  turned it off;
* the paper's protocol (reproduction): per-client node summaries, M+1 weighted quantiles per
  (node, feature) pair -- actual feature values of the client's windows; a node of a few
  windows reveals them exactly -- and per-client left summaries.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from shared.histograms import quantize
from shared.model.inference import as_float32_values
from shared.node_statistics import (
    category_summaries,
    node_summaries,
    pair_histograms,
    pair_left_summaries,
    pair_quantiles,
    summary_terms,
    top_per_node,
)
from shared.protocol.envelope import Message
from shared.protocol.messages.fedforest import (
    ForestHistogramReply,
    ForestHistogramRequest,
    ForestLevelReply,
    ForestLevelRequest,
    ForestSplitReply,
    ForestSplitRequest,
    ForestTask,
    PrivateForestHistogramRequest,
    PrivateForestLeavesRequest,
    SplitDecisions,
    TargetClip,
)
from shared.differential_privacy import skellam_share
from shared.splitting import pooled_gain

from ..dispatcher import Dispatcher, RequestRejected
from ..fleet_sums import with_noise
from ..secure_aggregation import SecureAggregationClient
from ..training_data import JobSnapshots, TrainingData, class_ids

log = logging.getLogger(__name__)

MAX_JOBS = 4

__all__ = [
    "FedForestClient",
    "bootstrap_weights",
    "cell_histograms",
    "class_histograms",
    "clipped_target",
    "leaf_class_counts",
    "leaf_sums",
    "private_terms",
]


def bootstrap_weights(seed: int, tree: int, client_index: int, n: int) -> np.ndarray:
    """Multiplicities of a client-stratified bootstrap: ``n`` draws with replacement from the
    client's ``n`` rows, reproducible from (job seed, tree, client index)."""
    rng = np.random.default_rng([seed, tree, client_index])
    return np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64)


def class_histograms(
    X: np.ndarray,
    ids: np.ndarray,
    features: np.ndarray,
    edge_values: np.ndarray,
    edge_offsets: np.ndarray,
    n_classes: int,
    n_slots: int,
) -> np.ndarray:
    """Per feature ``features[i]`` and slot of its edges (``edge_values[edge_offsets[j]:
    edge_offsets[j+1]]``; slot ``b``: ``edges[b-1] <= x < edges[b]``, the last slot: missing) the
    number of windows of each class ``ids`` (int64, ``(features, n_slots, n_classes)``).

    Examples
    --------
    >>> X = np.array([[0.5], [1.5], [np.nan]])
    >>> class_histograms(X, np.array([0, 1, 1]), np.array([0]), np.array([1.0], np.float32),
    ...                  np.array([0, 1]), 2, 3)[0].tolist()
    [[1, 0], [0, 1], [0, 1]]
    """
    return cell_histograms(X, np.eye(n_classes, dtype=np.int64)[ids], features, edge_values, edge_offsets, n_slots)


def cell_histograms(
    X: np.ndarray,
    terms: np.ndarray,
    features: np.ndarray,
    edge_values: np.ndarray,
    edge_offsets: np.ndarray,
    n_slots: int,
) -> np.ndarray:
    """:func:`class_histograms` of any per-window integer ``terms`` ``(n, C)``: per feature and
    slot the sums of the terms of the windows there (int64, ``(features, n_slots, C)``)."""
    node = np.zeros(terms.shape[0], dtype=np.int64)
    out = np.zeros((features.shape[0], n_slots, terms.shape[1]), dtype=np.int64)
    for i, j in enumerate(features.tolist()):
        out[i] = pair_histograms(
            X[:, j], node, terms, np.zeros(1, np.int64), 1, edge_values[edge_offsets[j] : edge_offsets[j + 1]], n_slots
        )[0]
    return out


def clipped_target(y: np.ndarray, clip: TargetClip, scale: int) -> np.ndarray:
    """The regression target on the private protocol's lattice: ``round(z * scale)`` with
    ``z = (clip(y) - centre) / half_width`` in ``[-1, 1]`` (int64; ``|value| <= scale``).

    Examples
    --------
    >>> clipped_target(np.array([0.0, 1.5, 9.0, -9.0]), TargetClip(1.0, 2.0), 64).tolist()
    [-32, 16, 64, -64]
    """
    z = (np.clip(y, clip.centre - clip.half_width, clip.centre + clip.half_width) - clip.centre) / clip.half_width
    return np.clip(np.rint(z * scale), -scale, scale).astype(np.int64)


def private_terms(target: np.ndarray, body: PrivateForestHistogramRequest | PrivateForestLeavesRequest) -> np.ndarray:
    """What each window adds to its cell of a private release, in lattice units ``(n, C)``:
    ``noise.scale`` in its class's column, or ``[noise.scale, round(z * noise.scale)]``
    (regression, :func:`clipped_target`)."""
    scale = body.noise.scale
    if body.target_clip is None:
        return np.eye(len(body.task.classes), dtype=np.int64)[target] * scale
    if not np.isfinite(target).all():
        raise RequestRejected("bad_data", "regression targets must be finite")
    return np.stack(
        [np.full(target.shape[0], scale, dtype=np.int64), clipped_target(target, body.target_clip, scale)], axis=1
    )


def leaf_class_counts(positions: np.ndarray, ids: np.ndarray, n_leaves: int, n_classes: int) -> np.ndarray:
    """Per leaf the number of windows of each class (int64, ``(n_leaves, n_classes)``) from the
    entries' leaf positions and class ids (one entry per window and tree).

    Examples
    --------
    >>> leaf_class_counts(np.array([0, 1, 1]), np.array([1, 0, 0]), 2, 2).tolist()
    [[0, 1], [2, 0]]
    """
    return leaf_sums(positions, np.eye(n_classes, dtype=np.int64)[ids], n_leaves)


def leaf_sums(positions: np.ndarray, terms: np.ndarray, n_leaves: int) -> np.ndarray:
    """:func:`leaf_class_counts` of any per-entry integer ``terms`` ``(entries, C)``: per leaf
    their sums (int64, ``(n_leaves, C)``)."""
    out = np.zeros((n_leaves, terms.shape[1]), dtype=np.int64)
    np.add.at(out, positions, terms)
    return out


@dataclass
class _Level:
    """The active nodes of one level request, as flat (tree x sample) entries."""

    positions: np.ndarray  # (E,) position of each entry's node in the request
    rows: np.ndarray  # (E,) sample row of each entry
    weight: np.ndarray  # (E,) bootstrap multiplicity
    terms: np.ndarray  # (E, S) summary terms of each entry (regression: of y - its node's shift)
    n_nodes: int


@dataclass(frozen=True, eq=False)
class _SketchedLevel:
    """A level request the client answered, kept for the split request that follows it."""

    entries: _Level
    summaries: np.ndarray  # (n_nodes, S) this client's node summaries
    pair_node: np.ndarray  # (P,) node position of each requested pair
    pair_feature: np.ndarray  # (P,) feature of each requested pair


class _ForestState:
    def __init__(self, task: ForestTask, X: np.ndarray, target: np.ndarray) -> None:
        self.task = task
        self.X = X
        n = X.shape[0]
        n_outputs = task.n_outputs
        if task.target == "client":
            target = np.full(n, task.client_index)
        self.n_outputs = n_outputs
        self.target = target
        self.terms = summary_terms(target, n_outputs)
        self.integer = task.task == "classification"
        self.weight = np.zeros((task.n_trees, n))
        for t in task.trees.tolist():
            self.weight[t] = bootstrap_weights(task.seed, t, task.client_index, n) if task.bootstrap else 1.0
        self.node = np.where(self.weight > 0, 0, -1).astype(np.int64)
        self.applied_level = -1  # decisions of levels <= this are in self.node
        self.level: _SketchedLevel | None = None
        self.level_no = -1

    def apply(self, splits: SplitDecisions, first_level: int) -> None:
        """Replay the decisions of levels ``> applied_level``, level by level."""
        if first_level > self.applied_level + 1:
            raise RequestRejected(
                "resync",
                f"has applied splits up to level {self.applied_level}, the request starts at level {first_level}",
            )
        for level in np.unique(splits.level).tolist():
            if level <= self.applied_level:
                continue
            rows = np.flatnonzero(splits.level == level)
            self._apply_rows(splits, rows)
            self.applied_level = level

    def _apply_rows(self, s: SplitDecisions, rows: np.ndarray) -> None:
        """Move every (tree, sample) entry sitting in a split node of ``rows`` to its child."""
        d = self.task.n_features
        width = int(max(self.node.max(initial=0), s.node[rows].max(initial=0))) + 1
        lookup = np.full(self.task.n_trees * width, -1, dtype=np.int64)
        lookup[s.tree[rows] * width + s.node[rows]] = rows
        trees, samples = np.nonzero(self.node >= 0)
        row = lookup[trees * width + self.node[trees, samples]]
        moving = row >= 0
        trees, samples, row = trees[moving], samples[moving], row[moving]
        feature = s.feature[row]
        client = feature == d
        x = np.where(client, float(self.task.client_index), self.X[samples, np.minimum(feature, d - 1)])
        go_left = (x < s.threshold[row]) | (np.isnan(x) & s.nan_left[row])  # numeric: NaN the learnt way
        categorical = s.categorical[row].astype(bool)
        if categorical.any():
            counts = np.diff(s.category_offsets)
            cat_row = np.repeat(np.arange(counts.size), counts)
            span = int(max(s.categories.max(initial=0), 0)) + 2
            allowed = cat_row * span + s.categories
            code = x[categorical]
            valid = np.isfinite(code) & (code >= 0) & (code < span - 1) & (code == np.floor(code))
            key = row[categorical] * span + np.where(valid, code, span - 1).astype(np.int64)
            go_left[categorical] = valid & np.isin(key, allowed)
        self.node[trees, samples] = np.where(go_left, s.left[row], s.right[row])

    def positions(self, node_tree: np.ndarray, node_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (tree, sample) entry sitting in one of the nodes ``(node_tree[i], node_id[i])``:
        its tree, its sample row and the position ``i`` of its node."""
        width = int(max(self.node.max(initial=0), node_id.max(initial=0))) + 1
        lookup = np.full(self.task.n_trees * width + 1, -1, dtype=np.int64)
        lookup[node_tree * width + node_id] = np.arange(node_id.shape[0])
        trees, rows = np.nonzero(self.node >= 0)
        positions = lookup[trees * width + self.node[trees, rows]]
        keep = positions >= 0
        return trees[keep], rows[keep], positions[keep]

    def prepare(self, request: ForestLevelRequest | ForestHistogramRequest) -> _Level:
        """Map every (tree, sample) entry of an active node to that node's request position, with
        its summary terms (regression: centred on the node's shift)."""
        trees, rows, positions = self.positions(request.node_tree, request.node_id)
        if self.n_outputs or not request.node_shift.size:
            terms = self.terms[rows]
        else:
            terms = summary_terms(self.target[rows] - request.node_shift[positions], 0)
        return _Level(positions, rows, self.weight[trees, rows], terms, request.node_id.shape[0])

    def integer_terms(self, level: _Level, frac_bits: int, bound: float) -> np.ndarray:
        """Per entry of the level ``(E, 1 + S)`` int64: 1 (the window), then its weighted summary
        terms -- class counts times the bootstrap multiplicity, or ``[w, w·y, w·y²]`` (y centred on
        the node's shift) in fixed point (``frac_bits``)."""
        w = level.weight
        terms = level.terms * w[:, None]
        if self.integer:
            body = np.rint(terms).astype(np.int64)
        else:
            body = np.column_stack(
                [
                    np.rint(terms[:, 0]).astype(np.int64),
                    quantize(terms[:, 1], frac_bits, bound),
                    quantize(terms[:, 2], frac_bits, bound),
                ]
            )
        return np.column_stack([np.ones(w.shape[0], dtype=np.int64), body])

    def summaries(self, level: _Level) -> np.ndarray:
        return node_summaries(level.positions, level.weight, level.terms, level.n_nodes)

    def wire(self, values: np.ndarray) -> np.ndarray:
        """Class counts (sums of integer bootstrap multiplicities) travel exactly in the smallest
        unsigned integer type that holds them -- most of a level's bytes are left summaries --
        regression sums as float64."""
        if not self.integer:
            return values
        counts = np.rint(values)
        top = counts.max(initial=0)
        dtype = np.uint8 if top <= 0xFF else np.uint16 if top <= 0xFFFF else np.uint32
        return counts.astype(dtype)


class FedForestClient:
    """Answers ``fedforest.*`` requests from a ``TrainingData``."""

    capability = "fedforest"

    def __init__(
        self,
        data: TrainingData | JobSnapshots,
        secure: SecureAggregationClient | None = None,
        *,
        max_jobs: int = MAX_JOBS,
    ) -> None:
        #: One snapshot per job, shared with the participant's opening (a bare TrainingData gets its own).
        self.snapshots = data if isinstance(data, JobSnapshots) else JobSnapshots(data)
        #: Masks the private protocol's vectors (the participant's; a bare client answers plain
        #: requests only: it holds no keys).
        self.secure = secure or SecureAggregationClient("local")
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[str, _ForestState] = OrderedDict()
        #: Draws the private protocol's noise shares (OS entropy; tests seed it through the participant).
        self.noise_rng = np.random.default_rng()

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(ForestLevelRequest, self.on_level)
        dispatcher.register(ForestSplitRequest, self.on_split)
        dispatcher.register(ForestHistogramRequest, self.on_histograms)
        dispatcher.register(PrivateForestHistogramRequest, self.on_private_histograms)
        dispatcher.register(PrivateForestLeavesRequest, self.on_private_leaves)

    def _state(self, job: str, task: ForestTask) -> _ForestState:
        state = self._jobs.get(job)
        if state is None or state.task.seed != task.seed or state.task.client_index != task.client_index:
            data = self.snapshots.get(job, task.feature_set_version)
            if data.X.shape[1] != task.n_features:
                raise RequestRejected(
                    "feature_mismatch", f"the job has {task.n_features} features, this client {data.X.shape[1]}"
                )
            X = as_float32_values(data.X)  # the split rule: features compared as float32
            if task.task == "classification" and task.target == "label":
                target = class_ids(data.y, task.classes)
                known = target >= 0
                X, target = X[known], target[known]
            else:
                target = np.asarray(data.y, dtype=np.float64) if task.target == "label" else np.zeros(X.shape[0])
            state = _ForestState(task, X, target)
            self._jobs[job] = state
            while len(self._jobs) > self.max_jobs:
                self._jobs.popitem(last=False)
        self._jobs.move_to_end(job)
        return state

    # -- handlers --------------------------------------------------------------------------------

    def _level_state(self, message: Message) -> _ForestState:
        """The job's state with every split decision up to the request's level applied."""
        body = message.body
        state = self._state(message.envelope.job, body.task)
        splits = body.splits
        first = int(splits.level.min()) if splits.level.size else body.level
        state.apply(splits, first)
        if state.applied_level < body.level - 1:
            raise RequestRejected(
                "resync",
                f"has applied splits up to level {state.applied_level}, level {body.level} needs every level before it",
            )
        return state

    def on_histograms(self, message: Message) -> ForestHistogramReply:
        """Private level round: the requested pairs' per-bin integer sums, masked if asked."""
        body: ForestHistogramRequest = message.body
        state = self._level_state(message)
        level = state.prepare(body)
        try:
            terms = state.integer_terms(level, body.frac_bits, body.value_bound)
        except ValueError as exc:
            raise RequestRejected("value_range", f"{exc}: the job's fixed-point range is too small") from None
        n_pairs, S = body.features.shape[0], body.slots
        out = np.zeros((n_pairs, S, terms.shape[1]), dtype=np.int64)
        pair_node = np.repeat(np.arange(level.n_nodes), np.diff(body.feature_offsets))
        o = body.edge_offsets
        for j in np.unique(body.features).tolist():
            where = np.flatnonzero(body.features == j)
            pair_of_node = np.full(level.n_nodes, -1, dtype=np.int64)
            pair_of_node[pair_node[where]] = np.arange(where.size)
            out[where] = pair_histograms(
                state.X[level.rows, j],
                level.positions,
                terms,
                pair_of_node,
                where.size,
                body.edge_values[o[j] : o[j + 1]],
                S,
            )
        vector = with_noise(out.ravel(), body.noise)
        return ForestHistogramReply(self.secure.protect(message, vector, body.secure, body.word_bits))

    def on_private_histograms(self, message: Message) -> ForestHistogramReply:
        """Private root release: class counts per feature and slot of all the job's windows,
        scaled, plus this gateway's share of the noise, masked."""
        body: PrivateForestHistogramRequest = message.body
        state = self._state(message.envelope.job, body.task)
        sums = cell_histograms(
            state.X, private_terms(state.target, body), body.features, body.edge_values, body.edge_offsets, body.slots
        )
        return self._private_reply(message, sums.ravel(), body)

    def on_private_leaves(self, message: Message) -> ForestHistogramReply:
        """Private leaves release: after every split decision, class counts per leaf (each window
        once per tree), scaled, plus this gateway's share of the noise, masked."""
        body: PrivateForestLeavesRequest = message.body
        state = self._state(message.envelope.job, body.task)
        state.apply(body.splits, int(body.splits.level.min()) if body.splits.level.size else 0)
        _, rows, positions = state.positions(body.leaf_tree, body.leaf_id)
        sums = leaf_sums(positions, private_terms(state.target[rows], body), body.leaf_tree.shape[0])
        return self._private_reply(message, sums.ravel(), body)

    def _private_reply(
        self, message: Message, sums: np.ndarray, body: PrivateForestHistogramRequest | PrivateForestLeavesRequest
    ) -> ForestHistogramReply:
        """``sums`` (lattice units) plus this gateway's share of the noise, masked."""
        vector = sums + skellam_share(sums.shape, body.noise.mu, body.noise.shares, self.noise_rng)
        return ForestHistogramReply(self.secure.protect(message, vector, body.secure, body.word_bits))

    def on_level(self, message: Message) -> ForestLevelReply:
        body: ForestLevelRequest = message.body
        state = self._level_state(message)
        level = state.prepare(body)
        summaries = state.summaries(level)
        pair_node = np.repeat(np.arange(level.n_nodes), np.diff(body.feature_offsets))
        state.level, state.level_no = _SketchedLevel(level, summaries, pair_node, body.features), body.level
        mass = summaries.sum(axis=1) if state.integer else summaries[:, 0]
        nodes = np.flatnonzero(mass > 0)
        pairs, points, weights, gains = [], [], [], []
        cat_pairs, cat_sums, missing_pairs, missing_sums = [], [], [], []
        categorical = set(body.categorical.tolist())
        for j in np.unique(body.features).tolist():
            where = np.flatnonzero(body.features == j)
            node_pos = pair_node[where]
            x = state.X[level.rows, j]
            if j in categorical:
                sums = category_summaries(x, level.positions, level.weight, level.terms, node_pos, body.n_categories)
                has = sums.sum(axis=(1, 2)) > 0
                cat_pairs.append(where[has])
                cat_sums.append(sums[has])
                continue
            if not body.top_l:  # exact evaluation scores "NaN goes left" with these
                nan = np.isnan(x)
                if nan.any():
                    sums = node_summaries(level.positions[nan], level.weight[nan], level.terms[nan], level.n_nodes)[
                        node_pos
                    ]
                    has = (sums.sum(axis=1) if state.integer else sums[:, 0]) > 0
                    missing_pairs.append(where[has])
                    missing_sums.append(sums[has])
            pts, w = pair_quantiles(x, level.positions, level.weight, node_pos, body.sketch_size)
            has = w > 0
            pairs.append(where[has])
            points.append(pts[has])
            weights.append(w[has])
            if body.top_l:
                gains.append(self._local_best_gains(state, level, x, node_pos[has], pts[has], summaries))
        order = np.argsort(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64)
        if body.top_l and pairs:  # AvgImp/Top-L: sketches and gains of this client's L best features only
            pair_ids = np.concatenate(pairs)[order]
            order = order[top_per_node(pair_node[pair_ids], np.concatenate(gains)[order], body.top_l)]
        cat_order = np.argsort(np.concatenate(cat_pairs)) if cat_pairs else np.zeros(0, np.int64)
        missing_order = np.argsort(np.concatenate(missing_pairs)) if missing_pairs else np.zeros(0, np.int64)
        S = state.terms.shape[1]
        return ForestLevelReply(
            nodes=nodes.astype(np.int64),
            summaries=state.wire(summaries[nodes]),
            pairs=np.concatenate(pairs)[order].astype(np.int64) if pairs else np.zeros(0, np.int64),
            points=np.concatenate(points)[order] if points else np.zeros((0, body.sketch_size + 1)),
            pair_weight=np.concatenate(weights)[order] if weights else np.zeros(0),
            category_pairs=np.concatenate(cat_pairs)[cat_order].astype(np.int64)
            if cat_pairs
            else np.zeros(0, np.int64),
            category_summaries=(
                state.wire(np.concatenate(cat_sums)[cat_order])
                if cat_pairs
                else np.zeros((0, body.n_categories, S), np.int64 if state.integer else np.float64)
            ),
            local_gain=np.concatenate(gains)[order] if gains else np.zeros(0),
            missing_pairs=(
                np.concatenate(missing_pairs)[missing_order].astype(np.int64)
                if missing_pairs
                else np.zeros(0, np.int64)
            ),
            missing_summaries=(
                state.wire(np.concatenate(missing_sums)[missing_order])
                if missing_pairs
                else state.wire(np.zeros((0, S)))
            ),
        )

    @staticmethod
    def _local_best_gains(
        state: _ForestState,
        level: _Level,
        x: np.ndarray,
        node_pos: np.ndarray,
        points: np.ndarray,
        summaries: np.ndarray,
    ) -> np.ndarray:
        """Best local impurity decrease per pair over the client's own quantile thresholds."""
        thresholds = points[:, 1:-1]
        cand_node = np.repeat(node_pos, thresholds.shape[1])
        left = pair_left_summaries(x, level.positions, level.weight, level.terms, cand_node, thresholds.ravel())
        gain = pooled_gain(summaries[cand_node], left, state.task.criterion).reshape(thresholds.shape)
        return gain.max(axis=1, initial=0.0)

    def on_split(self, message: Message) -> ForestSplitReply:
        body: ForestSplitRequest = message.body
        state = self._jobs.get(message.envelope.job)
        if state is None or state.level is None or state.level_no != body.level:
            raise RequestRejected("resync", f"holds no level {body.level} of this job (restarted?)")
        level = state.level
        n_pairs = level.pair_node.shape[0]
        if body.offsets.shape[0] != n_pairs + 1:
            raise RequestRejected("bad_request", f"{body.offsets.shape[0] - 1} candidate lists for {n_pairs} pairs")
        cand_pair = np.repeat(np.arange(n_pairs), np.diff(body.offsets))
        cand_node = level.pair_node[cand_pair]
        cand_feature = level.pair_feature[cand_pair]
        left = np.zeros((cand_pair.shape[0], state.terms.shape[1]))
        entries = level.entries
        for j in np.unique(cand_feature).tolist():
            sel = np.flatnonzero(cand_feature == j)
            left[sel] = pair_left_summaries(
                state.X[entries.rows, j],
                entries.positions,
                entries.weight,
                entries.terms,
                cand_node[sel],
                body.thresholds[sel],
            )
        mass = level.summaries.sum(axis=1) if state.integer else level.summaries[:, 0]
        has = np.flatnonzero(mass[cand_node] > 0)
        if body.evaluation == "avgimp":
            gain = pooled_gain(level.summaries[cand_node[has]], left[has], state.task.criterion)
            count = left[has].sum(axis=1) if state.integer else left[has, 0]
            return ForestSplitReply(
                candidates=has.astype(np.int64),
                left=np.zeros((0, left.shape[1])),
                local_gain=gain.astype(np.float32),
                left_count=state.wire(count),
            )
        return ForestSplitReply(candidates=has.astype(np.int64), left=state.wire(left[has]))
