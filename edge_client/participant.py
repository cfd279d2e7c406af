"""The federated side of a client: one dispatcher answering every algorithm's requests.

Used by ``wheelfed gateway`` (data from its window store) and by ``aggregator.simulate`` (data
from arrays), so a simulated client runs exactly the code a gateway runs.
"""

from __future__ import annotations

import zlib

import numpy as np

from shared.protocol.envelope import Message
from shared.protocol.messages import DataSummary, DataSummaryRequest
from shared.protocol.messages.evaluation import EvaluateRequest, EvaluationReply, LocalBaselineRequest
from shared.protocol.messages.fleet_sums import (
    DataShape,
    DataShapeRequest,
    FleetCountsRequest,
    FleetSumReply,
    GridCountsRequest,
)
from shared.transport.base import Transport

from .algorithms import CLIENT_HALVES, ClientHalf
from .dispatcher import Dispatcher, RequestRejected
from .evaluation import evaluate_model, load_model
from .fleet_sums import count_vector, data_shape, grid_vector, with_noise
from .local_baseline import local_baseline
from .secure_aggregation import SecureAggregationClient
from .training_data import JobSnapshots, LabelledData, TrainingData, data_summary

__all__ = ["Participant"]


class Participant:
    """A dispatcher on ``transport`` with the client half of every algorithm registered.

    ``halves`` are the algorithms' client halves to serve (``edge_client.algorithms.CLIENT_HALVES``
    by default); each is reachable by its capability name, e.g. ``participant.halves["fedforest"]``.
    """

    def __init__(
        self, transport: Transport, data: TrainingData, *, halves: tuple[type[ClientHalf], ...] = CLIENT_HALVES
    ) -> None:
        self.transport = transport
        #: Every handler and both algorithms read a job's data from here: one snapshot per job.
        self.snapshots = JobSnapshots(data)
        self.dispatcher = Dispatcher(transport)
        self.dispatcher.register(DataSummaryRequest, self.on_data_summary)
        self.dispatcher.register(EvaluateRequest, self.on_evaluate)
        self.dispatcher.register(LocalBaselineRequest, self.on_local_baseline)
        self.dispatcher.register(DataShapeRequest, self.on_data_shape)
        self.dispatcher.register(FleetCountsRequest, self.on_fleet_counts)
        self.dispatcher.register(GridCountsRequest, self.on_grid_counts)
        self.secure = SecureAggregationClient(transport.client_id)
        self.secure.register(self.dispatcher)
        #: Draws the noise shares of private openings (OS entropy; :meth:`seed_noise` for tests).
        self.noise_rng = np.random.default_rng()
        self.halves: dict[str, ClientHalf] = {}
        for half_type in halves:
            half = half_type(self.snapshots, self.secure)
            half.register(self.dispatcher)
            self.halves[half.capability] = half

    def seed_noise(self, seed: int) -> None:
        """Draw every noise share and stochastic rounding of this participant from ``seed`` and
        its client id (tests compare runs draw for draw; gateways seeded alike still draw
        independent noise; a gateway keeps drawing from OS entropy)."""
        me = zlib.crc32(self.secure.client_id.encode())
        self.noise_rng = np.random.default_rng([seed, me, 0])
        for i, half in enumerate(self.halves.values(), start=1):
            if hasattr(half, "noise_rng"):
                half.noise_rng = np.random.default_rng([seed, me, i])

    @property
    def capabilities(self) -> tuple[str, ...]:
        """Announced in the gateway's presence: the generic services, then each client half."""
        return ("ping", "evaluate", "secure_aggregation", *self.halves)

    def _data(self, message: Message, feature_set_version: str, *, split: str = "train") -> LabelledData:
        """The snapshot of the job ``message`` belongs to (taken at the job's first request)."""
        return self.snapshots.get(message.envelope.job, feature_set_version, split=split)

    def on_data_summary(self, message: Message) -> DataSummary:
        """Every job opens with this: additive statistics of the labelled snapshot."""
        body: DataSummaryRequest = message.body
        return data_summary(self._data(message, body.feature_set_version), regression=body.regression)

    def on_data_shape(self, message: Message) -> DataShape:
        """A private job's opening: width, feature names and (unless fixed by the job) label set.

        As a job's survey it first refuses (``missing_capability``) when the job needs a capability
        this participant lacks; as a server job's survey it also sets the job's data rules
        (``DataShapeRequest``): its time range, and a refusal below ``min_labelled`` labelled
        windows in it."""
        body: DataShapeRequest = message.body
        job = message.envelope.job
        lacking = [c for c in body.capabilities if c not in self.capabilities]
        if lacking:
            raise RequestRejected(
                "missing_capability",
                f"{self.secure.client_id} does not serve {', '.join(lacking)} "
                f"(it serves {', '.join(self.capabilities)})",
            )
        if body.time_range is not None:
            self.snapshots.restrict(job, body.time_range)
        shape = data_shape(self._data(message, body.feature_set_version), labels=body.labels)
        if body.min_labelled and self.snapshots.count(job, body.feature_set_version) < body.min_labelled:
            where = " in the job's time range" if body.time_range is not None else ""
            raise RequestRejected("too_few_labelled_windows", f"fewer than {body.min_labelled} labelled windows{where}")
        return shape

    def on_fleet_counts(self, message: Message) -> FleetSumReply:
        body: FleetCountsRequest = message.body
        vector = with_noise(
            count_vector(self._data(message, body.feature_set_version), body), body.noise, self.noise_rng
        )
        return FleetSumReply(self.secure.protect(message, vector, body.secure, body.word_bits))

    def on_grid_counts(self, message: Message) -> FleetSumReply:
        body: GridCountsRequest = message.body
        vector = with_noise(
            grid_vector(self._data(message, body.feature_set_version), body), body.noise, self.noise_rng
        )
        return FleetSumReply(self.secure.protect(message, vector, body.secure, body.word_bits))

    def on_evaluate(self, message: Message) -> EvaluationReply:
        """Score a model on local labelled windows (held-out by default); counts only."""
        body: EvaluateRequest = message.body
        model = load_model(body.model)
        return evaluate_model(model, self._data(message, body.feature_set_version, split=body.split), body)

    def on_local_baseline(self, message: Message) -> EvaluationReply:
        """Train a CART on local training windows alone, score it on the held-out ones; counts only."""
        body: LocalBaselineRequest = message.body
        return local_baseline(
            self._data(message, body.feature_set_version),
            self._data(message, body.feature_set_version, split="holdout"),
            body,
        )

    def start(self) -> None:
        """Subscribe to the inbox and fleet topics (after every handler is registered)."""
        self.dispatcher.start()
