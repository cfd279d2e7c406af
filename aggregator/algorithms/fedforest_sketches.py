"""FedForest's paper protocol (``protocol="sketches"``, Alg. 1): two synchronised rounds per level.

(1) ``fedforest.level`` -- clients apply the previous decisions and return node summaries and
per-(node, feature) quantile sketches; the server pools the summaries, stops nodes (depth,
``min_samples_split``, purity), and builds candidates: mixture-CDF thresholds for continuous
features, Fisher groupings for categorical features and for the client indicator H (free: from
the per-client node summaries); (2) ``fedforest.split`` -- clients return the left summaries of
the numeric candidates; the server evaluates the exact pooled impurity decrease of every
candidate (Thm. 3.5) and keeps the best per node. It reveals per-client summaries and sketches
(PRIVACY.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from shared.node_statistics import top_per_node
from shared.protocol.messages.fedforest import (
    ForestLevelReply,
    ForestLevelRequest,
    ForestSplitReply,
    ForestSplitRequest,
)
from shared.splitting import pooled_gain

from ..jobs import TrainingError
from .fleet_data import describe_fleet
from .forest_candidates import (
    CATEGORY,
    CLIENT,
    NUMERIC,
    Candidates,
    Grouping,
    NumericCandidates,
    PairSketches,
    gap_midpoints,
    grouping_candidates_of,
    groupings_table,
    numeric_candidates,
    with_missing_left,
)
from .forest_growth import choose_splits, node_count

from .forest_training import ForestTraining, FrontierNode, KnownNode, LevelCounts

__all__ = ["SketchForestTraining"]


@dataclass
class _SplitPool:
    """A split round pooled: exact left summaries, or AvgImp's n-weighted local gain sums and left
    counts, per numeric candidate; and the clients whose replies went in."""

    left: np.ndarray
    left_count: np.ndarray
    gain_sum: np.ndarray
    used: set[str]

    @classmethod
    def empty(cls, n: int, S: int, used: set[str]) -> _SplitPool:
        return cls(np.zeros((n, S)), np.zeros(n), np.zeros(n), used)


class SketchForestTraining(ForestTraining):
    """The paper's protocol on the shared level loop."""

    def _setup(self) -> None:
        cfg = self.config
        fleet = describe_fleet(self.job, cfg.feature_set_version, regression=cfg.regression, classes=cfg.classes)
        self._set_fleet(fleet.clients, fleet.n_features, fleet.feature_names, fleet.classes, fleet.model_classes)
        self.root_shift = fleet.target_sum / fleet.total_samples if cfg.regression and fleet.total_samples else 0.0
        self.total_samples = fleet.total_samples
        if self.categorical.size and self.categorical.max() >= self.d:
            raise TrainingError(f"categorical feature {int(self.categorical.max())} does not exist ({self.d} features)")
        self.fixed: list[np.ndarray] | None = None  # fixed candidates per feature; None: the sketches choose
        if cfg.thresholds is not None:
            if len(cfg.thresholds) != self.d:
                raise TrainingError(f"{len(cfg.thresholds)} threshold arrays for {self.d} features")
            self.fixed = [np.unique(np.asarray(t, dtype=np.float64)) for t in cfg.thresholds]
        elif cfg.candidates == "uniform":
            self.fixed = [
                np.linspace(lo, hi, cfg.bins + 1)[1:-1] if hi > lo else np.zeros(0)
                for lo, hi in zip(fleet.minimum, fleet.maximum)
            ]

    def _level(self, level: int, frontier: list[FrontierNode]) -> list[FrontierNode]:
        cfg = self.config
        splittable_depth = level < cfg.max_depth
        for node in frontier:
            may_split = splittable_depth and (node.summary is None or self._can_split(node.summary))
            node.features = self._features(node) if may_split else np.zeros(0, np.int64)
        request = self._level_request(level, frontier)
        replies = self.job.ask(request, list(request), ForestLevelReply)
        replies = self._accepted_level(replies, level, len(frontier), request)
        self._answered = len(replies)
        if not replies:
            raise TrainingError(f"level {level}: no usable replies")
        A = len(frontier)
        per_client = np.zeros((len(self.clients), A, self.S))
        for client, reply in replies.items():
            per_client[self.index[client], reply.nodes] = reply.summaries
        self._set_summaries(level, frontier, per_client.sum(axis=0))
        can = np.array([node.features.size > 0 and self._can_split(node.pooled) for node in frontier], dtype=bool)
        self._n_active = int(can.sum())
        any_request = next(iter(request.values()))
        pair_node = np.repeat(np.arange(A), np.diff(any_request.feature_offsets))
        pair_feature = any_request.features
        eligible = can[pair_node] & ~np.isin(pair_feature, self.categorical)
        if cfg.top_l:
            eligible &= self._shortlist(pair_node, pair_feature, replies, cfg.top_l)
        numeric = numeric_candidates(
            pair_node,
            pair_feature,
            eligible,
            cfg.bins,
            fixed=self.fixed,
            sketches=None if self.fixed is not None else self._sketches(replies),
        )
        pool = _SplitPool.empty(numeric.thresholds.shape[0], self.S, set(replies))
        if numeric.thresholds.size:
            split_request = {
                c: ForestSplitRequest(request[c].task, level, numeric.offsets, numeric.thresholds, cfg.evaluation)
                for c in replies
            }
            split_replies = self.job.ask(split_request, list(split_request), ForestSplitReply)
            pool = self._pool_split_replies(numeric, split_replies, per_client)
        dropped = [self.index[c] for c in replies if c not in pool.used]
        if dropped:  # their samples are in no left sum: take them out of the level altogether
            per_client[dropped] = 0.0
            self._set_summaries(level, frontier, per_client.sum(axis=0))
            can &= np.array([self._can_split(node.pooled) for node in frontier], dtype=bool)
        pooled = per_client.sum(axis=0)
        cands = Candidates.numeric(numeric, pool.left, pool.left_count)
        if cfg.evaluation == "exact":  # NaN-left twins need exact left summaries
            missing = self._pooled_missing(replies, pool.used, numeric.n_pairs)
            cands = with_missing_left(cands, numeric.pair, missing, node_count(missing, self.crit))
        n_numeric = cands.size
        cands = cands.concat(
            groupings_table(self._groupings(pair_node, pair_feature, can, replies, per_client), self.S, self.crit)
        )
        gain = None
        if cfg.evaluation == "avgimp":  # numeric: the n-weighted mean of local gains; groupings: exact
            gain = pooled_gain(pooled[cands.node], cands.left, self.crit)
            n_node = node_count(pooled, self.crit)[cands.node[:n_numeric]]
            gain[:n_numeric] = pool.gain_sum / np.where(n_node > 0, n_node, 1.0)
        best, best_gain = choose_splits(
            pooled,
            cands.node,
            cands.left,
            cands.feature,
            cands.rank,
            self.crit,
            min_samples_leaf=cfg.min_samples_leaf,
            min_impurity_decrease=cfg.min_impurity_decrease,
            total_weight=self.root_weight[[n.tree for n in frontier]],
            cand_gain=gain,
            cand_left_count=cands.left_count,
        )
        best[~can] = -1
        self._n_splits = int((best >= 0).sum())
        self.levels.append(LevelCounts(level, A, numeric.n_pairs, cands.size))
        if self.fixed is None and not cfg.top_l:  # sketch candidates: split in the middle of the gap
            cands = self._centred_in_gaps(cands, best, pair_node, pair_feature, replies)
        return self._apply(level, frontier, best, best_gain, cands)

    def _level_request(self, level: int, frontier: list[FrontierNode]) -> dict[str, ForestLevelRequest]:
        cfg = self.config
        node_tree = np.array([n.tree for n in frontier], dtype=np.int64)
        node_id = np.array([n.node for n in frontier], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([n.features.size for n in frontier])]).astype(np.int64)
        features = np.concatenate([n.features for n in frontier]).astype(np.int64)
        out = {}
        for client in self.clients:
            first = self.known.get(client, -1) + 1
            out[client] = ForestLevelRequest(
                task=self._task(client),
                level=level,
                splits=self._decisions_since(first),
                node_tree=node_tree,
                node_id=node_id,
                feature_offsets=offsets,
                features=features,
                sketch_size=cfg.sketch_size or cfg.bins,
                categorical=self.categorical,
                n_categories=cfg.n_categories,
                top_l=cfg.top_l or 0,
                node_shift=self._shifts(frontier),
            )
        return out

    def _accepted_level(
        self, replies: dict[str, ForestLevelReply], level: int, n_nodes: int, request: dict[str, ForestLevelRequest]
    ) -> dict[str, ForestLevelReply]:
        """The replies that fit the request (the others are rejected: their clients sit out)."""
        n_pairs = next(iter(request.values())).features.shape[0]
        for client in self.clients:
            if client not in replies:
                self.known.pop(client, None)  # unknown state: replay every decision next time
        out = {}
        for client, reply in replies.items():
            reason = None
            if reply.nodes.size and reply.nodes.max() >= n_nodes:
                reason = f"node position {int(reply.nodes.max())} beyond the {n_nodes} requested"
            elif reply.summaries.shape[1] != self.S or reply.missing_summaries.shape[1:] not in ((self.S,), (0,)):
                reason = f"summaries have {reply.summaries.shape[1]} columns, the job needs {self.S}"
            elif max(reply.pairs.max(initial=-1), reply.missing_pairs.max(initial=-1)) >= n_pairs:
                reason = f"pair position beyond the {n_pairs} requested"
            if reason:
                self.job.reject(client, reason)
                self.known.pop(client, None)
                continue
            self.known[client] = level - 1
            out[client] = reply
        return out

    def _set_summaries(self, level: int, frontier: list[FrontierNode], pooled: np.ndarray) -> None:
        for i, node in enumerate(frontier):
            node.summary = pooled[i]
            self.summary_of[(node.tree, node.node)] = KnownNode(pooled[i], node.shift)
            if level == 0:
                self.root_weight[node.tree] = node_count(pooled[i], self.crit)

    def _sketches(self, replies: dict[str, ForestLevelReply]) -> PairSketches:
        """The level replies' quantile sketches, stacked (client-id order)."""
        stacked = list(replies.values())
        return PairSketches(
            pair=np.concatenate([r.pairs for r in stacked]),
            points=np.concatenate([r.points for r in stacked]),
            weight=np.concatenate([r.pair_weight for r in stacked]),
        )

    def _centred_in_gaps(
        self,
        cands: Candidates,
        best: np.ndarray,
        pair_node: np.ndarray,
        pair_feature: np.ndarray,
        replies: dict[str, ForestLevelReply],
    ) -> Candidates:
        """The chosen numeric splits' thresholds moved to the middle of the gap below them where
        the sketches prove the gap empty (``forest_candidates.gap_midpoints``)."""
        chosen = best[best >= 0]
        chosen = chosen[cands.kind[chosen] == NUMERIC]
        if chosen.size == 0:
            return cands
        pair_of = np.full((len(best), self.d + 1), -1, dtype=np.int64)
        pair_of[pair_node, pair_feature] = np.arange(pair_node.shape[0])
        threshold = cands.threshold.copy()
        threshold[chosen] = gap_midpoints(
            pair_of[cands.node[chosen], cands.feature[chosen]],
            threshold[chosen],
            self._sketches(replies),
            self.config.sketch_size or self.config.bins,
        )
        return dataclasses.replace(cands, threshold=threshold)

    def _pooled_missing(self, replies: dict[str, ForestLevelReply], used: set[str], n_pairs: int) -> np.ndarray:
        """Per numeric pair, the pooled summary of the node's samples without a value (``(P, S)``),
        over the clients whose left summaries were used."""
        missing = np.zeros((n_pairs, self.S))
        for client, reply in replies.items():
            if client in used and reply.missing_pairs.size:
                missing[reply.missing_pairs] += reply.missing_summaries
        return missing

    def _groupings(
        self,
        pair_node: np.ndarray,
        pair_feature: np.ndarray,
        can: np.ndarray,
        replies: dict[str, ForestLevelReply],
        per_client: np.ndarray,
    ) -> list[Grouping]:
        """Categorical features and the client indicator: every contiguous Fisher grouping, from
        the summaries of ``replies`` (the clients still in the level)."""
        out: list[Grouping] = []
        if self.categorical.size:
            sums: dict[int, np.ndarray] = {}
            for client, reply in replies.items():
                if not per_client[self.index[client]].any():
                    continue  # left the level
                for i, p in enumerate(reply.category_pairs.tolist()):
                    sums[p] = sums.get(p, 0) + reply.category_summaries[i].astype(np.float64)
            for p in sorted(sums):
                i = int(pair_node[p])
                if can[i]:
                    out += grouping_candidates_of(sums[p], i, int(pair_feature[p]), CATEGORY, self.crit)
        if self.config.client_splits:
            for i in np.flatnonzero(can).tolist():
                present = np.flatnonzero(per_client[:, i].sum(axis=1) > 0)
                if present.size >= 2:
                    out += grouping_candidates_of(per_client[present, i], i, self.d, CLIENT, self.crit, codes=present)
        return out

    def _shortlist(
        self, pair_node: np.ndarray, pair_feature: np.ndarray, replies: dict[str, ForestLevelReply], top_l: int
    ) -> np.ndarray:
        """Top-L: per node, the union of every client's ``top_l`` best features by local gain (a
        mask over the requested pairs)."""
        keep = np.zeros(pair_node.shape[0], dtype=bool)
        for reply in replies.values():
            if reply.local_gain.size:
                keep[reply.pairs[top_per_node(pair_node[reply.pairs], reply.local_gain, top_l)]] = True
        return keep

    def _pool_split_replies(
        self, numeric: NumericCandidates, split_replies: dict[str, ForestSplitReply], per_client: np.ndarray
    ) -> _SplitPool:
        """Pooled left summaries of the numeric candidates (exact), or the n-weighted sums of the
        clients' local gains and their left counts (AvgImp), and the clients whose replies were used."""
        cfg = self.config
        n = numeric.thresholds.shape[0]
        pool = _SplitPool.empty(n, self.S, set())
        node = numeric.node
        for client, reply in split_replies.items():
            bad = reply.candidates.size and reply.candidates.max() >= n
            if (
                bad
                or (cfg.evaluation == "exact" and reply.left.shape[1:] != (self.S,))
                or (
                    cfg.evaluation == "avgimp"
                    and not reply.local_gain.size == reply.left_count.size == reply.candidates.size
                )
            ):
                self.job.reject(client, "split reply does not fit the candidates")
                continue
            pool.used.add(client)
            if cfg.evaluation == "exact":
                pool.left[reply.candidates] += reply.left
            else:
                n_k = node_count(per_client[self.index[client], node[reply.candidates]], self.crit)
                pool.gain_sum[reply.candidates] += n_k * reply.local_gain
                pool.left_count[reply.candidates] += reply.left_count
        if cfg.evaluation == "exact":
            pool.left_count[:] = node_count(pool.left, self.crit)
        return pool

    def _candidate_edges(self) -> tuple[np.ndarray, np.ndarray]:
        if self.fixed is not None:
            edges = np.concatenate(self.fixed) if self.fixed else np.zeros(0)
            return edges, np.concatenate([[0], np.cumsum([f.size for f in self.fixed])]).astype(np.int64)
        return np.zeros(0), np.zeros(1, np.int64)
