"""FedForest's level loop, shared by the protocols that grow it level by level: the trees, the
frontier, resuming from a stored level, the split decisions and the model.

Each protocol is a strategy on :class:`ForestTraining` that opens the job and grows one level:
``fedforest_sketches`` (the paper's two rounds per level: summaries and quantile sketches, then
left summaries) and ``fedforest_histogram`` (one secure fleet sum of per-bin histograms per
level). The private protocol grows its forest from two noisy releases instead
(``fedforest_private``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from shared.model import Tree, TreeBuilder, TreeEnsemble
from shared.model.inputs import CLIENT_FEATURE
from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.errors import DecodeError
from shared.protocol.messages.fedforest import (
    ForestTask,
    SplitDecisions,
)
from shared.splitting import impurity

from ..jobs import FederatedJob, StepProgress, TrainingError
from .forest_candidates import (
    NUMERIC,
    Candidates,
)
from .forest_growth import child_shift, is_pure, leaf_value, n_sampled_features, node_count

if TYPE_CHECKING:
    from .fedforest import FedForest

__all__ = [
    "MAX_BOOTSTRAP_WEIGHT",
    "ForestFleet",
    "ForestResult",
    "ForestState",
    "ForestTraining",
    "FrontierNode",
    "KnownNode",
    "LevelCounts",
    "forest_importance",
]

log = logging.getLogger("aggregator.algorithms.fedforest")

#: The histogram protocol's fixed point assumes no bootstrap multiplicity exceeds this: n draws
#: with replacement from n rows give one row 17 copies with probability ~1e-15, and a gateway
#: whose terms would exceed the bound declines the level ("value_range") instead of overflowing.
MAX_BOOTSTRAP_WEIGHT = 16


def forest_importance(per_tree: np.ndarray) -> np.ndarray:
    """scikit-learn's ``RandomForest*.feature_importances_`` from each tree's summed weighted
    impurity decreases per feature (``per_tree``, shape ``(n_trees, n_features)``): every tree's
    row normalised to sum to 1, the mean over the trees that split, normalised again (zeros when
    no tree splits). Per tree, so that every tree weighs the same whatever its root's weight and
    impurity (a bootstrap draw or a client sample with a larger root would otherwise count more).

    Examples
    --------
    >>> forest_importance(np.array([[3.0, 1.0], [0.0, 0.0], [0.0, 10.0]])).tolist()
    [0.375, 0.625]
    """
    totals = per_tree.sum(axis=1)
    split = totals > 0
    if not split.any():
        return np.zeros(per_tree.shape[1])
    mean = (per_tree[split] / totals[split, None]).mean(axis=0)
    return mean / mean.sum()


@dataclass(frozen=True, eq=False)
class ForestResult:
    """The forest plus what the server learnt growing it: per-feature impurity importance
    (scikit-learn's: per tree the weighted decrease summed over splits and normalised, averaged
    over the trees, :func:`forest_importance`; the client indicator last when used),
    the largest root split gain relative to the root impurity (§F.4's statistic), and the
    number of nodes, pairs and candidates per level."""

    model: TreeEnsemble
    importance: np.ndarray
    root_gain: float
    levels: list[LevelCounts]


@dataclass(frozen=True)
class LevelCounts:
    """One level's work, the counts App. A's cost model is written in (``bench_fedforest_cost``)."""

    level: int
    nodes: int  # frontier nodes grown at this level
    pairs: int  # (node, sampled feature) pairs
    candidates: int  # candidate thresholds evaluated


@dataclass(frozen=True, eq=False)
class ForestFleet:
    """The fleet a forest is grown on, as the job's setup described it: what a stored
    :class:`ForestState` must have been grown on to be resumed. Classes are kept as strings
    (the model's may be ints); ``edges`` are the job's candidate edges of every feature, one after
    the other (float64; empty when the sketches choose them), ``edge_offsets`` where each
    feature's start (int64, ``n_features + 1`` entries, or ``[0]``)."""

    clients: tuple[str, ...]
    n_features: int
    feature_names: tuple[str, ...]
    classes: tuple[str, ...]
    model_classes: tuple[str, ...]
    total_samples: int
    root_shift: float
    edges: np.ndarray
    edge_offsets: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """The CBOR form (lists for the tuples), as ``ForestState.to_cbor`` stores it."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in dataclasses.fields(self)
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ForestFleet:
        """Inverse of :meth:`to_dict` (``KeyError``/``TypeError`` for another layout)."""
        tuples = {name: tuple(values[name]) for name in ("clients", "feature_names", "classes", "model_classes")}
        return cls(**{**values, **tuples})

    def differences(self, other: ForestFleet) -> list[str]:
        """The fields in which ``other`` describes another fleet (compared as stored)."""
        mine, theirs = self.to_dict(), other.to_dict()
        return [name for name in mine if dumps_value(mine[name]) != dumps_value(theirs[name])]


@dataclass(frozen=True, eq=False)
class ForestState:
    """What the server holds after level ``levels_done - 1``: enough to grow the next level on,
    stored as CBOR (``shared.protocol.codec``) with the level it follows.

    ``fleet`` (:class:`ForestFleet`) describes the fleet the state was grown on (clients,
    features, classes, sample count, candidate edges); a resumed job compares it with its own and
    starts over if they differ (the data changed). ``decisions`` are every level's splits (the
    trees are rebuilt by replaying them; one table per level); ``frontier_*`` the open nodes (``frontier_known``: 0
    where AvgImp has no summary yet); ``known_*`` every pooled summary the model's leaves take
    their values from; ``distinct_*`` the private protocol's window counts per node (the crowd
    rule).

    The state holds only what the server already learnt (fleet-level sums and its own
    decisions). A resumed attempt runs with gateways that know nothing of the job yet: the
    first level request hands each of them the decisions of every completed level at once, as
    it does for a gateway that missed levels, so they learn the same split decisions as in an
    uninterrupted run, and the rounds after it ask for exactly what that run asks for.
    """

    levels_done: int
    fleet: ForestFleet
    decisions: tuple[SplitDecisions, ...]  # one per completed level
    frontier_tree: np.ndarray
    frontier_node: np.ndarray
    frontier_known: np.ndarray
    frontier_summary: np.ndarray
    frontier_shift: np.ndarray
    known_tree: np.ndarray
    known_node: np.ndarray
    known_summary: np.ndarray
    known_shift: np.ndarray
    importance: np.ndarray  # (n_trees, n_features + 1): per tree, the weighted impurity decreases
    root_weight: np.ndarray
    root_gains: np.ndarray
    level_counts: np.ndarray  # (levels, 4): level, nodes, pairs, candidates
    distinct_tree: np.ndarray
    distinct_node: np.ndarray
    distinct_count: np.ndarray

    VERSION: ClassVar[int] = 2  # 2: importance per tree (version 1 summed them over the trees)

    def to_cbor(self) -> bytes:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "decisions"}
        values["fleet"] = self.fleet.to_dict()
        return dumps_value(
            {
                "version": self.VERSION,
                **values,
                "decisions": [{f.name: getattr(d, f.name) for f in dataclasses.fields(d)} for d in self.decisions],
            }
        )

    @classmethod
    def from_cbor(cls, data: bytes) -> ForestState:
        """The state in ``data``; ``ValueError`` if it is not one this version wrote."""
        try:
            values = loads_value(data, max_bytes=len(data))
        except DecodeError as exc:
            raise ValueError(f"not a forest state: {exc}") from None
        if not isinstance(values, dict) or values.pop("version", None) != cls.VERSION:
            raise ValueError(f"not a version-{cls.VERSION} forest state")
        try:
            values["decisions"] = tuple(SplitDecisions(**d) for d in values["decisions"])
            values["fleet"] = ForestFleet.from_dict(values["fleet"])
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a forest state: {exc}") from None


@dataclass
class FrontierNode:
    """A node of the frontier. ``summary`` (pooled; None until known) is centred on ``shift``
    (regression: sums of ``y - shift``; 0 for classification), see ``forest_growth``;
    ``features``: the features the level samples for it (none until it does)."""

    tree: int
    node: int
    depth: int
    summary: np.ndarray | None = None
    features: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    shift: float = 0.0

    @property
    def pooled(self) -> np.ndarray:
        """``summary`` where the level has pooled it (``TrainingError`` before: a protocol bug)."""
        if self.summary is None:
            raise TrainingError(f"tree {self.tree} node {self.node} has no pooled summary yet")
        return self.summary


class KnownNode(NamedTuple):
    """What the server knows of a node for its model: the pooled summary and its shift."""

    summary: np.ndarray
    shift: float


class ForestTraining:
    """One forest job of a level-wise protocol (the module docstring); ``run`` grows it."""

    # Each protocol's ``_setup`` sets the fleet's sample count and the roots' shift (regression:
    # the fleet's mean); its ``_level`` the level's progress counts.
    total_samples: int
    root_shift: float
    _answered: int  # gateways whose replies the level used
    _n_active: int  # nodes the level could split
    _n_splits: int  # nodes it split

    def __init__(self, config: FedForest, job: FederatedJob, seed: int) -> None:
        self.config = config
        self.job = job
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.crit = config.split_criterion

    def _set_fleet(self, clients, n_features, feature_names, classes, model_classes) -> None:
        cfg = self.config
        self.clients = list(clients)
        self.index = {c: i for i, c in enumerate(self.clients)}
        self.d = n_features
        if cfg.target == "client":
            self.classes, self.model_classes = tuple(self.clients), tuple(self.clients)
        else:
            self.classes, self.model_classes = classes, model_classes
        if not cfg.regression and len(self.classes) < 2:
            raise TrainingError(f"classification needs at least 2 classes, the clients have {list(self.classes)}")
        self.S = 3 if cfg.regression else len(self.classes)
        self.feature_names = feature_names
        self.k_features = n_sampled_features(cfg.max_features, self.d, cfg.regression)
        self.categorical = np.array(sorted(set(cfg.categorical_features)), dtype=np.int64)
        m = max(1, math.ceil(cfg.client_fraction * len(self.clients)))
        self.tree_clients = [
            np.arange(len(self.clients))
            if m == len(self.clients)
            else np.sort(self.rng.choice(len(self.clients), size=m, replace=False))
            for _ in range(cfg.n_trees)
        ]
        self.trees_of = [
            np.array([t for t, members in enumerate(self.tree_clients) if k in members], dtype=np.int64)
            for k in range(len(self.clients))
        ]  # per client index: the trees it takes part in

    def _task(self, client: str) -> ForestTask:
        cfg = self.config
        k = self.index[client]
        return ForestTask(
            task="regression" if cfg.regression else "classification",
            criterion=self.crit,
            feature_set_version=cfg.feature_set_version,
            n_features=self.d,
            n_trees=cfg.n_trees,
            client_index=k,
            trees=self.trees_of[k],
            seed=self.seed,
            bootstrap=cfg.bootstrap,
            classes=self.classes if cfg.target == "label" else (),
            target=cfg.target,
            n_clients=len(self.clients),
        )

    def run(self) -> ForestResult:
        cfg = self.config
        self._setup()
        self.depth = cfg.max_depth
        start, frontier = self._resumed(cfg.resume_state) if cfg.resume_state is not None else (0, self._fresh())
        for level in range(start, cfg.max_depth + 1):
            if not frontier:
                break
            started = time.monotonic()
            frontier = self._level(level, frontier)
            progress = StepProgress(
                self.job.job_id,
                cfg.name,
                level + 1,
                cfg.max_depth + 1,
                len(self.clients),
                self._answered,
                {"nodes": float(self._n_active), "splits": float(self._n_splits)},
                time.monotonic() - started,
            )
            self.job.report(progress, state=lambda: self._state(level + 1, frontier).to_cbor())
            if frontier and self.job.stop_here(progress):
                self._cut(level + 1, frontier)
                break
        return ForestResult(
            self._model(), self._normalised_importance(), float(max(self.root_gains, default=0.0)), self.levels
        )

    def _fresh(self) -> list[FrontierNode]:
        """Start at the roots: empty trees, nothing known; the first level's frontier."""
        cfg = self.config
        self.builders = [TreeBuilder(np.zeros(1 if cfg.regression else self.S)) for _ in range(cfg.n_trees)]
        self.summary_of: dict[tuple[int, int], KnownNode] = {}
        self.root_weight = np.zeros(cfg.n_trees)
        self.importance = np.zeros((cfg.n_trees, self.d + 1))  # per tree: weighted impurity decrease
        self.root_gains: list[float] = []
        self.known: dict[str, int] = {}  # client -> last level whose decisions it applied
        self.decisions: list[SplitDecisions] = []  # one per decided level
        self.levels: list[LevelCounts] = []
        self.children_of: dict[tuple[int, int], tuple[int, int]] = {}
        self.distinct_of: dict[tuple[int, int], int] = {}  # windows per node, where the protocol counts them
        return [FrontierNode(t, 0, 0, shift=self.root_shift) for t in range(cfg.n_trees)]

    def _fleet(self) -> ForestFleet:
        """The fleet as this job's setup described it: what a stored state must have been grown on."""
        edges, offsets = self._candidate_edges()
        return ForestFleet(
            clients=tuple(self.clients),
            n_features=int(self.d),
            feature_names=tuple(self.feature_names),
            classes=tuple(str(c) for c in self.classes),
            model_classes=tuple(str(c) for c in self.model_classes),
            total_samples=int(self.total_samples),
            root_shift=float(self.root_shift),
            edges=np.asarray(edges, np.float64),
            edge_offsets=np.asarray(offsets, np.int64),
        )

    def _state(self, levels_done: int, frontier: list[FrontierNode]) -> ForestState:
        S = self.S
        known = sorted(self.summary_of.items())
        distinct = sorted(self.distinct_of.items())
        ints = lambda values: np.array(values, dtype=np.int64)  # noqa: E731
        rows = lambda values: np.array(values, dtype=np.float64).reshape(-1, S)  # noqa: E731
        return ForestState(
            levels_done=levels_done,
            fleet=self._fleet(),
            decisions=tuple(self.decisions),
            frontier_tree=ints([n.tree for n in frontier]),
            frontier_node=ints([n.node for n in frontier]),
            frontier_known=np.array([n.summary is not None for n in frontier], dtype=np.uint8),
            frontier_summary=rows([np.zeros(S) if n.summary is None else n.summary for n in frontier]),
            frontier_shift=np.array([n.shift for n in frontier], dtype=np.float64),
            known_tree=ints([k[0] for k, _ in known]),
            known_node=ints([k[1] for k, _ in known]),
            known_summary=rows([v.summary for _, v in known]),
            known_shift=np.array([v.shift for _, v in known], dtype=np.float64),
            importance=self.importance.copy(),
            root_weight=self.root_weight.copy(),
            root_gains=np.array(self.root_gains, dtype=np.float64),
            level_counts=ints([[c.level, c.nodes, c.pairs, c.candidates] for c in self.levels]).reshape(-1, 4),
            distinct_tree=ints([k[0] for k, _ in distinct]),
            distinct_node=ints([k[1] for k, _ in distinct]),
            distinct_count=ints([v for _, v in distinct]),
        )

    def _resumed(self, stored: bytes) -> tuple[int, list[FrontierNode]]:
        """The first level to grow and its frontier from ``stored`` (``config.resume_state``), or
        level 0 from the roots (logged) when the state does not fit this job's fleet."""
        reason: str | None
        try:
            state = ForestState.from_cbor(stored)
        except ValueError as exc:
            reason = str(exc)
        else:
            reason = self._unfit(state)
        if reason is not None:
            log.warning(
                "not resuming the forest: starting over from the first level",
                extra={"job": self.job.job_id, "reason": reason},
            )
            return 0, self._fresh()
        self._fresh()
        self.decisions = list(state.decisions)
        for decided in self.decisions:  # the trees, split for split in the order they grew
            for i in range(decided.level.shape[0]):
                t, node = int(decided.tree[i]), int(decided.node[i])
                lo, hi = decided.category_offsets[i], decided.category_offsets[i + 1]
                ids = self.builders[t].split(
                    node,
                    int(decided.feature[i]),
                    float(decided.threshold[i]),
                    default_left=bool(decided.nan_left[i]),
                    categories=decided.categories[lo:hi].tolist() if decided.categorical[i] else None,
                )
                if ids != (int(decided.left[i]), int(decided.right[i])):
                    raise TrainingError(f"a stored split of tree {t} node {node} does not rebuild (children {ids})")
                self.children_of[(t, node)] = ids
        self.summary_of = {
            (int(t), int(n)): KnownNode(state.known_summary[i], float(state.known_shift[i]))
            for i, (t, n) in enumerate(zip(state.known_tree, state.known_node))
        }
        self.importance, self.root_weight = state.importance.copy(), state.root_weight.copy()
        self.root_gains = state.root_gains.tolist()
        self.levels = [LevelCounts(*map(int, row)) for row in state.level_counts]
        self.distinct_of = {
            (int(t), int(n)): int(c) for t, n, c in zip(state.distinct_tree, state.distinct_node, state.distinct_count)
        }
        frontier = [
            FrontierNode(
                int(t),
                int(n),
                state.levels_done,
                state.frontier_summary[i] if state.frontier_known[i] else None,
                shift=float(state.frontier_shift[i]),
            )
            for i, (t, n) in enumerate(zip(state.frontier_tree, state.frontier_node))
        ]
        log.info("resuming the forest", extra={"job": self.job.job_id, "from_level": state.levels_done})
        return state.levels_done, frontier

    def _unfit(self, state: ForestState) -> str | None:
        """Why ``state`` cannot continue this job (None: it can)."""
        changed = state.fleet.differences(self._fleet())
        if changed:
            return f"the fleet changed since the stored level ({', '.join(changed)})"
        n_trees = self.config.n_trees
        if (
            state.root_weight.shape != (n_trees,)
            or state.importance.shape != (n_trees, self.d + 1)
            or state.known_summary.shape[1:] != (self.S,)
            or not 0 < state.levels_done <= self.config.max_depth + 1
        ):
            return "the stored state does not fit the job's settings"
        return None

    def _cut(self, depth: int, frontier: list[FrontierNode]) -> None:
        """Stop at ``depth``: the open ``frontier`` nodes stay leaves (see ``FedForest.fit``)."""
        if any(node.summary is None for node in frontier):
            raise TrainingError(
                f"stopped after level {depth}: with evaluation='avgimp' the open nodes learn their "
                "summaries only at the next level, so no forest can be cut here"
            )
        self.depth = depth

    def _features(self, node: FrontierNode) -> np.ndarray:
        """The node's feature subsample, drawn from its own stream (seed, tree, node): it does not
        depend on how other nodes fared, so runs that agree on a node agree on its draw."""
        if self.k_features >= self.d:
            return np.arange(self.d, dtype=np.int64)
        rng = np.random.default_rng([self.seed, node.tree, node.node])
        return np.sort(rng.choice(self.d, size=self.k_features, replace=False)).astype(np.int64)

    def _shifts(self, frontier: list[FrontierNode]) -> np.ndarray:
        """The frontier's shifts for the clients (regression; none for classification)."""
        return np.array([n.shift for n in frontier]) if self.crit == "mse" else np.zeros(0)

    def _can_split(self, summary: np.ndarray) -> bool:
        """scikit-learn's rule: enough weight for ``min_samples_split`` and two leaves, not pure."""
        return bool(
            node_count(summary, self.crit) >= max(self.config.min_samples_split, 2 * self.config.min_samples_leaf)
            and not is_pure(summary, self.crit)
        )

    def _decisions_since(self, first_level: int) -> SplitDecisions:
        return SplitDecisions.concatenate(self.decisions[first_level:])

    def _apply(
        self, level: int, frontier: list[FrontierNode], best: np.ndarray, best_gain: np.ndarray, cands: Candidates
    ) -> list[FrontierNode]:
        cfg = self.config
        chosen = [(i, int(best[i])) for i in range(len(frontier)) if best[i] >= 0]
        children: list[FrontierNode] = []
        child_ids: list[tuple[int, int]] = []
        for i, c in chosen:
            node = frontier[i]
            feature = int(cands.feature[c])
            cats = cands.categories[c]
            lid, rid = self.builders[node.tree].split(
                node.node,
                feature,
                float(cands.threshold[c]),
                default_left=bool(cands.default_left[c]),
                categories=None if cats is None else cats.tolist(),
            )
            child_ids.append((lid, rid))
            self.children_of[(node.tree, node.node)] = (lid, rid)
            pooled = node.pooled  # a chosen node's summary is pooled
            self.importance[node.tree, feature] += node_count(pooled, self.crit) * best_gain[i]
            if level == 0:
                root_impurity = float(impurity(pooled, self.crit))
                self.root_gains.append(best_gain[i] / root_impurity if root_impurity > 0 else 0.0)
            exact = cfg.evaluation == "exact" or cands.kind[c] != NUMERIC
            s_left = cands.left[c] if exact else None
            s_right = pooled - cands.left[c] if exact else None
            for child, summary in ((lid, s_left), (rid, s_right)):
                shift = node.shift
                if summary is not None:
                    self.summary_of[(node.tree, child)] = KnownNode(summary, node.shift)
                    if self.crit == "mse":  # the child's clients centre on its mean from now on
                        shift = child_shift(summary, node.shift)
                depth = level + 1
                if summary is None or (depth < cfg.max_depth and self._can_split(summary)):
                    children.append(FrontierNode(node.tree, child, depth, summary, shift=shift))
        rows = np.array([c for _, c in chosen], dtype=np.int64)
        nodes = [frontier[i] for i, _ in chosen]
        categories = [
            np.zeros(0, np.int64) if cands.categories[c] is None else np.asarray(cands.categories[c], np.int64)
            for c in rows.tolist()
        ]
        self.decisions.append(
            SplitDecisions(
                level=np.full(rows.size, level, dtype=np.int64),
                tree=np.array([n.tree for n in nodes], dtype=np.int64),
                node=np.array([n.node for n in nodes], dtype=np.int64),
                feature=cands.feature[rows].astype(np.int64),
                threshold=cands.threshold[rows].astype(np.float64),
                categorical=np.array([cands.categories[c] is not None for c in rows.tolist()], dtype=np.uint8),
                left=np.array([ids[0] for ids in child_ids], dtype=np.int64),
                right=np.array([ids[1] for ids in child_ids], dtype=np.int64),
                category_offsets=np.concatenate([[0], np.cumsum([c.size for c in categories])]).astype(np.int64),
                categories=np.concatenate(categories).astype(np.int64) if categories else np.zeros(0, np.int64),
                default_left=cands.default_left[rows].astype(np.uint8),
            )
        )
        return children

    def _model(self) -> TreeEnsemble:
        cfg = self.config
        trees: list[Tree] = []
        for t, builder in enumerate(self.builders):
            for node in range(builder.n_nodes):
                known = self.summary_of.get((t, node))
                if known is None:
                    raise TrainingError(f"tree {t} node {node} has no summary (every client dropped out?)")
                builder.set_value(
                    node,
                    leaf_value(known.summary, self.crit, known.shift),
                    cover=float(node_count(known.summary, self.crit)),
                )
            trees.append(builder.build())
        names = tuple(self.feature_names) + ((CLIENT_FEATURE,) if cfg.client_splits else ())
        n_outputs = 1 if cfg.regression else self.S
        return TreeEnsemble(
            trees=tuple(trees),
            kind="forest",
            link="identity",
            n_outputs=n_outputs,
            feature_names=names,
            feature_set_version=cfg.feature_set_version,
            classes=self.model_classes,
            metadata={
                "algorithm": cfg.name,
                "n_trees": cfg.n_trees,
                "max_depth": self.depth,
                "n_bins": cfg.bins,
                "criterion": self.crit,
                "evaluation": cfg.evaluation,
                "candidates": cfg.candidates,
                "client_splits": int(cfg.client_splits),
                "target": cfg.target,
                "protocol": cfg.chosen_protocol,
                "secure_aggregation": int(cfg.secure),
                "min_crowd": cfg.min_crowd,
                # the index -> client map of H inputs and client targets; no other model names clients
                **({"clients": ",".join(self.clients)} if cfg.client_splits or cfg.target == "client" else {}),
            },
        )

    def _normalised_importance(self) -> np.ndarray:
        return forest_importance(self.importance if self.config.client_splits else self.importance[:, : self.d])

    # -- what each protocol provides -------------------------------------------------------------

    def _setup(self) -> None:
        """Open the job: the fleet's shape, classes and whatever the protocol's candidates need."""
        raise NotImplementedError

    def _level(self, level: int, frontier: list[FrontierNode]) -> list[FrontierNode]:
        """Grow one level of every tree: the next level's frontier."""
        raise NotImplementedError

    def _candidate_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """The job's candidate edges of every feature, one after the other (float64), and where
        each feature's start (``ForestFleet.edges`` / ``edge_offsets``)."""
        raise NotImplementedError
