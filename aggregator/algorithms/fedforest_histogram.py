"""FedForest's histogram protocol (``protocol="histogram"``: secure sums without differential
privacy): one fleet sum per level.

The job opens with fleet sums and fleet-wide edges read off fleet-summed grid counts
(``private_fleet``); then each level is one round: per (node, sampled feature) pair and per bin of
the edges, the summed window counts and weighted summary terms (secure aggregation by default).
The candidates are the edges; every gain is the exact pooled gain of its candidate (left
summaries are the histograms' partial sums), so the forest equals the centralized forest grown
with those candidates, bootstrap and feature draws. No split leaves a child with fewer than
``min_crowd`` windows fleet-wide, and every decoded sum is range-checked (``sum_checks``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from shared.histograms import dequantize
from shared.protocol.messages.fedforest import (
    ForestHistogramReply,
    ForestHistogramRequest,
)
from shared.protocol.messages.secure_aggregation import widen, word_bits_for

from ..fleet_sums import FleetSummer
from ..jobs import TrainingError
from .sum_checks import forest_histogram_violation, padding_mask
from .private_fleet import describe_fleet_privately, frac_bits_for
from .forest_candidates import (
    histogram_candidates,
)
from .forest_growth import choose_splits, node_count

from .forest_training import MAX_BOOTSTRAP_WEIGHT, ForestTraining, FrontierNode, KnownNode, LevelCounts

__all__ = ["HistogramForestTraining"]


def _vector_violation(
    values: np.ndarray, shape: tuple[int, ...], word_bits: int, in_range: Callable[[np.ndarray], str | None]
) -> str | None:
    """``in_range`` of one gateway's plain level vector, or None for a vector the sum already
    holds without it (merge workers add it up elsewhere)."""
    if values.shape[0] != int(np.prod(shape)):
        return None
    return in_range(widen(values, word_bits).view(np.int64).reshape(shape))


class HistogramForestTraining(ForestTraining):
    """The histogram protocol on the shared level loop."""

    def _setup(self) -> None:
        """The private opening: shape, fleet sums and fleet-wide edges (``private_fleet``)."""
        cfg = self.config
        self.summer = FleetSummer(self.job, secure=cfg.secure, degree=cfg.secagg_degree)
        self.summer.start(self.job.clients)
        fleet = describe_fleet_privately(
            self.job,
            self.summer,
            cfg.feature_set_version,
            regression=cfg.regression,
            n_bins=cfg.bins,
            classes=cfg.classes,
        )
        self._set_fleet(fleet.clients, fleet.n_features, fleet.feature_names, fleet.classes, fleet.model_classes)
        edges = fleet.edges
        if cfg.thresholds is not None:
            if len(cfg.thresholds) != self.d:
                raise TrainingError(f"{len(cfg.thresholds)} threshold arrays for {self.d} features")
            edges = [np.unique(np.asarray(t, dtype=np.float32)) for t in cfg.thresholds]
        if fleet.total_samples < max(cfg.min_crowd, 1):
            raise TrainingError(
                f"the fleet holds {fleet.total_samples} samples, fewer than the minimum crowd ({cfg.min_crowd})"
            )
        self.edges = [np.asarray(e, dtype=np.float32) for e in edges]
        self.edge_offsets = np.concatenate([[0], np.cumsum([e.size for e in self.edges])]).astype(np.int64)
        self.edge_values = np.concatenate(self.edges) if self.edges else np.zeros(0, np.float32)
        self.root_shift = fleet.target_mean if cfg.regression else 0.0
        self.total_samples = fleet.total_samples
        if cfg.regression:
            # Clients sum w * (y - shift) and w * (y - shift)^2 with node means as shifts, so every
            # term is bounded by the targets' spread, not their size: |y - shift| <= range(y) <=
            # 2 sqrt(V), so (y - shift)^2 <= 4 V, with V = sum (y - mean)^2 (``target_spread``:
            # from the opening's sums around the fleet median, plus their rounding) and w <=
            # MAX_BOOTSTRAP_WEIGHT. The spread, not the offset, sets the fixed point, so an offset
            # leaves the precision alone.
            n = fleet.total_samples
            bound = 4.0 * max(fleet.target_spread, 1.0)
            self.frac_bits = frac_bits_for(MAX_BOOTSTRAP_WEIGHT * n, bound)
            self.value_bound = MAX_BOOTSTRAP_WEIGHT * bound
            self.word_bits = 64
        else:  # a tree's (bootstrap) weights add up to the fleet's windows: every cell is below that
            # (with the grid counts' headroom, private_fleet)
            self.frac_bits, self.value_bound = 0, 1.0
            self.word_bits = word_bits_for(2 * fleet.total_samples + 64)

    def _level(self, level: int, frontier: list[FrontierNode]) -> list[FrontierNode]:
        """One level of the private protocol: a single fleet sum of per-bin histograms."""
        cfg = self.config
        crowd = max(cfg.min_crowd, 1)
        for node in frontier:  # a root is always described (its sums come from its pairs), split or not
            eligible = level < cfg.max_depth and (
                node.summary is None
                or (  # two children of >= crowd each
                    self._can_split(node.summary) and self.distinct_of[(node.tree, node.node)] >= 2 * crowd
                )
            )
            node.features = self._features(node) if eligible or node.summary is None else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum([n.features.size for n in frontier])]).astype(np.int64)
        features = np.concatenate([n.features for n in frontier]).astype(np.int64)
        A, P = len(frontier), features.shape[0]
        self._answered, self._n_active = len(self.summer.active), int((np.diff(offsets) > 0).sum())
        self._n_splits = 0
        if P == 0:
            return []
        node_tree = np.array([n.tree for n in frontier], dtype=np.int64)
        node_id = np.array([n.node for n in frontier], dtype=np.int64)
        active = list(self.summer.active)
        requests = {
            c: ForestHistogramRequest(
                self._task(c),
                level,
                self._decisions_since(self.known.get(c, -1) + 1),
                node_tree,
                node_id,
                offsets,
                features,
                self.edge_values,
                self.edge_offsets,
                self.frac_bits,
                self.value_bound,
                self.summer.secure_round(c, active),
                self.word_bits,
                None,
                self._shifts(frontier),
            )
            for c in active
        }
        any_request = next(iter(requests.values()))
        shape = (P, any_request.slots, any_request.terms)
        in_range = partial(
            forest_histogram_violation,
            pair_node=np.repeat(np.arange(A), np.diff(offsets)),
            padding=padding_mask(self.edge_offsets, features),
            regression=cfg.regression,
            max_weight=MAX_BOOTSTRAP_WEIGHT,
        )
        visible = not self.summer.secure  # plain sums: each gateway's vector is checked and a liar left out
        liars: set[str] = set()

        def check(client: str, reply: ForestHistogramReply) -> str | None:
            why = _vector_violation(reply.sums.values, shape, any_request.word_bits, in_range) if visible else None
            if why:
                liars.add(client)
            return why

        result = self.summer.ask(
            requests,
            ForestHistogramReply,
            lambda r: r.sums,
            any_request.length,
            word_bits=any_request.word_bits,
            check=check,
        )
        self.summer.leave_out(liars)
        for client in active:
            if client in result.contributors:
                self.known[client] = level - 1
            else:
                self.known.pop(client, None)
        self._answered = len(result.contributors)
        hist = result.total.view(np.int64).reshape(shape)
        why = in_range(hist) or self._grown_children(frontier, offsets, hist[..., 0])
        if why:
            raise TrainingError(
                f"level {level}: the fleet's histograms break a range check: {why} (in the sum of "
                f"{len(result.contributors)} gateways: "
                f"{'secure aggregation hides which' if self.summer.secure else 'none alone shows it'})"
            )
        windows, sums = hist[..., 0], hist[..., 1:].astype(np.float64)
        if cfg.regression:
            sums[..., 1:] = dequantize(hist[..., 2:], self.frac_bits)
        pair_node = np.repeat(np.arange(A), np.diff(offsets))
        first_pair = offsets[:-1][np.diff(offsets) > 0]
        # A node's totals: any of its pairs summed over all slots. They equal the parent split's
        # child sums unless a client dropped out since; then this level's cohort is the truth.
        for p in first_pair.tolist():
            node = frontier[pair_node[p]]
            self.distinct_of[(node.tree, node.node)] = int(windows[p].sum())
            node.summary = sums[p].sum(axis=0)
            self.summary_of[(node.tree, node.node)] = KnownNode(node.summary, node.shift)
            if level == 0:
                self.root_weight[node.tree] = node_count(node.summary, self.crit)
        can = np.array(
            [level < cfg.max_depth and n.features.size > 0 and self._can_split(n.pooled) for n in frontier], dtype=bool
        )
        cands, left_windows = histogram_candidates(
            sums, windows, features, pair_node, self.edge_values, self.edge_offsets, crowd, self.crit
        )
        pooled = np.stack([n.summary if n.summary is not None else np.zeros(self.S) for n in frontier])
        best, best_gain = choose_splits(
            pooled,
            cands.node,
            cands.left,
            cands.feature,
            cands.rank,
            self.crit,
            min_samples_leaf=cfg.min_samples_leaf,
            min_impurity_decrease=cfg.min_impurity_decrease,
            total_weight=self.root_weight[node_tree],
        )
        best[~can] = -1
        self._n_splits = int((best >= 0).sum())
        self.levels.append(LevelCounts(level, A, P, cands.size))
        children = self._apply(level, frontier, best, best_gain, cands)
        for i in np.flatnonzero(best >= 0).tolist():  # the children's window counts, for the crowd
            node, c = frontier[i], int(best[i])
            left_id, right_id = self.children_of[(node.tree, node.node)]
            total = self.distinct_of[(node.tree, node.node)]
            self.distinct_of[(node.tree, left_id)] = int(left_windows[c])
            self.distinct_of[(node.tree, right_id)] = total - int(left_windows[c])
        return children

    def _grown_children(self, frontier: list[FrontierNode], offsets: np.ndarray, windows: np.ndarray) -> str | None:
        """A node of ``frontier`` holding more windows than its parent's split gave it (clients only
        ever leave a job, so a child's count never grows), or None."""
        for i, node in enumerate(frontier):
            known = self.distinct_of.get((node.tree, node.node))
            if offsets[i + 1] > offsets[i] and known is not None and int(windows[offsets[i]].sum()) > known:
                return (
                    f"node {node.node} of tree {node.tree} holds {int(windows[offsets[i]].sum())} windows, "
                    f"the parent split gave it {known}"
                )
        return None

    def _candidate_edges(self) -> tuple[np.ndarray, np.ndarray]:
        return self.edge_values.astype(np.float64), self.edge_offsets
