"""A lying gateway in simulation: one participant's handler changed so that the vector it adds to
a fleet sum is not its honest one (for tests and ``benchmarks/bench_poisoning.py``), or so that
it deals bad share bundles (:func:`change_bundles`) or complains about good ones
(:func:`change_received_bundles`).

:func:`lie_in_vectors` wraps a participant's handler of one request type. The liar computes its
honest plain vector (the request with its ``secure`` field emptied: handlers are idempotent,
a model delta is never applied twice), lets ``lie(plain, request)`` rewrite it, and adds the
difference to the reply it would have sent. Masks add mod 2^word_bits, so under secure
aggregation the unmasked sum then holds the lie exactly as a plain sum would: the liar masks
correctly and only its input is false -- what secure aggregation cannot see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from shared.protocol.messages.secure_aggregation import WORD_TYPES, SecAggUnmaskRequest, masked_vector_field

from .simulate import Simulation

__all__ = ["Lie", "Recorded", "change_bundles", "change_received_bundles", "lie_in_vectors"]

#: ``lie(plain int64 vector, request body) -> the int64 vector the liar claims``.
Lie = Callable[[np.ndarray, Any], np.ndarray]


def lie_in_vectors(sim: Simulation, client: str, request_type: type, lie: Lie) -> None:
    """Make ``client`` of ``sim`` answer ``request_type`` with ``lie`` of its honest vector.

    Parameters
    ----------
    sim
        The simulation whose participant lies.
    client
        The liar's id.
    request_type
        The request whose reply carries a fleet-sum vector (e.g. ``XgbHistogramRequest``).
    lie
        Rewrites the liar's plain int64 vector, given the request.
    """
    handlers = sim.participants[client].dispatcher._handlers
    original = handlers[request_type]

    def handler(message: Any) -> Any:
        body = message.body
        reply = original(message)
        name = masked_vector_field(reply)
        if name is None or not dataclasses.is_dataclass(reply) or isinstance(reply, type):
            return reply  # not a reply with a fleet-sum vector (those are dataclass instances)
        vector = getattr(reply, name)
        if getattr(body, "secure", None) is not None:
            plain_reply = original(dataclasses.replace(message, body=dataclasses.replace(body, secure=None)))
            plain_words = getattr(plain_reply, name).values
        else:
            plain_words = vector.values
        unsigned, signed = WORD_TYPES[plain_words.dtype.itemsize * 8]
        plain = plain_words.view(signed).astype(np.int64)
        delta = (np.asarray(lie(plain.copy(), body), dtype=np.int64) - plain).astype(unsigned)
        values = (vector.values.astype(unsigned) + delta).astype(unsigned)  # wraps mod 2^word_bits
        return dataclasses.replace(reply, **{name: dataclasses.replace(vector, values=values)})

    handlers[request_type] = handler


@dataclasses.dataclass
class Recorded:
    """An algorithm that keeps the job it ran, for the job's record of rejected replies (who was
    caught lying); otherwise it trains as ``algorithm`` does."""

    algorithm: Any
    job: Any = None

    @property
    def name(self) -> str:
        return self.algorithm.name

    def fit(self, job, *, seed: int = 0):
        self.job = job
        return self.algorithm.fit(job, seed=seed)


def change_bundles(sim: Simulation, client: str, change: Callable[[int, Any, dict], dict]) -> list[dict]:
    """Make ``client`` of ``sim`` send ``change(n, envelope, shares)`` as the sealed share bundles
    of its ``n``-th masked vector (n = 0, 1, ...) instead of its own; returns the honest bundles
    it computed, in order (``change`` may also drop the client's connection)."""
    handlers = sim.participants[client].dispatcher._handlers
    sent: list[dict] = []

    def wrap(original):
        def handler(message):
            body = original(message)
            name = masked_vector_field(body)
            if name is None or not getattr(body, name).shares:
                return body
            vector = getattr(body, name)
            shares = change(len(sent), message.envelope, dict(vector.shares))
            sent.append(dict(vector.shares))
            return dataclasses.replace(body, **{name: dataclasses.replace(vector, shares=shares)})

        return handler

    for kind, original in list(handlers.items()):
        handlers[kind] = wrap(original)
    return sent


def change_received_bundles(sim: Simulation, client: str, change: Callable[[dict], dict]) -> None:
    """Make ``client`` of ``sim`` answer each unmask request as if the sealed share bundles routed
    to it were ``change(shares)`` (dealer -> committed bundle): given a good bundle altered, it
    complains about that honest dealer with the evidence an honest holder would send."""
    handlers = sim.participants[client].dispatcher._handlers
    original = handlers[SecAggUnmaskRequest]

    def handler(message: Any) -> Any:
        body = dataclasses.replace(message.body, shares=change(dict(message.body.shares)))
        return original(dataclasses.replace(message, body=body))

    handlers[SecAggUnmaskRequest] = handler
