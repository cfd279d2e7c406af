"""Vertical Federated Forest's party half (paper Alg. 1): one gateway of a person, holding some
sensors' features of the person's windows -- and, on one of the gateways, the labels.

Per job the party keeps its aligned rows, the master's bootstrap draws, the labels (opened from
the label holder's sealed copy), the node every row sits in per tree, and its partial trees:
the structure of every split and the feature and threshold of the splits it owns. What it sends
(PRIVACY.md has the full table): digests of its window ids, its number of features, per open
node its best gain and the id of that feature under this job's keyed permutation of its columns
(``shared.vertical_splits.feature_codes``; the real column stays in its partial tree), and -- for
the splits it won -- the node's rows left/right, sealed for the other parties. Never a feature
value, a threshold or a feature name. The partial trees are kept only when the job finishes
(``vertical_forest.finish``); a job that fails or is aborted leaves nothing. At the finish every
party reports the SHA-256 of its partial trees; until a deployment they live in memory only.

Deployment (``vertical_forest.deploy``, on a gateway that gave :meth:`VerticalForestClient.configure`
its model directory and trusted keys): the aggregator's signed manifest
(``shared.vertical_manifest``) names the model id and version, the job and every party's digest;
the party verifies the signature, checks that its trees of that job hash to its digest, refuses
a version not above the highest it accepted for that model id (``vertical/accepted.json``), and
writes manifest and trees to ``vertical/<model_id>.cbor`` in its model directory. A restarted
gateway reloads -- and re-verifies -- them at start.

Prediction (Alg. 3): after an alignment, ``vertical_forest.route`` returns each window's
reachable leaves; ``vertical_forest.directions`` answers the classical protocol's per-node
questions; ``vertical_forest.result`` brings the master's prediction back to every party.
A *live* prediction (``live_model`` in the alignment request) offers the windows of the party's
store that started after the last window that model predicted there, labelled or not; the
result is stored as predictions (model ``<id>:v<version>``) together with that mark, in one
transaction (``WindowStore.add_predictions``). A window another party lacks at that run is not
predicted later; nor is one whose result a party failed to store after another party stored it
(that party's mark moved).

The party's data source must offer ``party_windows(feature_set_version)``
(``edge_client.training_data.PartyData`` / ``StoreTrainingData``); the key is the source's
``party_key`` or, on a gateway, the hex key in the file given by ``wheelfed gateway
--party-key-file`` (else the file named by ``$WHEELFED_PARTY_KEY_FILE``).
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shared.protocol.codec import dumps_value, loads_value
from shared.protocol.envelope import Message
from shared.protocol.errors import DecodeError
from shared.protocol.messages import Ack
from shared.protocol.schema import from_wire, to_wire
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
    VerticalManifest,
    VerticalPartitionReply,
    VerticalPartitionRequest,
    VerticalResult,
    VerticalRouteReply,
    VerticalRouteRequest,
    VerticalSetupReply,
    VerticalSetupRequest,
    VerticalTask,
)
from shared.signing import BadSignature, VerifyKey
from shared.vertical_alignment import snap_starts, start_digests, start_order
from shared.vertical_manifest import partial_digest, verify_manifest
from shared.vertical_party_key import PartyKey, SealError, read_party_key
from shared.vertical_splits import best_local_splits, feature_codes, leaf_values
from shared.vertical_trees import MAX_DEPTH, PartialTree, owned_directions, reachable_leaves

from ..dispatcher import Dispatcher, RequestRejected
from ..models import _write_atomically
from ..secure_aggregation import SecureAggregationClient
from ..store import PredictionBatch, PredictionMark, WindowStore
from ..training_data import JobSnapshots, NoTrainingData, PartySource, PartyWindows, label_strings

log = logging.getLogger(__name__)

MAX_JOBS = 4
PARTY_KEY_ENV = "WHEELFED_PARTY_KEY_FILE"
DEPLOYED_DIR = "vertical"  # in the gateway's model directory
RECORD = "accepted.json"
MAX_MODEL_BYTES = 64 << 20


def labels_context(job: str) -> bytes:
    """Associated data of a job's sealed labels (binds them to the job)."""
    return f"wheelfed/vertical/{job}/labels".encode()


def partition_context(job: str, level: int, owner: int) -> bytes:
    """Associated data of one owner's sealed partition of one level."""
    return f"wheelfed/vertical/{job}/level/{level}/owner/{owner}".encode()


@dataclass(frozen=True, eq=False)
class PartyPrediction:
    """A shared prediction on one party: its aligned windows' features ``X`` (its own columns) and
    the forest's ``values`` for them (class probabilities in ``classes`` order, or the mean)."""

    X: np.ndarray
    values: np.ndarray
    classes: tuple[str, ...]


@dataclass(frozen=True)
class PartySetup:
    """What a gateway gives its vertical party: its id, the model directory (deployed partial
    trees go to ``<model_dir>/vertical``), the aggregator's public keys that sign manifests, the
    window store live predictions are read from and written to, and the party key file."""

    client_id: str
    model_dir: Path
    trusted_keys: tuple[VerifyKey, ...] = ()
    store: WindowStore | None = None
    party_key_file: Path | None = None


@dataclass(frozen=True, eq=False)
class DeployedForest:
    """A deployed model on this party: the verified manifest and this party's partial trees."""

    manifest: VerticalManifest
    trees: tuple[PartialTree, ...]

    @property
    def label(self) -> str:
        return f"{self.manifest.model_id}:v{self.manifest.version}"


@dataclass(frozen=True, eq=False)
class _LiveWindows:
    """A live prediction job's windows as stored (rows of ``_PartyJob.windows``)."""

    model: DeployedForest
    ids: np.ndarray
    end_us: np.ndarray
    start_us: np.ndarray  # as stored (not snapped): the mark of what was predicted


@dataclass(frozen=True)
class OwnSplit:
    """A split this party won: its real ``feature`` column and the ``threshold`` (left: ``<=``)."""

    feature: int
    threshold: float


@dataclass(frozen=True, eq=False)
class NodeRows:
    """The entries of some nodes, node after node, rows ascending: each entry's ``tree`` and
    ``row``, and ``count`` rows per node."""

    tree: np.ndarray
    row: np.ndarray
    count: np.ndarray


@dataclass(frozen=True, eq=False)
class _OpenLevel:
    """The level a training job last evaluated (``on_level``): its open nodes ``(tree[i],
    node[i])`` and this party's best split at each (``best_feature`` < 0: none here)."""

    level: int
    tree: np.ndarray
    node: np.ndarray
    best_feature: np.ndarray
    best_threshold: np.ndarray


@dataclass(eq=False)
class _Growth:
    """A training job's state from its setup (``on_setup``) on."""

    task: VerticalTask
    X: np.ndarray  # the aligned rows' features (this party's columns)
    codes: np.ndarray  # codes[column]: the id the master knows the column by (``feature_codes``)
    columns: np.ndarray  # columns[code]: the inverse
    weight: np.ndarray  # (n_trees, n) bootstrap multiplicities
    node: np.ndarray  # (n_trees, n) heap id of each row's node, -1: not drawn
    root_weight: np.ndarray
    own_labels: np.ndarray | None = None  # label holder: class ids / targets of the aligned rows
    labels: np.ndarray | None = None  # every party, once opened: class ids / targets of the aligned rows
    open: _OpenLevel | None = None
    splits: dict[tuple[int, int], OwnSplit] = field(default_factory=dict)  # by (tree, node): the splits it won
    structure: list[tuple[int, int]] = field(default_factory=list)  # every (tree, node) that split
    applied_level: int = -1


@dataclass(eq=False)
class _PartyJob:
    """One job's state on one party: its alignment, then a training job's ``growth`` or a
    prediction job's aligned windows (``X``, ``predicted``)."""

    windows: PartyWindows
    offered: np.ndarray  # rows of ``windows`` offered at alignment (on the grid)
    classes: tuple[str, ...]
    growth: _Growth | None = None
    live: _LiveWindows | None = None
    X: np.ndarray | None = None  # prediction: the aligned windows' features
    predicted: np.ndarray | None = None  # prediction: rows of ``windows`` in aligned order

    def grown(self) -> _Growth:
        """The training state (``on_setup`` came first), else a clear refusal."""
        if self.growth is None:
            raise RequestRejected("resync", "this vertical job was not set up here; the job must start again")
        return self.growth


# -- window identity: the only places the party reads a window's id -----------------------------------
# A window's id for alignment is its (snapped) start on the sensors' common clock under the
# person's key -- not its session, which each gateway names itself (shared.vertical_alignment).


def _window_digests(id_key: bytes, windows: PartyWindows, rows: np.ndarray) -> np.ndarray:
    """The keyed digests of windows ``rows`` (what the master aligns on)."""
    return start_digests(id_key, windows.start_us[rows])


def _in_aligned_order(windows: PartyWindows, rows: np.ndarray) -> np.ndarray:
    """``rows`` in the job's row order, the order every party agrees on (``start_order``)."""
    return rows[start_order(windows.start_us[rows])]


def _pack_key(tree: np.ndarray, node: np.ndarray) -> np.ndarray:
    return np.asarray(tree, dtype=np.int64) * (1 << (MAX_DEPTH + 2)) + np.asarray(node, dtype=np.int64)


class VerticalForestClient:
    """Answers ``vertical_forest.*`` requests for one party; keeps its finished partial forests
    (:meth:`partial_forest`)."""

    capability = "vertical_forest"

    def __init__(
        self, data: JobSnapshots, secure: SecureAggregationClient | None = None, *, max_jobs: int = MAX_JOBS
    ) -> None:
        self.source = data.source if isinstance(data, JobSnapshots) else data
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[str, _PartyJob] = OrderedDict()
        #: Finished jobs' partial forests (one ``PartialTree`` per tree), by job id.
        self.forests: OrderedDict[str, tuple[PartialTree, ...]] = OrderedDict()
        #: The predictions the master shared, by prediction job: the windows and their values.
        self.results: OrderedDict[str, PartyPrediction] = OrderedDict()
        self.setup: PartySetup | None = None
        #: Deployed models by model id (verified; reloaded at :meth:`configure`).
        self.deployed: dict[str, DeployedForest] = {}
        self._accepted: dict[str, int] = {}
        self._predicted_until: dict[str, int] = {}

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(VerticalAlignRequest, self.on_align)
        dispatcher.register(VerticalSetupRequest, self.on_setup)
        dispatcher.register(VerticalLevelRequest, self.on_level)
        dispatcher.register(VerticalPartitionRequest, self.on_partition)
        dispatcher.register(VerticalFinishRequest, self.on_finish)
        dispatcher.register(VerticalAbort, self.on_abort)
        dispatcher.register(VerticalRouteRequest, self.on_route)
        dispatcher.register(VerticalDirectionsRequest, self.on_directions)
        dispatcher.register(VerticalResult, self.on_result)
        dispatcher.register(VerticalDeploy, self.on_deploy)

    def configure(self, setup: PartySetup) -> None:
        """Give this party a gateway's model directory, keys, store and party key file, and load
        the models deployed there (each re-verified: a file that fails is logged and skipped)."""
        self.setup = setup
        folder = setup.model_dir / DEPLOYED_DIR
        record = folder / RECORD
        if record.exists():
            try:
                data = json.loads(record.read_text(encoding="utf-8"))
                self._accepted = {str(k): int(v) for k, v in data["versions"].items()}
                self._predicted_until = {str(k): int(v) for k, v in data["predicted_until_us"].items()}
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                log.error(
                    "vertical model record unreadable; rebuilt from the stored models",
                    extra={"file": str(record), "error": str(exc)},
                )
        for path in sorted(folder.glob("*.cbor")) if folder.is_dir() else ():
            try:
                deployed = self._read_deployed(path.read_bytes())
            except (OSError, ValueError, TypeError, KeyError, DecodeError, BadSignature, RequestRejected) as exc:
                log.error("stored vertical model not loaded", extra={"file": str(path), "error": str(exc)[:300]})
                continue
            m = deployed.manifest
            self.deployed[m.model_id] = deployed
            self._accepted[m.model_id] = max(self._accepted.get(m.model_id, 0), m.version)
            log.info("vertical model loaded", extra={"model": deployed.label})

    def _read_deployed(self, data: bytes) -> DeployedForest:
        raw = loads_value(data, max_bytes=MAX_MODEL_BYTES)
        manifest = from_wire(VerticalManifest, raw["manifest"])
        trees = tuple(
            PartialTree(
                np.asarray(t["split_nodes"], dtype=np.int64),
                np.asarray(t["owned"], dtype=bool),
                np.asarray(t["feature"], dtype=np.int64),
                np.asarray(t["threshold"], dtype=np.float64),
            )
            for t in raw["trees"]
        )
        self._check_manifest(manifest, trees)
        return DeployedForest(manifest, trees)

    def _check_manifest(self, manifest: VerticalManifest, trees: tuple[PartialTree, ...]) -> None:
        """The signature, this party's place among the parties and its digest."""
        setup = self.setup
        if setup is None or not setup.trusted_keys:
            raise RequestRejected(
                "no_trusted_key",
                "this gateway was started without --trust, so it cannot verify a vertical forest manifest",
            )
        try:
            verify_manifest(manifest, setup.trusted_keys)
        except BadSignature as exc:
            raise RequestRejected("bad_signature", str(exc)) from None
        if setup.client_id not in manifest.parties:
            raise RequestRejected(
                "not_a_party",
                f"the manifest of {manifest.model_id} names parties "
                f"{', '.join(manifest.parties)}, not {setup.client_id}",
            )
        if partial_digest(manifest.job, trees) != manifest.party_digests[manifest.parties.index(setup.client_id)]:
            raise RequestRejected(
                "digest_mismatch",
                f"this party's partial trees of job {manifest.job} do not hash to "
                "the digest the signed manifest names for it",
            )

    def _write_record(self, folder: Path) -> None:
        # predicted_until_us: marks from before the store kept them (read, never moved)
        record = {
            "versions": dict(sorted(self._accepted.items())),
            "predicted_until_us": dict(sorted(self._predicted_until.items())),
        }
        _write_atomically(folder / RECORD, (json.dumps(record, indent=1) + "\n").encode())

    def on_deploy(self, message: Message) -> Ack:
        """Keep the partial trees of the manifest's job as a deployed model (see the module
        docstring); a refusal changes nothing."""
        manifest: VerticalManifest = message.body.manifest
        if self.setup is None:
            raise RequestRejected("no_model_dir", "this party has no model directory to deploy to")
        current = self.deployed.get(manifest.model_id)
        if current is not None and current.manifest == manifest:
            return Ack("unchanged")
        trees = self.forests.get(manifest.job)
        if trees is None:
            raise RequestRejected(
                "no_model",
                f"this party holds no partial trees of job {manifest.job!r} (restarted since training?): train again",
            )
        self._check_manifest(manifest, trees)
        floor = self._accepted.get(manifest.model_id, 0)
        if manifest.version <= floor:
            raise RequestRejected(
                "downgrade",
                f"{manifest.model_id} v{manifest.version} is not above v{floor}, the "
                "highest version this party accepted: deploy a higher version",
            )
        folder = self.setup.model_dir / DEPLOYED_DIR
        folder.mkdir(parents=True, exist_ok=True)
        data = dumps_value(
            {
                "manifest": to_wire(manifest),
                "trees": [
                    {
                        "split_nodes": t.split_nodes,
                        "owned": t.owned.astype(np.uint8),
                        "feature": t.feature,
                        "threshold": t.threshold,
                    }
                    for t in trees
                ],
            }
        )
        _write_atomically(folder / f"{manifest.model_id}.cbor", data)
        self._accepted[manifest.model_id] = manifest.version
        self._write_record(folder)
        self.deployed[manifest.model_id] = DeployedForest(manifest, trees)
        log.info("vertical model deployed", extra={"model": self.deployed[manifest.model_id].label})
        return Ack("deployed")

    def _forest(self, model_job: str) -> tuple[PartialTree, ...]:
        """The partial trees of the model trained by ``model_job``: finished here, or deployed."""
        if model_job in self.forests:
            return self.forests[model_job]
        for deployed in self.deployed.values():
            if deployed.manifest.job == model_job:
                return deployed.trees
        raise RequestRejected("no_model", f"this party holds no partial trees of job {model_job!r}")

    @property
    def jobs(self) -> tuple[str, ...]:
        """The jobs in progress (a failed or aborted job is not among them)."""
        return tuple(self._jobs)

    def partial_forest(self, job: str) -> tuple[PartialTree, ...]:
        if job not in self.forests:
            raise KeyError(f"no finished vertical job {job!r} on this party")
        return self.forests[job]

    # -- helpers -----------------------------------------------------------------------------------

    def _key(self) -> PartyKey:
        """The data source's ``party_key``, else (a gateway) the hex key in the party key file
        (``PartySetup.party_key_file``, else the file named by ``$WHEELFED_PARTY_KEY_FILE``)."""
        secret = getattr(self.source, "party_key", b"") or b""
        key_file = self.setup.party_key_file if self.setup is not None else None
        if not secret and (key_file or os.environ.get(PARTY_KEY_ENV)):
            try:
                secret = read_party_key(Path(key_file or os.environ[PARTY_KEY_ENV]))
            except ValueError as exc:
                raise RequestRejected("no_party_key", str(exc)) from None
        if not secret:
            raise RequestRejected(
                "no_party_key", f"this gateway has no party key for vertical jobs (set ${PARTY_KEY_ENV})"
            )
        try:
            return PartyKey.from_secret(secret)
        except ValueError as exc:
            raise RequestRejected("no_party_key", str(exc)) from None

    def _job(self, message: Message) -> _PartyJob:
        state = self._jobs.get(message.envelope.job)
        if state is None:
            raise RequestRejected(
                "resync", "holds no state of this vertical job (restarted?); the job must start again"
            )
        self._jobs.move_to_end(message.envelope.job)  # the oldest idle job goes first
        return state

    def _rows_at(self, state: _Growth, tree: np.ndarray, node: np.ndarray) -> NodeRows:
        """The (tree, row) entries of nodes ``(tree[i], node[i])`` (rows with a positive draw)."""
        if not np.size(node):
            empty = np.zeros(0, dtype=np.int64)
            return NodeRows(empty, empty, empty)
        t_all, r_all = np.nonzero(state.node >= 0)
        keys = _pack_key(t_all, state.node[t_all, r_all])
        order = np.lexsort((r_all, keys))
        keys, t_all, r_all = keys[order], t_all[order], r_all[order]
        want = _pack_key(tree, node)
        lo = np.searchsorted(keys, want, "left")
        hi = np.searchsorted(keys, want, "right")
        counts = hi - lo
        idx = np.repeat(lo - np.r_[0, np.cumsum(counts)[:-1]], counts) + np.arange(counts.sum())
        return NodeRows(t_all[idx], r_all[idx], counts)

    def _apply(self, message: Message, state: _Growth, partitions: tuple[SealedPartition, ...], level: int) -> None:
        """Move the rows of the previous level's split nodes to their children."""
        if state.applied_level >= level - 1:
            return
        key = self._key()
        for part in partitions:
            try:
                bits = key.open(part.sealed, associated=partition_context(message.envelope.job, level - 1, part.owner))
            except SealError as exc:
                raise RequestRejected("bad_partition", str(exc)) from None
            at = self._rows_at(state, part.tree, part.node)
            trees, rows, counts = at.tree, at.row, at.count
            if len(bits) != (int(counts.sum()) + 7) // 8:
                raise RequestRejected("bad_partition", "a partition does not cover its nodes' rows")
            go_left = np.unpackbits(np.frombuffer(bits, dtype=np.uint8), count=int(counts.sum())).astype(bool)
            parent = np.repeat(part.node, counts)
            state.node[trees, rows] = np.where(go_left, 2 * parent + 1, 2 * parent + 2)
            state.structure += list(zip(part.tree.tolist(), part.node.tolist()))
        state.applied_level = level - 1

    # -- handlers ----------------------------------------------------------------------------------

    def on_align(self, message: Message) -> VerticalAlignReply:
        body: VerticalAlignRequest = message.body
        key = self._key()
        live = None
        if body.live_model:
            windows, live = self._live_windows(body)
        else:
            source = self.source
            if not isinstance(source, PartySource):
                raise RequestRejected("unsupported", "this gateway's data source holds no party windows")
            try:
                windows = source.party_windows(body.feature_set_version)
            except NoTrainingData as exc:
                raise RequestRejected(exc.code, str(exc), exc.feature_sets) from None
        if body.hop_us:
            snapped = snap_starts(windows.start_us, body.hop_us, body.tolerance_us)
            starts, offered = snapped.starts, np.flatnonzero(snapped.on_grid)
        else:
            starts, offered = windows.start_us, np.arange(windows.X.shape[0])
        windows = PartyWindows(windows.X, windows.y, windows.sessions, starts)
        classes: tuple[str, ...] = ()
        if windows.y is not None and body.task == "classification":
            classes = tuple(sorted(set(label_strings(windows.y[offered])[0].astype(str).tolist())))
        if windows.y is not None and body.task == "regression":
            y = np.asarray(windows.y, dtype=np.float64)
            if not np.isfinite(y[offered]).all():
                raise RequestRejected("bad_data", "regression targets must be finite")
        if not np.isfinite(windows.X[offered]).all():
            raise RequestRejected(
                "bad_data", "vertical jobs need finite feature values (missing values are not supported yet)"
            )
        digests = _window_digests(key.id_key, windows, offered)
        self._jobs[message.envelope.job] = _PartyJob(windows, offered, classes, live=live)
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)
        return VerticalAlignReply(
            digests, int(windows.X.shape[0] - offered.size), int(windows.X.shape[1]), windows.y is not None, classes
        )

    def _live_windows(self, body: VerticalAlignRequest) -> tuple[PartyWindows, _LiveWindows]:
        """A live prediction's windows: those of the store's feature set (the request's, else the
        one the store holds) that started after the model's last prediction here."""
        deployed = self.deployed.get(body.live_model)
        if deployed is None:
            raise RequestRejected("no_model", f"model {body.live_model!r} is not deployed on this party")
        store = self.setup.store if self.setup is not None else None
        if store is None:
            raise RequestRejected("unsupported", "live prediction needs the gateway's window store")
        version = body.feature_set_version
        if not version:
            held = tuple(store.stats().by_feature_set)
            if len(held) != 1:
                raise RequestRejected(
                    "feature_set_mismatch", f"the job names no feature set and this gateway stores {len(held)}", held
                )
            version = held[0]
        since = store.prediction_mark(body.live_model)
        if since is None:  # a gateway whose mark is still in the record file (before the store kept it)
            since = self._predicted_until.get(body.live_model)
        X, _, meta = store.query(version, None if since is None else since + 1, labelled_only=False)
        return (
            PartyWindows(X, None, tuple(meta.session_ids), meta.start_us),
            _LiveWindows(deployed, meta.ids, meta.end_us, meta.start_us),
        )

    def on_setup(self, message: Message) -> VerticalSetupReply:
        body: VerticalSetupRequest = message.body
        state = self._job(message)
        if body.keep.size and body.keep.max() >= state.offered.size:
            raise RequestRejected("bad_request", "keep names windows this party did not offer")
        rows = state.offered[body.keep]
        w = state.windows
        rows = _in_aligned_order(w, rows)
        X = w.X[rows]
        codes = feature_codes(self._key(), message.envelope.job, body.task.party, X.shape[1])
        weight = body.bootstrap.astype(np.float64)
        growth = state.growth = _Growth(
            body.task,
            X,
            codes,
            np.argsort(codes),
            weight,
            np.where(weight > 0, 0, -1).astype(np.int64),
            weight.sum(axis=1),
        )
        sealed = b""
        if w.y is not None:
            if body.task.task == "classification":
                names = label_strings(w.y[rows])[0].astype(str)
                classes = np.asarray(state.classes, dtype=str)  # sorted at alignment
                labels = np.searchsorted(classes, names).astype(np.int64)
                if names.size and (not classes.size or (classes[np.minimum(labels, classes.size - 1)] != names).any()):
                    raise RequestRejected("bad_data", "a window's label is not among the classes offered at alignment")
            else:
                labels = np.asarray(w.y[rows], dtype=np.float64)
            growth.own_labels = growth.labels = labels
            sealed = self._key().seal(labels.tobytes(), associated=labels_context(message.envelope.job))
        return VerticalSetupReply(int(rows.size), sealed)

    def on_level(self, message: Message) -> VerticalLevelReply:
        body: VerticalLevelRequest = message.body
        state = self._job(message).grown()
        task = state.task
        if state.labels is None:  # a party without labels: the label holder's copy, relayed sealed
            if not body.sealed_labels:
                raise RequestRejected("bad_request", "the first level must carry the sealed labels")
            try:
                raw = self._key().open(body.sealed_labels, associated=labels_context(message.envelope.job))
            except SealError as exc:
                raise RequestRejected("bad_labels", str(exc)) from None
            labels = np.frombuffer(raw, dtype=np.int64 if task.n_classes else np.float64)
            if labels.size != state.X.shape[0] or (
                task.n_classes and (labels.min(initial=0) < 0 or labels.max(initial=0) >= task.n_classes)
            ):
                raise RequestRejected("bad_labels", "the labels do not fit this party's windows")
            state.labels = labels
        labels = state.labels
        self._apply(message, state, body.partitions, body.level)
        n_nodes = body.node_id.shape[0]
        at_nodes = self._rows_at(state, body.node_tree, body.node_id)
        trees, rows, counts = at_nodes.tree, at_nodes.row, at_nodes.count
        node_pos = np.repeat(np.arange(n_nodes), counts)
        wanted = np.zeros((n_nodes, state.X.shape[1]), dtype=bool)
        per_node = np.repeat(np.arange(n_nodes), np.diff(body.feature_offsets))
        if body.features.size and body.features.max() >= state.X.shape[1]:
            raise RequestRejected("bad_request", f"feature {int(body.features.max())} does not exist here")
        wanted[per_node, state.columns[body.features]] = True
        local = best_local_splits(
            state.X,
            rows,
            node_pos,
            state.weight[trees, rows],
            labels,
            task.n_classes,
            wanted,
            state.root_weight[body.node_tree],
            criterion=task.criterion,
            min_samples_split=task.min_samples_split,
            min_samples_leaf=task.min_samples_leaf,
        )
        state.open = _OpenLevel(body.level, body.node_tree, body.node_id, local.feature, local.threshold)
        has = np.isfinite(local.gain)
        return VerticalLevelReply(
            has.astype(np.uint8),
            np.where(has, local.gain, 0.0),
            np.where(has, state.codes[np.maximum(local.feature, 0)], -1),
        )

    def on_partition(self, message: Message) -> VerticalPartitionReply:
        body: VerticalPartitionRequest = message.body
        state = self._job(message).grown()
        open_level = state.open
        if open_level is None or body.level != open_level.level:
            held = -1 if open_level is None else open_level.level
            raise RequestRejected("resync", f"holds level {held}, not {body.level}")
        position = {k: i for i, k in enumerate(_pack_key(open_level.tree, open_level.node).tolist())}
        try:
            at = np.array([position[k] for k in _pack_key(body.node_tree, body.node_id).tolist()], dtype=np.int64)
        except KeyError:
            raise RequestRejected("bad_request", "partition asked for a node that is not open") from None
        best_feature, best_threshold = open_level.best_feature, open_level.best_threshold
        if (best_feature[at] < 0).any():
            raise RequestRejected("bad_request", "partition asked for a node where this party has no split")
        at_nodes = self._rows_at(state, body.node_tree, body.node_id)
        rows, counts = at_nodes.row, at_nodes.count
        feature = np.repeat(best_feature[at], counts)
        threshold = np.repeat(best_threshold[at], counts)
        go_left = state.X[rows, feature] <= threshold
        for t, n, i in zip(body.node_tree.tolist(), body.node_id.tolist(), at.tolist()):
            state.splits[(t, n)] = OwnSplit(int(best_feature[i]), float(best_threshold[i]))
        bits = np.packbits(go_left).tobytes()
        return VerticalPartitionReply(
            self._key().seal(bits, associated=partition_context(message.envelope.job, body.level, state.task.party))
        )

    def on_finish(self, message: Message) -> VerticalFinishReply:
        body: VerticalFinishRequest = message.body
        state = self._job(message).grown()
        self._apply(message, state, body.partitions, body.level)
        forest = self._partial_forest(state)
        digest = partial_digest(message.envelope.job, forest)
        reply = VerticalFinishReply(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 1)), np.zeros(0), digest)
        if state.own_labels is not None:
            t, r = np.nonzero(state.node >= 0)
            keys = _pack_key(t, state.node[t, r])
            unique, inverse = np.unique(keys, return_inverse=True)
            leaves = leaf_values(state.own_labels[r], inverse, state.weight[t, r], state.task.n_classes, unique.size)
            leaf_tree = unique >> (MAX_DEPTH + 2)
            reply = VerticalFinishReply(
                leaf_tree, unique - (leaf_tree << (MAX_DEPTH + 2)), leaves.values, leaves.cover, digest
            )
        self.forests[message.envelope.job] = forest
        while len(self.forests) > self.max_jobs:
            self.forests.popitem(last=False)
        self._jobs.pop(message.envelope.job, None)
        return reply

    def on_abort(self, message: Message) -> Ack:
        self._jobs.pop(message.envelope.job, None)
        self.forests.pop(message.envelope.job, None)
        log.warning("vertical job aborted", extra={"job": message.envelope.job, "reason": message.body.reason})
        return Ack("dropped")

    def _prediction_windows(self, message: Message, model_job: str, keep: np.ndarray) -> np.ndarray:
        """The features of the windows ``keep`` of this prediction job's alignment, aligned."""
        state = self._job(message)
        self._forest(model_job)
        if keep.size and keep.max() >= state.offered.size:
            raise RequestRejected("bad_request", "keep names windows this party did not offer")
        if state.X is None or state.X.shape[0] != keep.size:
            rows = state.offered[keep]
            w = state.windows
            state.predicted = _in_aligned_order(w, rows)
            state.X = w.X[state.predicted]
        return state.X

    def on_route(self, message: Message) -> VerticalRouteReply:
        """One-round prediction (Alg. 3) of the windows this prediction job aligned."""
        body: VerticalRouteRequest = message.body
        X = self._prediction_windows(message, body.model_job, body.keep)
        reach = np.concatenate([reachable_leaves(tree, X) for tree in self._forest(body.model_job)], axis=1)
        return VerticalRouteReply(np.packbits(reach, axis=1), int(reach.shape[1]))

    def on_directions(self, message: Message) -> VerticalDirectionsReply:
        """Classical prediction: where the named windows go at this party's splits."""
        body: VerticalDirectionsRequest = message.body
        X = self._prediction_windows(message, body.model_job, body.keep)
        forest = self._forest(body.model_job)
        if body.rows.size and body.rows.max() >= X.shape[0]:
            raise RequestRejected("bad_request", "rows beyond the aligned windows")
        go_left = np.zeros(body.rows.shape[0], dtype=bool)
        for i, (t, node) in enumerate(zip(body.tree.tolist(), body.node.tolist())):
            if not 0 <= t < len(forest):
                raise RequestRejected("bad_request", f"the model has no tree {t}")
            a, b = body.offsets[i], body.offsets[i + 1]
            try:
                go_left[a:b] = owned_directions(forest[t], X[body.rows[a:b]], node)
            except ValueError as exc:
                raise RequestRejected("bad_request", str(exc)) from None
        return VerticalDirectionsReply(np.packbits(go_left))

    def on_result(self, message: Message) -> Ack:
        """Keep the prediction of this job's windows (every party of the person receives it)."""
        body: VerticalResult = message.body
        state = self._job(message)
        if state.X is None or body.values.shape[0] != state.X.shape[0]:
            raise RequestRejected("bad_request", "the result does not fit this prediction job's windows")
        self._jobs.pop(message.envelope.job, None)
        if state.live is not None:
            self._store_live(state, state.live, body)
        self.results[message.envelope.job] = PartyPrediction(state.X, body.values, body.classes)
        while len(self.results) > self.max_jobs:
            self.results.popitem(last=False)
        return Ack("kept")

    def _store_live(self, state: _PartyJob, live: _LiveWindows, body: VerticalResult) -> None:
        """A live prediction's result as predictions of the store's windows (classification: the
        most probable class with its probability; regression: the mean as the label), and the
        model's mark moved to the last window predicted -- one store transaction
        (``WindowStore.add_predictions``), so a failure keeps neither and the next run predicts
        those windows again, once."""
        rows = state.predicted
        if live.model.manifest.classes != body.classes:
            raise RequestRejected("bad_request", "the result's classes are not the deployed model's")
        if rows is None or not rows.size:
            return
        best = np.argmax(body.values, axis=1)
        names = np.asarray(body.classes)[best] if body.classes else np.char.mod("%.6g", body.values[:, 0])
        probability = body.values[np.arange(rows.size), best] if body.classes else np.ones(rows.size)
        store = self.setup.store if self.setup is not None else None
        if store is None:  # checked at alignment; a party reconfigured since has no store to keep them in
            raise RequestRejected("unsupported", "live prediction needs the gateway's window store")
        store.add_predictions(
            PredictionBatch(
                live.model.label,
                [state.windows.sessions[row] for row in rows.tolist()],
                live.end_us[rows],
                live.ids[rows],
                names.tolist(),
                probability,
                body.values,
            ),
            PredictionMark(live.model.manifest.model_id, int(live.start_us[rows].max())),
        )

    def _partial_forest(self, state: _Growth) -> tuple[PartialTree, ...]:
        trees = []
        for t in range(state.task.n_trees):
            nodes = np.array(sorted(n for tt, n in state.structure if tt == t), dtype=np.int64)
            own = [state.splits.get((t, n)) for n in nodes.tolist()]
            trees.append(
                PartialTree(
                    nodes,
                    np.array([o is not None for o in own], dtype=bool),
                    np.array([o.feature if o else -1 for o in own], dtype=np.int64),
                    np.array([o.threshold if o else np.nan for o in own], dtype=np.float64),
                )
            )
        return tuple(trees)
