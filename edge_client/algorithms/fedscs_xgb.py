"""FedSCS-XGB's client half (paper Alg. 2): margins, gradients, Hessian-weighted sketches, atoms.

Per job the client keeps a snapshot of its labelled data (features rounded to float32, as
XGBoost does on input and as the bin ids and the trees' thresholds are), the targets as class
ids, and its margins with the number of trees they include. Every request carries the trees the
client may lack; the client applies exactly the ones it has not applied (never one twice), and
refuses with ``resync`` when the request assumes trees it does not hold (it restarted): the
server then sends the whole model next time.

What leaves the gateway depends on the job's protocol (PRIVACY.md has the full table):

* ``private`` (differential privacy, the default): per depth level, per requested node, round
  feature and bin the lattice sums of the clipped, stochastically rounded G and H (for squared
  error G clipped to the job's public residual bound, and no H: it is the count) and the window
  count, plus this gateway's share of the Skellam noise, masked; per round the leaves' sums.
* ``histogram`` (secure sums without differential privacy): per depth level, one integer
  vector -- per requested node, feature and bin the sums of G and H (fixed point; of the
  node's tree's class, or of every class for ``multi_output_tree``) and the window count --
  masked by secure aggregation unless the job turned it off. The server decodes only the fleet's sum.
* ``atoms`` (the paper's, for reproduction): the sketch phase sends M+1 weighted quantiles per
  feature (actual feature values) or DDSketch buckets, the atom phase every distinct bin-id
  vector with its count and gradient sums -- in practice one atom per window, i.e. each
  window's quantised feature vector, from whose gradients its label can be read.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from shared.atoms import merge_atoms
from shared.differential_privacy import clip_norm, skellam_share, stochastic_round
from shared.histograms import histogram_slots, node_histograms, quantize, route_round
from shared.model import TreeEnsemble
from shared.objectives import Objective, objective_named
from shared.protocol.envelope import Message
from shared.protocol.messages.fedscs_xgb import (
    LOSS_BOUND,
    LOSS_FRAC_BITS,
    DDSketchColumns,
    ModelDelta,
    SummaryColumns,
    XgbAtomReply,
    XgbAtomRequest,
    XgbHistogramReply,
    XgbHistogramRequest,
    XgbPrivateLeavesRequest,
    XgbPrivateLevelRequest,
    XgbSketchReply,
    XgbSketchRequest,
    XgbTask,
)
from shared.sketches import (
    DDSketch,
    Standardization,
    bin_ids,
    ddsketches_to_columns,
    summaries_to_arrays,
    summarize_columns,
)

from ..dispatcher import Dispatcher, RequestRejected
from ..evaluation import load_model
from ..secure_aggregation import SecureAggregationClient
from ..training_data import JobSnapshots, LabelledData, TrainingData, class_ids

log = logging.getLogger(__name__)

#: Jobs whose state a client keeps at once (oldest forgotten first).
MAX_JOBS = 4


@dataclass
class _JobState:
    """One job's snapshot and margins. ``X`` float32; rows whose label the job lacks are dropped."""

    task: XgbTask
    objective: Objective
    X: np.ndarray
    target: np.ndarray
    margins: np.ndarray  # (n, n_outputs)
    n_trees: int = 0

    @classmethod
    def start(cls, task: XgbTask, data: LabelledData) -> _JobState:
        if data.X.shape[1] != task.n_features:
            raise RequestRejected(
                "feature_mismatch", f"the job has {task.n_features} features, this client {data.X.shape[1]}"
            )
        objective = objective_named(task.objective, len(task.classes))
        X = np.asarray(data.X, dtype=np.float32)
        if task.objective == "squared_error":
            target = np.asarray(data.y, dtype=np.float64)
        else:
            target = class_ids(data.y, task.classes)
            known = target >= 0
            if not known.all():
                log.warning("labels outside the job's classes ignored", extra={"rows": int((~known).sum())})
                X, target = X[known], target[known]
        margins = np.broadcast_to(task.base_score, (X.shape[0], task.base_score.shape[0])).copy()
        return cls(task, objective, X, target, margins)

    def gradients(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample (g, h) as (n, n_outputs), whatever the objective's own shapes."""
        g, h = self.objective.gradients(self._margin_arg(), self.target)
        return g.reshape(self.margins.shape), h.reshape(self.margins.shape)

    def loss_sum(self) -> float:
        """The additive part of the progress loss: summed log-loss, or the sum of squared errors
        (the server reports ``sqrt(SSE / n)``, XGBoost's rmse)."""
        if self.target.shape[0] == 0:
            return 0.0
        mean = self.objective.loss(self._margin_arg(), self.target)
        squared = mean * mean if self.task.objective == "squared_error" else mean
        return float(squared * self.target.shape[0])

    def _margin_arg(self) -> np.ndarray:
        return self.margins if self.task.objective == "softmax" else self.margins[:, 0]

    def apply(self, delta: ModelDelta) -> None:
        """Add the trees of ``delta`` not yet in the margins (none twice)."""
        if delta.first_tree > self.n_trees:
            raise RequestRejected(
                "resync",
                f"holds {self.n_trees} trees, the request starts at tree "
                f"{delta.first_tree}; send the model from tree {self.n_trees}",
            )
        if not delta.trees:
            return
        model = load_model(delta.trees)
        if model.kind != "boosted" or model.n_outputs != self.margins.shape[1] or model.n_features != self.X.shape[1]:
            raise RequestRejected(
                "bad_model",
                f"the model delta ({model.kind}, {model.n_outputs} outputs, "
                f"{model.n_features} features) does not fit this job",
            )
        skip = self.n_trees - delta.first_tree
        if skip >= model.n_trees:
            return
        # One boosting round at a time, as an uninterrupted job adds them: floating-point addition
        # is not associative, and a gateway that resumes (or catches up) must hold the same margins
        # bit for bit. A round is one tree per output, or one vector-leaf tree.
        per_round = model.n_outputs if model.tree_output[skip] >= 0 else 1
        for start in range(skip, model.n_trees, per_round):
            stop = min(start + per_round, model.n_trees)
            new = TreeEnsemble(
                trees=model.trees[start:stop],
                kind="boosted",
                link=model.link,
                n_outputs=model.n_outputs,
                feature_names=model.feature_names,
                tree_output=model.tree_output[start:stop],
                classes=model.classes,
            )
            self.margins += new.predict_margin(self.X)
            self.n_trees += new.n_trees


def summary_points(requested: int, n_samples: int) -> int:
    """M for this client: the server's ``summary_size``, but at most half the client's samples.

    With M >= n the summary would list every raw value of every feature (sorted per column): at
    most n/2 keeps each point a quantile of >= 2 samples. The mixture's rank bound becomes
    ``sum_k pi_k / M_k`` -- a small client's coarser sketch weighs ``n_k / N`` -- and the bytes
    shrink with it.
    """
    return max(1, min(requested, n_samples // 2))


class FedSCSXGBClient:
    """Answers ``fedscs_xgb.*`` requests from a ``TrainingData`` (arrays or the window store)."""

    capability = "fedscs_xgb"

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
        self._jobs: OrderedDict[str, _JobState] = OrderedDict()
        #: Draws the private protocol's stochastic rounding and noise shares (OS entropy; tests
        #: seed it to compare runs draw for draw).
        self.noise_rng = np.random.default_rng()

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(XgbSketchRequest, self.on_sketch)
        dispatcher.register(XgbAtomRequest, self.on_atoms)
        dispatcher.register(XgbHistogramRequest, self.on_histograms)
        dispatcher.register(XgbPrivateLevelRequest, self.on_private_level)
        dispatcher.register(XgbPrivateLeavesRequest, self.on_private_leaves)

    def _state(self, job: str, task: XgbTask) -> _JobState:
        """The job's state, created from a fresh snapshot if this client has none (restart)."""
        state = self._jobs.get(job)
        if (
            state is None
            or state.task.objective != task.objective
            or state.task.classes != task.classes
            or not np.array_equal(state.task.base_score, task.base_score)
        ):
            state = _JobState.start(task, self.snapshots.get(job, task.feature_set_version))
            self._jobs[job] = state
            while len(self._jobs) > self.max_jobs:
                self._jobs.popitem(last=False)
        self._jobs.move_to_end(job)
        return state

    # -- handlers --------------------------------------------------------------------------------

    def on_sketch(self, message: Message) -> XgbSketchReply:
        body: XgbSketchRequest = message.body
        state = self._state(message.envelope.job, body.task)
        state.apply(body.model)
        _, h = state.gradients()
        weight = h.sum(axis=1)  # Alg. 2 step 6: w_i = sum_k h_ik
        n = state.X.shape[0]
        if body.sketch == "summary":
            columns = summaries_to_arrays(summarize_columns(state.X, weight, summary_points(body.summary_size, n)))
            columns["points"] = columns["points"].astype(np.float32)  # values of the float32 snapshot: exact
            return XgbSketchReply(state.n_trees, summary=SummaryColumns(**columns))
        if body.centers is None or body.scales is None:
            raise RequestRejected("bad_request", "a ddsketch request needs the features' centers and scales")
        maps = [Standardization(c, s) for c, s in zip(body.centers, body.scales)]
        sketches = DDSketch.from_columns(state.X, weight, body.ddsketch_alpha, maps)
        return XgbSketchReply(state.n_trees, ddsketch=DDSketchColumns(**ddsketches_to_columns(sketches)))

    def on_atoms(self, message: Message) -> XgbAtomReply:
        body: XgbAtomRequest = message.body
        state = self._state(message.envelope.job, body.task)
        state.apply(body.model)
        g, h = state.gradients()
        bins = bin_ids(state.X, body.edges())
        keys, G, H, W = merge_atoms(bins, g, h)
        return XgbAtomReply(
            n_trees=state.n_trees,
            n_samples=int(state.target.shape[0]),
            loss_sum=state.loss_sum(),
            keys=keys.astype(bins.dtype),
            counts=W.astype(np.uint32),
            grad=G,
            hess=H,
        )

    def on_histograms(self, message: Message) -> XgbHistogramReply:
        """One depth level of the private protocol: the requested nodes' (G, H, count) histograms
        as one fixed-point vector, masked when the request says so."""
        body: XgbHistogramRequest = message.body
        state = self._state(message.envelope.job, body.task)
        state.apply(body.model)
        g, h = state.gradients()
        edges = body.edges()
        n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
        slots = histogram_slots(bin_ids(state.X, edges), n_edges)
        s = body.splits
        position = route_round(
            slots,
            body.slots - 1,
            body.task.trees_per_round,
            s.tree,
            s.node,
            s.feature,
            s.bin,
            s.default_left,
            s.left,
            s.right,
        )
        try:
            grad = quantize(g, body.frac_bits, body.gradient_bound)
            hess = quantize(h, body.frac_bits, body.gradient_bound)
        except ValueError as exc:
            raise RequestRejected("gradient_range", f"{exc}: the job's fixed-point range is too small") from None
        hist = node_histograms(
            slots, body.slots, position, body.node_tree, body.node_id, grad, hess, vector_leaves=body.task.vector_leaves
        )
        if body.noise is not None:  # the private protocol's requests carry the noise, not these
            raise RequestRejected("bad_request", "the histogram protocol adds no noise: a noisy request is refused")
        parts = [hist.ravel()]
        if body.with_loss:
            loss = quantize([state.loss_sum()], LOSS_FRAC_BITS, LOSS_BOUND)
            parts.append(np.array([loss[0], state.target.shape[0]], dtype=np.int64))
        return XgbHistogramReply(
            state.n_trees, self.secure.protect(message, np.concatenate(parts), body.secure, body.word_bits)
        )

    # -- the private protocol --------------------------------------------------------------------

    def _private_positions(
        self, message: Message, body: XgbPrivateLevelRequest | XgbPrivateLeavesRequest
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Margins updated, then the lattice statistics of every window (G and H clipped and
        rounded: ``(n, m)`` each), its slot in each round feature and its node after the splits."""
        state = self._state(message.envelope.job, body.task)
        state.apply(body.model)
        if body.round.features.max() >= state.X.shape[1]:
            raise RequestRejected("bad_request", "a round feature is not a column of this job")
        g, h = state.gradients()
        lattice = body.lattice
        qg = stochastic_round(clip_norm(g, lattice.grad_bound), lattice.gradient_scale, self.noise_rng)
        qh = stochastic_round(clip_norm(h, lattice.hess_bound), lattice.scale, self.noise_rng)
        edges = body.round.edges()
        n_edges = np.array([e.shape[0] for e in edges], dtype=np.int64)
        slots = histogram_slots(bin_ids(state.X[:, body.round.features], edges), n_edges)
        s = body.splits
        column = np.searchsorted(body.round.features, s.feature)
        position = route_round(
            slots,
            body.round.slots - 1,
            1,
            np.zeros_like(s.tree),
            s.node,
            column,
            s.bin,
            s.default_left,
            s.left,
            s.right,
        )
        return qg, qh, slots, position

    def _release(
        self, message: Message, vector: np.ndarray, body: XgbPrivateLevelRequest | XgbPrivateLeavesRequest
    ) -> XgbHistogramReply:
        noisy = vector + skellam_share(vector.shape, body.noise.mu, body.noise.shares, self.noise_rng)
        state = self._jobs[message.envelope.job]
        return XgbHistogramReply(state.n_trees, self.secure.protect(message, noisy, body.secure, body.word_bits))

    def on_private_level(self, message: Message) -> XgbHistogramReply:
        """One depth level of the private protocol: the requested nodes' lattice histograms over
        the round's features (G, H and count; G and count for squared error, whose H is the
        count), plus this gateway's share of the noise, masked."""
        body: XgbPrivateLevelRequest = message.body
        qg, qh, slots, position = self._private_positions(message, body)
        nodes = np.zeros_like(body.node_id)
        hist = node_histograms(slots, body.round.slots, position, nodes, body.node_id, qg, qh, vector_leaves=True)
        hist[:, -1] *= body.lattice.scale  # a window counts ``scale`` on the lattice
        if body.task.unit_hessian:  # every H is the count: not sent twice
            m = qg.shape[1]
            hist = np.concatenate([hist[:, :m], hist[:, -1:]], axis=1)
        return self._release(message, hist.ravel(), body)

    def on_private_leaves(self, message: Message) -> XgbHistogramReply:
        """The private protocol's leaf sums: per requested leaf, the lattice G and H of its
        windows, plus this gateway's share of the noise, masked."""
        body: XgbPrivateLeavesRequest = message.body
        qg, qh, _, position = self._private_positions(message, body)
        leaf = np.searchsorted(body.leaves, position[0])
        inside = (leaf < body.leaves.shape[0]) & (
            body.leaves[np.minimum(leaf, body.leaves.shape[0] - 1)] == position[0]
        )
        m = qg.shape[1]
        sums = np.zeros((body.leaves.shape[0], 2 * m), dtype=np.int64)
        np.add.at(sums, leaf[inside], np.concatenate([qg, qh], axis=1)[inside])
        return self._release(message, sums.ravel(), body)
