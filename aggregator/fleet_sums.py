"""How a private job's server half adds up the gateways' vectors: in the clear, or under secure
aggregation so that it decodes only the fleet's sum.

:class:`FleetSummer` is the one place the algorithms' server halves get sums from. With
``secure=True`` it sets the job up once (public keys, key confirmations routed between
neighbours: ``shared.protocol.messages.secure_aggregation``), then every :meth:`FleetSummer.ask`
is two rounds: the algorithm's request (clients answer with masked vectors) and ``secagg.unmask``
(the survivors' shares that remove the masks). Either way the result is the same ``uint64``
vector -- sums mod 2^64 of the same integers -- so masked == unmasked bit for bit.

Memory: each vector is added to its sum's running total as its reply arrives
(:class:`RunningSum`, called by the round engine on the transport's thread), and the reply is
kept without it; under secure aggregation the masks are removed from that total, never from a
client's vector. So the server holds one full-length vector per open sum (plus, while it
unmasks, one expanded mask at a time), whatever the number of clients.

Dropouts: a client that does not deliver its masked vector is *dropped* for that sum (the
survivors' pair seeds with it, which are per round, are reconstructed from shares); it takes
part in the next sum as usual. A client that drops between masking and unmasking stays in the
sum (its self-mask seed is reconstructed from its neighbours' shares).

With merge workers (the job's engine made with ``merge_workers=True``) the replies reach
:meth:`FleetSummer.ask` without their vectors, and the sum arrives already added up by the
workers (:mod:`aggregator.merge_workers`); the same checks apply to every reply, and as the sums
are over the integers mod 2^64 the total is the same bit for bit.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.protocol.messages import Ack
from shared.protocol.messages.secure_aggregation import (
    MaskedVector,
    SecAggConfirmations,
    SecAggConfirmRequest,
    SecAggJoinRequest,
    SecAggKeysRequest,
    SecAggPublicKeys,
    SecAggUnmaskReply,
    SecAggUnmaskRequest,
    SecureRound,
    PublicKeyPair,
    masked_vector_field,
    widen,
)
from shared.secure_aggregation import (
    MaliciousGateway,
    MaskedInput,
    PublicKeys,
    SecAggConfig,
    SecAggServer,
    SecureAggregationError,
    UnmaskShares,
)

from .jobs import FederatedJob, TrainingError

log = logging.getLogger(__name__)

__all__ = ["FleetSum", "FleetSummer", "RunningSum", "without_vector"]


@dataclass(frozen=True, eq=False)
class FleetSum:
    """The sum (uint64, mod 2^64) of the ``contributors``' vectors, and the reply bodies they
    came in (for the algorithms' bookkeeping fields, e.g. the trees a client's margins hold)."""

    total: np.ndarray
    contributors: tuple[str, ...]
    replies: dict[str, Any] = field(default_factory=dict)


def without_vector(body: Any) -> tuple[Any, np.ndarray] | None:
    """``(stub, values)``: a reply body with its fleet-sum vector's values emptied (same dtype,
    shares kept), and the values; None for a body that holds no fleet-sum vector.

    >>> from shared.protocol.messages.fleet_sums import FleetSumReply
    >>> stub, values = without_vector(FleetSumReply(MaskedVector(np.arange(3, dtype=np.uint32))))
    >>> stub.sums.values.shape, values.tolist()
    ((0,), [0, 1, 2])
    """
    name = masked_vector_field(body)
    if name is None:
        return None
    vector: MaskedVector = getattr(body, name)
    empty = MaskedVector(vector.values[:0].copy(), dict(vector.shares))
    return dataclasses.replace(body, **{name: empty}), vector.values


@dataclass
class RunningSum:
    """An open sum in one process: :meth:`take` checks each reply as it arrives, adds its vector
    to ``total`` (uint64, mod 2^64; masked vectors add the same way, their masks cancel at
    unmasking) and hands back the reply without the vector, so the server holds one vector per
    open sum, not one per client. ``rejected``: the clients whose reply failed a check, with why.

    >>> from shared.protocol.messages.fleet_sums import FleetSumReply
    >>> running = RunningSum(3, 32, lambda r: r.sums)
    >>> for client, values in [("a", [1, 2, 3]), ("b", [4, 5, 2**32 - 1])]:
    ...     kept = running.take(client, FleetSumReply(MaskedVector(np.array(values, np.uint32))))
    >>> running.total.tolist(), running.contributors, kept.sums.values.shape
    ([5, 7, 4294967298], ['a', 'b'], (0,))
    """

    length: int
    word_bits: int
    vector: Callable[[Any], MaskedVector]
    check: Callable[[str, Any], str | None] | None = None
    total: np.ndarray = field(init=False)
    contributors: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.total = np.zeros(self.length, np.uint64)

    def reason(self, client: str, reply: Any) -> str | None:
        """Why ``client``'s reply cannot be added (None: it can)."""
        values = self.vector(reply).values
        if values.shape[0] != self.length:
            return f"a vector of {values.shape[0]} entries, the round needs {self.length}"
        if values.dtype.itemsize * 8 != self.word_bits:
            return f"{values.dtype.itemsize * 8}-bit words, the round needs {self.word_bits}"
        return self.check(client, reply) if self.check else None

    def take(self, client: str, reply: Any) -> Any:
        """Add ``client``'s reply to the sum (or record why not); the reply without its vector."""
        reason = self.reason(client, reply)
        if reason:
            self.rejected[client] = reason
        else:
            np.add(self.total, self.vector(reply).values.astype(np.uint64, copy=False), out=self.total)
            self.contributors.append(client)
        split = without_vector(reply)
        return reply if split is None else split[0]


class FleetSummer:
    """Sums of the job's clients' vectors, plain or secure (see the module docstring)."""

    def __init__(
        self, job: FederatedJob, *, secure: bool, degree: int | None = None, threshold: int | None = None
    ) -> None:
        self.job = job
        self.secure = secure
        self.config = SecAggConfig(degree=degree, threshold=threshold)
        self.active: tuple[str, ...] = ()
        self.server: SecAggServer | None = None
        self.expelled: set[str] = set()

    def start(self, clients: Sequence[str]) -> tuple[str, ...]:
        """Prepare the job's sums over ``clients``; returns those that can take part (secure:
        the ones that completed the key setup)."""
        clients = tuple(sorted(clients))
        if not self.secure:
            self.active = clients
            return clients
        keys = self.job.ask(SecAggKeysRequest(), clients, SecAggPublicKeys)
        try:
            self.server = SecAggServer(self.config, list(keys), self.job.job_id.encode())
            self.server.set_public_keys(
                {c: PublicKeys(cipher=r.keys.cipher, mask=r.keys.mask) for c, r in keys.items()}
            )
        except SecureAggregationError as exc:
            raise TrainingError(
                f"secure aggregation cannot start: {exc} (with fewer, one gateway's sums follow from "
                "the total and the other's; train on more gateways, or turn it off: "
                "secure_aggregation=False, wheelfed train --no-secure-aggregation)"
            ) from exc
        neighbours = self.server.neighbours
        requests = {}
        for c in keys:
            roster = {n: PublicKeyPair(cipher=k.cipher, mask=k.mask) for n, k in self.server.roster_for(c).items()}
            requests[c] = SecAggJoinRequest(roster, tuple(neighbours[c]), self.server.threshold)
        joined = self.job.ask(requests, list(requests), SecAggConfirmations)
        routed = self.server.route({c: r.confirmations for c, r in joined.items()})
        confirms = {c: SecAggConfirmRequest(routed.get(c, {})) for c in joined}
        acked = self.job.ask(confirms, list(confirms), Ack)
        self.active = tuple(sorted(acked))
        missing = sorted(set(clients) - set(self.active))
        if missing:
            log.warning("clients left out of secure aggregation", extra={"job": self.job.job_id, "clients": missing})
        if len(self.active) < self.server.threshold + 1:
            raise TrainingError(
                f"secure aggregation needs at least {self.server.threshold + 1} clients, "
                f"{len(self.active)} completed the key setup"
            )
        return self.active

    def _secagg(self) -> SecAggServer:
        """The secure aggregation server :meth:`start` set up."""
        if self.server is None:
            raise RuntimeError(f"job {self.job.job_id}: secure sums asked for before FleetSummer.start()")
        return self.server

    def secure_round(self, client: str, selected: Sequence[str]) -> SecureRound | None:
        """What ``client``'s request must say about masking when ``selected`` take part."""
        if not self.secure:
            return None
        return SecureRound(self._secagg().participants(client, selected))

    def ask(
        self,
        requests: Mapping[str, Any],
        expect: type,
        vector: Callable[[Any], MaskedVector],
        length: int,
        check: Callable[[str, Any], str | None] | None = None,
        word_bits: int = 64,
    ) -> FleetSum:
        """Send ``requests`` (one body per client, built with :meth:`secure_round`), check the
        replies (``check(client, reply) -> reason | None``; a rejected reply counts as a
        dropout), and return the sum of the accepted clients' vectors of ``length`` entries
        (``word_bits``: their words' width; the total comes back as uint64 words whose int64
        view is the signed sum). Each vector is added to the sum as its reply arrives and the
        reply is kept without it (:class:`RunningSum`): the server holds one running total per
        open sum, whatever the number of clients.

        A client caught breaking secure aggregation (``MaliciousGateway``: a share that does
        not match its dealer's commitment, bundles its neighbours cannot open, bundles for
        clients that are not its neighbours) is rejected with the reason, left out of
        :attr:`active` and never asked again in this job; if the sum cannot be unmasked without
        it, the others are asked again and it counts as dropped out."""
        selected = sorted(requests)
        while True:
            asked = {c: r for c, r in requests.items() if c not in self.expelled}
            try:
                return self._ask(asked, selected, expect, vector, length, check, word_bits)
            except MaliciousGateway as exc:
                self._expel(exc.culprits)

    def _expel(self, culprits: Mapping[str, str]) -> None:
        """Reject ``culprits`` (client -> what it did) and leave them out of the job's later sums."""
        for client in sorted(culprits):
            self.job.reject(client, f"secure aggregation: {culprits[client]}")
        self.expelled.update(culprits)
        self.active = tuple(c for c in self.active if c not in self.expelled)

    def leave_out(self, clients: set[str] | frozenset[str]) -> None:
        """Leave ``clients`` (already rejected with their reason, e.g. a vector that broke a
        range check) out of the job's later sums, as :meth:`ask` does with a gateway caught
        breaking secure aggregation."""
        self.expelled.update(clients)
        self.active = tuple(c for c in self.active if c not in self.expelled)

    def _ask(
        self,
        requests: Mapping[str, Any],
        selected: list[str],
        expect: type,
        vector: Callable[[Any], MaskedVector],
        length: int,
        check: Callable[[str, Any], str | None] | None,
        word_bits: int,
    ) -> FleetSum:
        """:meth:`ask` of ``requests``' clients once; ``selected``: the clients the requests'
        secure rounds name (those not asked count as dropped out)."""
        round_no = self.job.rounds + 1
        merged = getattr(self.job.engine, "merged", None)
        if merged is not None:  # the merge workers add the vectors up; the replies come without them
            from .merge_workers import SumExpectation

            merged.open_sum(self.job.job_id, round_no, SumExpectation((expect,), length, word_bits, check))
            try:
                replies = self.job.ask(dict(requests), sorted(requests), expect)
            finally:
                collected = merged.close_sum(self.job.job_id, round_no)
        else:
            collected = RunningSum(length, word_bits, vector, check)
            replies = self.job.ask(dict(requests), sorted(requests), expect, fold=collected.take)
        for client in sorted(collected.rejected):
            self.job.reject(client, collected.rejected[client])
        accepted = {c: r for c, r in replies.items() if c not in collected.rejected}
        if not accepted:
            raise TrainingError(f"round {round_no}: no usable replies from {selected}")
        if sorted(accepted) != sorted(collected.contributors):  # the engine files what the sum took in
            raise TrainingError(
                f"round {round_no}: the sum covers {sorted(collected.contributors)}, "
                f"the replies are from {sorted(accepted)}"
            )
        if not self.secure:
            return FleetSum(widen(collected.total, word_bits), tuple(sorted(accepted)), accepted)
        result = self._unmask(round_no, selected, accepted, vector, length, collected.total)
        return FleetSum(widen(result.total, word_bits), result.contributors, result.replies)

    def _unmask(
        self,
        round_no: int,
        selected: list[str],
        accepted: dict[str, Any],
        vector: Callable[[Any], MaskedVector],
        length: int,
        summed: np.ndarray,
    ) -> FleetSum:
        """Unmask ``summed``, the sum of ``accepted``'s masked vectors (the replies' own vectors
        are empty by now): the server removes the masks from zeros and adds ``summed``, the same
        total mod 2^64 as removing them from the sum of the vectors."""
        label = f"{self.job.job_id}/{round_no}"
        zeros = np.broadcast_to(np.zeros(1, np.uint64), (length,))  # no memory per client
        masked = {c: MaskedInput(zeros, dict(vector(r).shares)) for c, r in accepted.items()}
        dropped = [c for c in selected if c not in accepted]
        try:
            plans = self._secagg().unmask_request(label.encode(), masked, selected)
        except MaliciousGateway:
            raise
        except SecureAggregationError as exc:
            raise TrainingError(f"round {round_no}: too many clients dropped out to unmask the sum: {exc}") from exc
        requests = {
            c: SecAggUnmaskRequest(label, tuple(p.survivors), tuple(p.dropped), dict(p.shares))
            for c, p in plans.items()
        }
        answers = self.job.ask(requests, list(requests), SecAggUnmaskReply)
        shares, unusable = {}, {}
        for c, a in answers.items():
            try:
                shares[c] = UnmaskShares(self_mask=a.self_mask, pair_seeds=a.pair_seeds, complaints=a.complaints)
            except SecureAggregationError as exc:
                unusable[c] = f"sent an unusable unmask reply: {exc}"
        try:
            result = self._secagg().unmask_sum(label.encode(), masked, shares, length)
        except MaliciousGateway as exc:
            raise MaliciousGateway({**unusable, **exc.culprits}) from None
        except SecureAggregationError as exc:
            if unusable:
                raise MaliciousGateway(unusable) from None
            raise TrainingError(f"round {round_no}: the fleet sum cannot be unmasked: {exc}") from exc
        self._expel({**unusable, **result.culprits})
        total = result.total
        np.add(total, summed.astype(np.uint64, copy=False), out=total)  # wraps mod 2^64; widen keeps the low bits
        if dropped:
            log.warning(
                "clients dropped out of a secure sum",
                extra={"job": self.job.job_id, "round": round_no, "clients": dropped},
            )
        return FleetSum(total, tuple(sorted(accepted)), accepted)
