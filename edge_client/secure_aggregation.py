"""The gateway's half of secure aggregation (``shared.secure_aggregation``): key pairs per job,
sealed key shares for its neighbours, masked vectors, and the unmasking shares.

A job's keys live in memory only: a gateway that restarts mid-job cannot mask again for that
job (it answers ``resync``, and the server counts it as dropped in each round); the next job
sets up fresh keys. Refusals of the protocol's safety checks (a client both surviving
and dropped, too few survivors, a second unmasking of the same round, ...) are answered with
``secure_aggregation`` errors and reveal nothing. A neighbour's share bundle that does not open
or match the digests it committed to is not a refusal: the reply names that neighbour in
``complaints`` with the key of that one bundle as evidence (the server opens it and names
whoever lied), and answers for the others.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from shared.protocol.envelope import Message
from shared.protocol.messages.secure_aggregation import (
    MaskedVector,
    PublicKeyPair,
    SecAggConfirmations,
    SecAggConfirmRequest,
    SecAggJoinRequest,
    SecAggKeysRequest,
    SecAggPublicKeys,
    SecAggUnmaskReply,
    SecAggUnmaskRequest,
    SecureRound,
    narrow,
    round_label,
)
from shared.secure_aggregation import PublicKeys, SecAggClient, SecureAggregationError

from .dispatcher import Dispatcher, RequestRejected

log = logging.getLogger(__name__)

__all__ = ["SecureAggregationClient"]

#: Jobs whose keys a gateway keeps at once (oldest forgotten first), as the algorithms' states.
MAX_JOBS = 4


class SecureAggregationClient:
    """Answers ``secagg.*`` requests and masks the algorithms' vectors (:meth:`protect`)."""

    def __init__(self, client_id: str, *, max_jobs: int = MAX_JOBS) -> None:
        self.client_id = client_id
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[str, SecAggClient] = OrderedDict()

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(SecAggKeysRequest, self.on_keys)
        dispatcher.register(SecAggJoinRequest, self.on_join)
        dispatcher.register(SecAggConfirmRequest, self.on_confirm)
        dispatcher.register(SecAggUnmaskRequest, self.on_unmask)

    def _state(self, job: str) -> SecAggClient:
        state = self._jobs.get(job)
        if state is None:
            raise RequestRejected("resync", "holds no secure-aggregation keys for this job (restarted?)")
        self._jobs.move_to_end(job)
        return state

    # -- setup ---------------------------------------------------------------------------------

    def on_keys(self, message: Message) -> SecAggPublicKeys:
        state = SecAggClient(self.client_id)
        self._jobs[message.envelope.job] = state
        while len(self._jobs) > self.max_jobs:
            self._jobs.popitem(last=False)
        keys = state.public_keys()
        return SecAggPublicKeys(PublicKeyPair(cipher=keys.cipher, mask=keys.mask))

    def on_join(self, message: Message) -> SecAggConfirmations:
        body: SecAggJoinRequest = message.body
        state = self._state(message.envelope.job)
        roster = {c: PublicKeys(cipher=k.cipher, mask=k.mask) for c, k in body.roster.items()}
        with _refusals():
            blobs = state.join(roster, body.neighbours, body.threshold, message.envelope.job.encode())
        return SecAggConfirmations(blobs)

    def on_confirm(self, message: Message) -> None:
        body: SecAggConfirmRequest = message.body
        with _refusals():
            self._state(message.envelope.job).confirm_keys(body.confirmations)

    # -- per aggregation -----------------------------------------------------------------------

    def protect(
        self, message: Message, vector: np.ndarray, secure: SecureRound | None, word_bits: int = 64
    ) -> MaskedVector:
        """``vector`` (int64) as it goes on the wire: plain when the request is not secure, else
        masked for this round (``round_label`` of the request's job and round); in 32-bit words
        (sums mod 2^32) when ``word_bits`` is 32."""
        values = np.ascontiguousarray(vector, dtype=np.int64).view(np.uint64)
        if secure is None:
            return MaskedVector(narrow(values, word_bits))
        state = self._state(message.envelope.job)
        label = round_label(message.envelope.job, message.envelope.round)
        with _refusals():
            masked = state.mask(label, values, secure.neighbours)
        return MaskedVector(narrow(np.array(masked.masked), word_bits), dict(masked.shares))

    def on_unmask(self, message: Message) -> SecAggUnmaskReply:
        body: SecAggUnmaskRequest = message.body
        state = self._state(message.envelope.job)
        with _refusals():
            shares = state.unmask(body.label.encode(), body.survivors, body.dropped, body.shares)
        if shares.complaints:
            log.warning(
                "neighbours' share bundles did not open or match their digests",
                extra={"job": message.envelope.job, "label": body.label, "clients": list(shares.complaints)},
            )
        return SecAggUnmaskReply(
            self_mask=dict(shares.self_mask),
            pair_seeds={v: dict(by_peer) for v, by_peer in shares.pair_seeds.items()},
            complaints=dict(shares.complaints),
        )


@contextmanager
def _refusals() -> Iterator[None]:
    """Turns the protocol's refusals into ``secure_aggregation`` error replies."""
    try:
        yield
    except SecureAggregationError as exc:
        log.warning("secure-aggregation request refused", extra={"reason": str(exc)})
        raise RequestRejected("secure_aggregation", str(exc)) from None
