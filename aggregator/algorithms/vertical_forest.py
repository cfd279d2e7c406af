"""Vertical Federated Forest's master (Liu et al., *Federated Forest*, Alg. 2 and 4): the
gateways of one person each hold some sensors' features of the same windows, one of them the
labels; the master grows a random forest over the union of their features without seeing a
feature value, a threshold, a label or a window id.

A job (messages: ``shared.protocol.messages.vertical_forest``):

1. **alignment** -- the parties send keyed-hash digests of their window ids; the master keeps
   the windows every party holds and reports what was dropped (``AlignmentReport``);
2. **setup** -- the master draws every tree's rows (bootstrap multiplicities, :func:`draw_rows`)
   and sends them with each party's common windows; the label holder seals the labels for the
   other parties;
3. **per level, all trees at once** -- the master draws each open node's features
   (:func:`draw_features`, scikit-learn's per-node ``max_features``) and tells each party only
   its own; each party returns its best gain per node (exact CART, ``shared.vertical_splits``);
   the master picks the best party per node (:func:`choose_owners`; ties: the lower party) or
   makes a leaf (no split, or ``gain < min_impurity_decrease``); the winners partition their
   nodes' rows, sealed, and the next level relays the partitions to every party;
4. **finish** -- the parties keep their partial trees and report their digests; the label holder
   returns the leaf values;
5. **deploy** (:func:`deploy_to_parties`) -- the master signs a manifest binding the model id,
   version, job, its own trees and every party's digest; each party verifies it and stores its
   partial trees (``shared.vertical_manifest``). :func:`predict_on_parties` with ``live=True``
   then predicts the windows each party stored since the last live run and every party stores
   the result.

Every round needs every party: a party that does not answer fails the job (``TrainingError``
naming it); the master returns no model and tells the others to drop their state.

Draws are reproducible from the seed (rows: ``default_rng([seed, 0, tree])``; features:
``default_rng([seed, 1, tree, node])``). The feature draws are of codes, which each party maps
to its columns with a permutation keyed by the party key and the job id
(``shared.vertical_splits.feature_codes``): the same seed, party key and job id give the same
forest, and a centralized forest grown with the same draws (decoded) on the joined data is the
oracle (tests/aggregator/test_vertical_forest.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from shared.protocol.messages import Ack
from shared.protocol.messages.vertical_forest import (
    SealedPartition,
    VerticalAbort,
    VerticalAlignReply,
    VerticalAlignRequest,
    VerticalDeploy,
    VerticalDirectionsReply,
    VerticalDirectionsRequest,
    VerticalFinishReply,
    VerticalFinishRequest,
    VerticalLevelReply,
    VerticalLevelRequest,
    VerticalPartitionReply,
    VerticalPartitionRequest,
    VerticalResult,
    VerticalRouteReply,
    VerticalRouteRequest,
    VerticalSetupReply,
    VerticalSetupRequest,
    VerticalTask,
)
from shared.signing import SigningKey
from shared.vertical_alignment import AlignmentReport, intersect_digests
from shared.vertical_manifest import forest_digest, sign_manifest
from shared.vertical_splits import EPSILON, is_tie_or_better
from shared.vertical_trees import MAX_DEPTH, intersect_leaves, leaves_of

from ..jobs import FederatedJob, JobSettings, StepProgress, TrainingError
from ..rounds import QuorumNotReached
from .forest_growth import n_sampled_features
from .vertical_forest_model import MasterTree, VerticalForestMetadata, VerticalForestModel

__all__ = [
    "VerticalFederatedForest",
    "VerticalPrediction",
    "VerticalTraining",
    "choose_owners",
    "deploy_to_parties",
    "draw_features",
    "draw_rows",
    "parties_for_simulation",
    "predict_on_parties",
]


def draw_rows(seed: int, tree: int, n: int, bootstrap: bool) -> np.ndarray:
    """Tree ``tree``'s row multiplicities: ``n`` draws with replacement (or every row once)."""
    if not bootstrap:
        return np.ones(n, dtype=np.uint32)
    rng = np.random.default_rng([seed, 0, tree])
    return np.bincount(rng.integers(0, n, n), minlength=n).astype(np.uint32)


def draw_features(seed: int, tree: int, node: int, d: int, k: int) -> np.ndarray:
    """The encoded features (ascending) drawn for node ``node`` of tree ``tree``: ``k`` of ``d``."""
    if k >= d:
        return np.arange(d, dtype=np.int64)
    rng = np.random.default_rng([seed, 1, tree, node])
    return np.sort(rng.choice(d, size=k, replace=False)).astype(np.int64)


def choose_owners(has_split: np.ndarray, gain: np.ndarray, min_impurity_decrease: float) -> np.ndarray:
    """Per open node (rows) the party (column) whose split wins, -1 for a leaf: the first party
    whose gain ties the best (within ``TIE_TOLERANCE``); a leaf where no party has a split or the
    best gain is below ``min_impurity_decrease`` (scikit-learn's ``gain + EPSILON < min``)."""
    g = np.where(has_split.astype(bool), gain, -np.inf)
    best = g.max(axis=1) if g.shape[1] else np.full(g.shape[0], -np.inf)
    owner = np.argmax(is_tie_or_better(g, best[:, None]) & np.isfinite(g), axis=1)
    leaf = ~np.isfinite(best) | (best + EPSILON < min_impurity_decrease)
    return np.where(leaf, -1, owner).astype(np.int64)


def parties_for_simulation(parties: Sequence[Any], *, party_key: bytes | None = None) -> list[Any]:
    """``(X_block, y)`` pairs (rows aligned by position, ``y`` given by exactly one party, None
    for the others) as simulated parties ``party-000``, ``party-001``, ... sharing one key;
    ``PartyData`` items are taken as they are."""
    from edge_client.training_data import PartyData
    from shared.vertical_party_key import new_party_key

    key = party_key or new_party_key()
    if not isinstance(parties, (list, tuple)) or len(parties) < 1:
        raise ValueError("parties must be a non-empty list of (X_block, y) pairs")
    out = []
    for i, party in enumerate(parties):
        if isinstance(party, PartyData):
            out.append(party)
            continue
        if not (isinstance(party, (tuple, list)) and len(party) == 2):
            raise TypeError(f"parties[{i}] must be an (X_block, y) pair, got {type(party).__name__}")
        X = np.asarray(party[0])
        if X.ndim != 2 or X.dtype.kind not in "iuf":
            raise ValueError(f"parties[{i}]: X_block must be a numeric 2-D array, got shape {X.shape}")
        out.append(PartyData(f"party-{i:03d}", X, party[1], party_key=key))
    holders = [i for i, p in enumerate(out) if p.party_windows("").y is not None]
    if len(holders) != 1:
        raise ValueError(
            f"parties: exactly one party must give y (the others None), got y from {len(holders)} parties {holders}"
        )
    rows = {p.party_windows("").X.shape[0] for p in out}
    if len(rows) != 1:
        raise ValueError(
            f"parties: the blocks must have the same number of rows (aligned by position), got {sorted(rows)}"
        )
    return out


def abort_parties(job: FederatedJob, parties: Sequence[str], reason: str) -> None:
    """Best effort: tell the parties still there to drop the job's state."""
    try:
        job.ask(VerticalAbort(reason[:500]), parties, Ack)
    except QuorumNotReached:
        pass


@dataclass(frozen=True)
class RoundAnswers:
    """One round's outcome: the ``replies`` by client, the clients ``missing`` a reply, and
    ``why`` in one line (each missing client's refusal, or no answer before the deadline)."""

    replies: dict[str, Any]
    missing: list[str]
    why: str


def ask_all(job: FederatedJob, request: object, clients: Sequence[str], expect: type) -> RoundAnswers:
    """One round to ``clients``, every answer kept (a round that misses some does not raise)."""
    try:
        replies = job.ask(request, clients, expect)
    except QuorumNotReached as exc:
        replies, failures = exc.result.replies, exc.result.failures()
    else:
        failures = {}
    missing = [c for c in clients if c not in replies]
    why = "; ".join(f"{c}: {failures.get(c, 'no answer before the deadline')}" for c in missing)
    return RoundAnswers(replies, missing, why)


def ask_every_party(
    job: FederatedJob,
    parties: Sequence[str],
    what: str,
    request: object,
    expect: type,
    clients: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A round every asked party must answer (a vertical job needs every party's features):
    otherwise the job fails -- the others are told to drop it and nothing is kept."""
    clients = list(parties if clients is None else clients)
    answers = ask_all(job, request, clients, expect)
    if answers.missing:
        abort_parties(job, parties, f"{what}: {answers.why}")
        raise TrainingError(
            f"vertical forest job {job.job_id} failed at {what}: party {', '.join(answers.missing)} "
            f"did not answer ({answers.why}); every party is needed, no model was saved"
        )
    return {c: getattr(answers.replies[c], "body", answers.replies[c]) for c in clients}


@dataclass(frozen=True, eq=False)
class VerticalPrediction:
    """A one-round prediction over the parties: ``values`` (windows, K) -- class probabilities or
    the regression mean -- ``predictions`` and which windows were predicted (``alignment``; the
    rows are the common windows in start order)."""

    values: np.ndarray
    predictions: np.ndarray
    alignment: AlignmentReport


def predict_on_parties(
    job: FederatedJob,
    model: VerticalForestModel,
    *,
    hop_us: int = 0,
    tolerance_us: int = 0,
    feature_set_version: str = "",
    method: Literal["one_round", "classical"] = "one_round",
    share: bool = True,
    live: bool = False,
) -> VerticalPrediction:
    """Predict the parties' windows with ``model`` (whose partial trees they keep): align them,
    then either one ``vertical_forest.route`` round (Alg. 3-4: the master intersects the leaf
    sets) or, ``method="classical"``, one ``vertical_forest.directions`` round per tree level
    (each split's owner says where the windows at that node go). A party that does not answer
    is an error (``TrainingError`` naming it), never a guess. ``share``: one more round gives
    every party the prediction of its windows (the person's gateways all learn the result).
    ``live``: the model must be deployed (``model.manifest``); each party offers the windows it
    stored since that model's last live prediction there, and stores the shared result."""
    parties = list(model.parties)
    if live and (model.manifest is None or not share):
        raise ValueError("live prediction needs a deployed model (deploy_to_parties) and share=True")
    if sorted(job.clients) != sorted(parties):
        raise ValueError(f"the prediction job's clients {sorted(job.clients)} are not the model's parties {parties}")
    if method not in ("one_round", "classical"):
        raise ValueError(f"method must be 'one_round' or 'classical', got {method!r}")
    replies = ask_every_party(
        job,
        parties,
        "prediction alignment",
        VerticalAlignRequest(
            feature_set_version,
            hop_us,
            tolerance_us,
            model.task,
            model.manifest.model_id if live and model.manifest is not None else "",
        ),
        VerticalAlignReply,
    )
    keep, report = intersect_digests(
        parties, [replies[p].digests for p in parties], [replies[p].off_grid for p in parties]
    )
    model_job = model.metadata.job
    if method == "one_round":
        positions = _one_round(job, model, parties, keep, report.common, model_job)
    else:
        positions = _classical(job, model, parties, keep, report.common, model_job)
    values = model.leaf_values(positions)
    if share:
        ask_every_party(job, parties, "sharing the prediction", VerticalResult(values, model.classes), Ack)
    return VerticalPrediction(values, model.labels_of(values), report)


def deploy_to_parties(
    job: FederatedJob, model: VerticalForestModel, signing_key: SigningKey, *, model_id: str, version: int
) -> VerticalForestModel:
    """Sign the model's manifest and have every party keep its partial trees as ``model_id``
    v``version`` (``vertical_forest.deploy``); returns the model with its manifest. A party that
    refuses (bad signature, digest mismatch, a version not above its last, no trees of the job)
    fails the call (``TrainingError`` naming it and why); the parties that accepted keep the
    model -- deploy again with a higher version once the cause is fixed."""
    parties = list(model.parties)
    if sorted(job.clients) != sorted(parties):
        raise ValueError(f"the deploy job's clients {sorted(job.clients)} are not the model's parties {parties}")
    if len(model.party_digests) != len(parties):
        raise ValueError(
            "the model carries no digests of the parties' partial trees (trained before deployment "
            "existed?): train it again"
        )
    manifest = sign_manifest(
        signing_key,
        model_id=model_id,
        version=version,
        job=model.metadata.job,
        parties=parties,
        label_holder=model.metadata.label_holder,
        task=model.task,
        classes=model.classes,
        forest_digest=forest_digest(model.trees, model.n_features),
        party_digests=model.party_digests,
    )
    answers = ask_all(job, VerticalDeploy(manifest), parties, Ack)
    missing, why = answers.missing, answers.why
    if missing:
        kept = [p for p in parties if p not in missing]
        state = (
            f"{', '.join(kept)} now hold{'s' if len(kept) == 1 else ''} {model_id} v{version}"
            if kept
            else f"no party holds {model_id} v{version}"
        )
        raise TrainingError(
            f"deploying {model_id} v{version}: party {', '.join(missing)} did not keep it ({why}); "
            f"{state}, so deploying again needs a version above {version}"
        )
    return dataclasses.replace(model, manifest=manifest)


def _one_round(job, model, parties, keep, n, model_job) -> np.ndarray:
    routes = ask_every_party(
        job,
        parties,
        "prediction round",
        {p: VerticalRouteRequest(model_job, keep[i]) for i, p in enumerate(parties)},
        VerticalRouteReply,
    )
    bounds = np.concatenate([[0], np.cumsum([tree.leaves.size for tree in model.trees])])
    sets = []
    for p in parties:
        r = routes[p]
        if r.n_leaves != bounds[-1] or r.leaves.shape[0] != n:
            raise TrainingError(
                f"party {p} routed {r.leaves.shape[0]} windows over {r.n_leaves} leaves, the model "
                f"has {int(bounds[-1])} leaves and {n} windows were aligned"
            )
        sets.append(np.unpackbits(r.leaves, axis=1, count=r.n_leaves).astype(bool))
    if not n:
        return np.zeros((0, len(model.trees)), dtype=np.int64)
    return np.column_stack(
        [intersect_leaves([s[:, bounds[t] : bounds[t + 1]] for s in sets]) for t in range(len(model.trees))]
    )


def _classical(job, model, parties, keep, n, model_job) -> np.ndarray:
    """Level by level: every window's node per tree, moved by its owners' answers."""
    node = np.zeros((len(model.trees), n), dtype=np.int64)
    owner_of = [dict(zip(tree.split_nodes.tolist(), tree.owner.tolist())) for tree in model.trees]
    level = 0
    while True:
        asks: dict[int, list[tuple[int, int, np.ndarray]]] = {}
        for t in range(len(model.trees)):
            for v in np.unique(node[t]).tolist():
                if v in owner_of[t]:
                    asks.setdefault(owner_of[t][v], []).append((t, v, np.flatnonzero(node[t] == v)))
        if not asks:
            break
        requests = {}
        for o, items in asks.items():
            rows = [r for _, _, r in items]
            requests[parties[o]] = VerticalDirectionsRequest(
                model_job,
                keep[o],
                np.array([t for t, _, _ in items], dtype=np.int64),
                np.array([v for _, v, _ in items], dtype=np.int64),
                np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int64),
                np.concatenate(rows),
            )
        answers = ask_every_party(
            job, parties, f"classical prediction level {level}", requests, VerticalDirectionsReply, list(requests)
        )
        for o, items in asks.items():
            bits = np.unpackbits(answers[parties[o]].go_left, count=sum(r.size for _, _, r in items)).astype(bool)
            at = 0
            for t, v, r in items:
                node[t, r] = np.where(bits[at : at + r.size], 2 * v + 1, 2 * v + 2)
                at += r.size
        level += 1
    return (
        np.column_stack([np.searchsorted(tree.leaves, node[t]) for t, tree in enumerate(model.trees)])
        if n
        else np.zeros((0, len(model.trees)), dtype=np.int64)
    )


@dataclass(frozen=True)
class VerticalFederatedForest:
    """Vertical Federated Forest settings (scikit-learn's ``RandomForest*`` names and meanings).

    ``max_features``: features drawn per node from the union of the parties' features ("sqrt",
    "log2", an int, a fraction, None = all; default "sqrt" for classification, all for
    regression, as scikit-learn). ``max_depth`` at most 40 (nodes are heap indices).
    ``hop_us``/``tolerance_us``: the window grid to align on (0: ids as stored; see
    ``shared.vertical_alignment``). ``label_holder``: the party that must hold the labels
    (empty: whichever single party does); another one holding them fails the job at alignment.

    Examples
    --------
    >>> import numpy as np
    >>> from aggregator import simulate
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(120, 4)); y = (X[:, 0] + X[:, 3] > 0).astype(int)
    >>> model = simulate(VerticalFederatedForest(n_trees=3, max_depth=3), [(X[:, :2], y), (X[:, 2:], None)])
    >>> float((model.predict([X[:, :2], X[:, 2:]]) == y).mean()) > 0.8
    True
    """

    n_trees: int = 10
    max_depth: int = 8
    min_samples_split: int = 2
    min_samples_leaf: int = 1
    min_impurity_decrease: float = 0.0
    max_features: str | int | float | None = "default"
    bootstrap: bool = True
    task: Literal["classification", "regression"] = "classification"
    criterion: Literal["gini", "entropy", "mse"] | None = None
    feature_set_version: str = ""
    hop_us: int = 0
    tolerance_us: int = 0
    label_holder: str = ""

    name: ClassVar[str] = "vertical_forest"

    def __post_init__(self) -> None:
        for name in ("n_trees", "min_samples_leaf"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if not (isinstance(self.min_samples_split, int) and self.min_samples_split >= 2):
            raise ValueError(f"min_samples_split must be an int >= 2, got {self.min_samples_split!r}")
        if not (isinstance(self.max_depth, int) and 0 <= self.max_depth <= MAX_DEPTH):
            raise ValueError(f"max_depth must be an int in 0..{MAX_DEPTH}, got {self.max_depth!r}")
        if not (isinstance(self.min_impurity_decrease, (int, float)) and self.min_impurity_decrease >= 0):
            raise ValueError(f"min_impurity_decrease must be >= 0, got {self.min_impurity_decrease!r}")
        if self.task not in ("classification", "regression"):
            raise ValueError(f"task must be 'classification' or 'regression', got {self.task!r}")
        if self.criterion not in (None, "gini", "entropy", "mse"):
            raise ValueError(f"criterion must be 'gini', 'entropy' or 'mse', got {self.criterion!r}")
        if self.criterion is not None and (self.criterion == "mse") != (self.task == "regression"):
            raise ValueError(f"criterion {self.criterion!r} does not fit task {self.task!r}")
        if self.max_features != "default":
            n_sampled_features(self.max_features, 100, self.task == "regression")  # raises on a bad value
        if self.hop_us < 0 or not 0 <= 2 * self.tolerance_us <= max(self.hop_us, 0):
            raise ValueError(f"tolerance_us must lie in 0..hop_us/2, got {self.tolerance_us} for hop_us {self.hop_us}")

    @property
    def split_criterion(self) -> Literal["gini", "entropy", "mse"]:
        return self.criterion or ("mse" if self.task == "regression" else "gini")

    def n_drawn(self, d: int) -> int:
        """Features drawn per node out of ``d``."""
        if self.max_features == "default":
            return d if self.task == "regression" else n_sampled_features("sqrt", d, False)
        return n_sampled_features(self.max_features, d, self.task == "regression")

    def fit(self, job: FederatedJob, *, seed: int = 0) -> VerticalForestModel:
        """Grow the forest over ``job``'s clients (the parties, in client-id order); returns the
        master's model (no partial trees: those stay with the parties)."""
        return VerticalTraining(self, job, seed).run()

    def simulate(
        self,
        parties: Sequence[Any],
        *,
        seed: int = 0,
        progress: Callable[[StepProgress], None] | None = None,
        settings: JobSettings | None = None,
    ) -> VerticalForestModel:
        """``aggregator.simulate`` for vertical parties: ``(X_block, y)`` pairs, y from exactly
        one party; returns the model with every party's partial trees (see :meth:`run_in`).
        The simulated parties' key is derived from ``seed`` (the feature codes depend on it), so
        the same seed grows the same forest."""
        from ..simulate import Simulation

        key = hashlib.sha256(f"wheelfed simulated vertical parties {seed}".encode()).digest()
        return self.run_in(
            Simulation(parties_for_simulation(parties, party_key=key)), seed=seed, progress=progress, settings=settings
        )

    def run_in(
        self,
        simulation: Any,
        *,
        seed: int = 0,
        progress: Callable[[StepProgress], None] | None = None,
        settings: JobSettings | None = None,
        job_id: str | None = None,
    ) -> VerticalForestModel:
        """Train in an existing ``Simulation`` (whose transports a test may watch) and attach the
        simulated parties' partial trees to the master's model, as if deployed."""
        job_id = job_id or f"sim-{self.name}-{seed}"
        model = simulation.run(self, seed=seed, progress=progress, settings=settings, job_id=job_id)
        partial = tuple(simulation.participants[p].halves[self.name].partial_forest(job_id) for p in model.parties)
        return dataclasses.replace(model, partial=partial)


@dataclass(frozen=True)
class WonSplit:
    """A node's winning split as the master knows it: the ``owner`` (party position), the encoded
    ``feature`` (offset by the widths of the parties before the owner) and the ``gain``."""

    owner: int
    feature: int
    gain: float


class VerticalTraining:
    """One training job on the master (the state between rounds)."""

    def __init__(self, config: VerticalFederatedForest, job: FederatedJob, seed: int) -> None:
        self.config = config
        self.job = job
        self.seed = seed
        self.parties = list(job.clients)
        self.crit = config.split_criterion
        self.alignment: AlignmentReport | None = None

    # -- rounds ------------------------------------------------------------------------------------

    def _ask(self, what: str, request: object, expect: type, clients: Sequence[str] | None = None) -> dict[str, Any]:
        return ask_every_party(self.job, self.parties, what, request, expect, clients)

    def _abort(self, reason: str) -> None:
        abort_parties(self.job, self.parties, reason)

    def _task(self, party: int) -> VerticalTask:
        return VerticalTask(
            task=self.config.task,
            criterion=self.crit,
            party=party,
            n_parties=len(self.parties),
            n_trees=self.config.n_trees,
            n_classes=len(self.classes),
            min_samples_split=self.config.min_samples_split,
            min_samples_leaf=self.config.min_samples_leaf,
            feature_set_version=self.config.feature_set_version,
        )

    def _align(self) -> tuple[list[np.ndarray], int]:
        cfg = self.config
        replies: dict[str, VerticalAlignReply] = self._ask(
            "alignment",
            VerticalAlignRequest(cfg.feature_set_version, cfg.hop_us, cfg.tolerance_us, cfg.task),
            VerticalAlignReply,
        )
        holders = [p for p in self.parties if replies[p].has_labels]
        if len(holders) != 1:
            self._abort("not exactly one label holder")
            raise TrainingError(f"exactly one party must hold the labels, {len(holders)} do ({', '.join(holders)})")
        self.label_holder = holders[0]
        if cfg.label_holder and self.label_holder != cfg.label_holder:
            self._abort("unexpected label holder")
            raise TrainingError(
                f"the labels are on {self.label_holder}, not on {cfg.label_holder} (the label holder "
                "named for this job)"
            )
        self.classes = replies[self.label_holder].classes if cfg.task == "classification" else ()
        if cfg.task == "classification" and len(self.classes) < 2:
            self._abort("fewer than 2 classes")
            raise TrainingError(f"classification needs at least 2 classes, the labels have {list(self.classes)}")
        self.n_features = [replies[p].n_features for p in self.parties]
        self.offsets = np.concatenate([[0], np.cumsum(self.n_features)]).astype(np.int64)
        keep, self.alignment = intersect_digests(
            self.parties, [replies[p].digests for p in self.parties], [replies[p].off_grid for p in self.parties]
        )
        if self.alignment.common == 0:
            self._abort("no common windows")
            raise TrainingError(f"the parties hold no window in common: {self.alignment.line()}")
        return keep, self.alignment.common

    def run(self) -> VerticalForestModel:
        cfg, started = self.config, time.monotonic()
        keep, n = self._align()
        weights = np.stack([draw_rows(self.seed, t, n, cfg.bootstrap) for t in range(cfg.n_trees)])
        dtype = np.uint8 if weights.max() <= 0xFF else np.uint16 if weights.max() <= 0xFFFF else np.uint32
        setup = self._ask(
            "setup",
            {
                p: VerticalSetupRequest(self._task(i), keep[i], weights.astype(dtype))
                for i, p in enumerate(self.parties)
            },
            VerticalSetupReply,
        )
        wrong = {p: r.n_rows for p, r in setup.items() if r.n_rows != n}
        if wrong:
            self._abort("row counts differ")
            raise TrainingError(f"parties found a different number of common windows than the {n} aligned: {wrong}")
        sealed_labels = setup[self.label_holder].sealed_labels
        d = int(self.offsets[-1])
        k = cfg.n_drawn(d)
        splits: dict[tuple[int, int], WonSplit] = {}  # by (tree, node)
        frontier = [(t, 0) for t in range(cfg.n_trees)] if cfg.max_depth > 0 else []
        partitions: tuple[SealedPartition, ...] = ()
        level = 0
        while frontier:
            tree = np.array([f[0] for f in frontier], dtype=np.int64)
            node = np.array([f[1] for f in frontier], dtype=np.int64)
            drawn = [draw_features(self.seed, t, v, d, k) for t, v in frontier]
            requests = {}
            for i, p in enumerate(self.parties):
                lo, hi = self.offsets[i], self.offsets[i + 1]
                mine = [f[(f >= lo) & (f < hi)] - lo for f in drawn]
                requests[p] = VerticalLevelRequest(
                    self._task(i),
                    level,
                    partitions,
                    tree,
                    node,
                    np.concatenate([[0], np.cumsum([m.size for m in mine])]).astype(np.int64),
                    np.concatenate(mine).astype(np.int64) if mine else np.zeros(0, np.int64),
                    sealed_labels if level == 0 and p != self.label_holder else b"",
                )
            replies: dict[str, VerticalLevelReply] = self._ask(f"level {level}", requests, VerticalLevelReply)
            for p, r in replies.items():
                if r.gain.shape[0] != len(frontier):
                    self._abort("malformed level reply")
                    raise TrainingError(f"party {p} answered {r.gain.shape[0]} nodes of {len(frontier)}")
            has = np.column_stack([replies[p].has_split for p in self.parties])
            gain = np.column_stack([replies[p].gain for p in self.parties])
            owner = choose_owners(has, gain, cfg.min_impurity_decrease)
            winners = np.flatnonzero(owner >= 0)
            for i in winners.tolist():
                o = int(owner[i])
                local = int(replies[self.parties[o]].feature[i])
                splits[frontier[i]] = WonSplit(o, int(self.offsets[o]) + local, float(gain[i, o]))
            owners = sorted(set(owner[winners].tolist()))
            asked = {
                self.parties[o]: VerticalPartitionRequest(self._task(o), level, tree[owner == o], node[owner == o])
                for o in owners
            }
            parts = self._ask(f"partition {level}", asked, VerticalPartitionReply, list(asked)) if asked else {}
            partitions = tuple(
                SealedPartition(o, tree[owner == o], node[owner == o], parts[self.parties[o]].sealed) for o in owners
            )
            level += 1
            frontier = (
                [(int(tree[i]), 2 * int(node[i]) + c) for i in winners.tolist() for c in (1, 2)]
                if level < cfg.max_depth
                else []
            )
            self.job.report(
                StepProgress(
                    self.job.job_id,
                    cfg.name,
                    level,
                    cfg.max_depth,
                    len(self.parties),
                    len(self.parties),
                    {"splits": float(winners.size)},
                    time.monotonic() - started,
                )
            )
        finish = self._ask(
            "finish",
            {p: VerticalFinishRequest(self._task(i), level, partitions) for i, p in enumerate(self.parties)},
            VerticalFinishReply,
        )
        model = self._model(splits, finish[self.label_holder], level)
        return dataclasses.replace(model, party_digests=tuple(finish[p].digest for p in self.parties))

    def _model(
        self, splits: dict[tuple[int, int], WonSplit], leaves: VerticalFinishReply, depth: int
    ) -> VerticalForestModel:
        cfg = self.config
        trees = []
        width = 1 if cfg.task == "regression" else len(self.classes)
        for t in range(cfg.n_trees):
            nodes = sorted(v for (tt, v) in splits if tt == t)
            split_nodes = np.array(nodes, dtype=np.int64)
            leaf_ids = leaves_of(split_nodes)
            mine = leaves.leaf_tree == t
            order = np.argsort(leaves.leaf_node[mine])
            got = leaves.leaf_node[mine][order]
            if got.shape != leaf_ids.shape or (got != leaf_ids).any() or leaves.values.shape[1] != width:
                raise TrainingError(f"the label holder's leaves of tree {t} do not match the tree the master grew")
            won = [splits[(t, v)] for v in nodes]
            trees.append(
                MasterTree(
                    split_nodes,
                    np.array([s.owner for s in won], dtype=np.int64),
                    np.array([s.feature for s in won], dtype=np.int64),
                    np.array([s.gain for s in won], dtype=np.float64),
                    leaf_ids,
                    leaves.values[mine][order],
                    leaves.cover[mine][order],
                )
            )
        integer = bool(self.classes) and all(c.lstrip("-").isdigit() for c in self.classes)
        classes = tuple(sorted(self.classes, key=int)) if integer else self.classes
        if classes != self.classes:  # integer labels: numeric class order, as scikit-learn
            perm = [self.classes.index(c) for c in classes]
            trees = [
                MasterTree(tr.split_nodes, tr.owner, tr.feature, tr.gain, tr.leaves, tr.values[:, perm], tr.cover)
                for tr in trees
            ]
        return VerticalForestModel(
            tuple(trees),
            cfg.task,
            classes,
            tuple(self.parties),
            tuple(self.n_features),
            None,
            integer,
            VerticalForestMetadata(
                job=self.job.job_id,
                label_holder=self.label_holder,
                n_trees=cfg.n_trees,
                max_depth=depth,
                criterion=self.crit,
                hop_us=cfg.hop_us,
                tolerance_us=cfg.tolerance_us,
                feature_set_version=cfg.feature_set_version,
            ),
            self.alignment,
        )
