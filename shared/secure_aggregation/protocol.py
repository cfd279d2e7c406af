"""The secure-aggregation state machines of a gateway (``SecAggClient``) and the server (``SecAggServer``).

Pure protocol logic, no I/O: the messaging layer carries ``PublicKeys``, the setup (public keys
of the neighbours, neighbours, threshold), key confirmations, ``MaskedInput``, ``UnmaskRequest``
and ``UnmaskShares``.

Flow (one key setup per training job, then any number of aggregations, each with its own label)::

    setup    gateway -> server : client.public_keys()
             server            : server = SecAggServer(config, clients, job); server.set_public_keys(keys)
             server -> gateway : server.roster_for(c), server.neighbours[c], server.threshold
             gateway -> server : client.join(roster, neighbours, threshold, job)  -> {neighbour: blob}
             server -> gateway : server.route(blobs_by_sender)[c]                 -> {sender: blob}
             gateway           : client.confirm_keys(blobs)
    per label (selected: the clients asked to take part)
             server -> gateway : server.participants(c, selected)
             gateway -> server : client.mask(label, vector, participants)          -> MaskedInput
             server -> gateway : server.unmask_request(label, masked, selected)[c] -> UnmaskRequest r
             gateway -> server : client.unmask(label, r.survivors, r.dropped, r.shares) -> UnmaskShares
             server            : server.unmask_sum(label, masked, replies, length) -> SecureSum (sum, culprits)

Why dropout recovery reveals *per-label pair seeds* and never a dropped gateway's mask key:
with one key setup per job, the pairwise masks of every aggregation derive from the same
X25519 mask key ``s_u``. Rebuilding ``s_u`` when u drops in aggregation 12 would also give the
server u's pairwise masks of aggregations 1-11, in which it also rebuilt u's self-masks (u
survived them): it would learn every earlier vector of u, and excluding u afterwards would not
undo that. So, as in Flamingo (Ma et al., S&P 2023), the long-term pair secret is never
revealed: each aggregation derives its own ``seed(u, v) = HKDF(pair_secret(u, v), job, label)``
and at masking time each gateway Shamir-shares its self-mask seed *and* its pair seeds among
the neighbours taking part. If u drops, the neighbours of each surviving neighbour v reveal
shares of ``seed(v, u)`` for this label only; u may take part again in the next aggregation.
The setup round therefore carries no shares, only key confirmations: each pair of neighbours
proves it derived the same keys, so a wrong roster fails at setup instead of silently
corrupting every sum (masks that do not cancel).

Per aggregation a gateway reveals, for each client, shares of its self-mask seed (if it
survived) or of pair seeds with it (if it dropped), never both, and answers one unmask request
per label. Vectors are uint64 ring vectors (``ring``: fixed-point integers in two's complement).

Lying gateways: every share travels with its dealer's commitment (``bundle.CommittedBundle``).
The server checks each revealed share against it and discards a reply that does not match,
naming its sender; a holder checks its shares before revealing them, so an honest one is never
blamed for its dealer's bad shares. A bundle that does not open or match is a complaint, not a
refusal, and every complaint carries its evidence: the key of that one bundle (each bundle has
its own, HKDF of the pair's cipher key bound to job, label, dealer and holder, and its nonce
commits to it). If the nonce commits to the revealed key, the server opens the bundle as the
holder did and names whoever lied, on a single complaint: the dealer if the bundle does not
open or match its digests, else the complainer. The key opens nothing else: not the pair's
cipher key (other labels' bundles, the other direction's, the key confirmations), not the pair
secret (the other key pair), and the one bundle holds one Shamir share of each of the dealer's
secrets, nothing with ``threshold >= 2``. A key the nonce does not commit to is one word
against another (only the pair knows its key): such a dealer is named only if more than
``k - threshold`` of its ``k`` holders dispute it. A named gateway's masked vector cannot be
left in the sum, so the caller asks again without it (it then counts as dropped).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from .bundle import CommittedBundle, ShareBundle, bundle_key
from .contexts import (
    check_label,
    cipher_key_info,
    confirmation_associated_data,
    key_confirmation_info,
    pair_mask_info,
    pair_secret_info,
    pair_seed_info,
    self_mask_info,
    share_x,
)
from .encryption import open_sealed, seal
from .errors import MaliciousGateway, SecureAggregationError
from .ring import ring_sum
from .graph import default_degree, default_threshold, neighbourhoods
from .keys import DERIVED_KEY_BYTES, ClientKeyPairs, PublicKeys, agree, derive_key
from .masks import expand_mask, pairwise_mask
from .messages import MaskedInput, UnmaskRequest, UnmaskShares
from .shamir import combine_shares, split_secret

__all__ = ["SEED_BYTES", "SecAggClient", "SecAggConfig", "SecAggServer", "SecureSum"]

#: Size of a self-mask seed and of a pair seed.
SEED_BYTES = 32
_MIN_CLIENTS = 3


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_client_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise SecureAggregationError(f"{what} must be a non-empty client id string, got {value!r}")
    return value


def _distinct_ids(values: Iterable[str], what: str) -> tuple[str, ...]:
    if isinstance(values, (str, bytes)):
        raise SecureAggregationError(f"{what} must be a sequence of client ids, not a single string")
    ids = tuple(_check_client_id(v, what) for v in values)
    if len(set(ids)) != len(ids):
        raise SecureAggregationError(f"{what} lists a client twice")
    return ids


def _check_ring_vector(vector: object, what: str) -> np.ndarray:
    if not isinstance(vector, np.ndarray) or vector.dtype != np.uint64 or vector.ndim != 1:
        raise SecureAggregationError(
            f"{what} must be a 1-D numpy uint64 ring vector (fixed-point integers viewed as uint64)"
        )
    return vector


@dataclass(frozen=True)
class SecAggConfig:
    """How the server builds the job's graph.

    ``degree``: neighbours per gateway (rounded up to even); ``None`` = ``default_degree(n)``
    (the complete graph up to 10 gateways). ``threshold``: shares needed to rebuild a seed;
    ``None`` = ``default_threshold(degree)`` (a majority of the neighbours). Fewer than
    ``threshold`` of any gateway's neighbours may collude with the server; up to
    ``degree - threshold`` of a surviving gateway's neighbours may drop or fail to answer.
    """

    degree: int | None = None
    threshold: int | None = None

    def __post_init__(self) -> None:
        if self.degree is not None and not (_positive_int(self.degree) and self.degree >= 2):
            raise SecureAggregationError(f"SecAggConfig.degree must be an int >= 2 or None, got {self.degree!r}")
        if self.threshold is not None and not (_positive_int(self.threshold) and self.threshold >= 2):
            raise SecureAggregationError(f"SecAggConfig.threshold must be an int >= 2 or None, got {self.threshold!r}")


@dataclass(frozen=True, repr=False)
class _JobState:
    """What a gateway knows after ``join``: its neighbours and the keys it shares with each."""

    job: bytes
    neighbours: tuple[str, ...]
    threshold: int
    cipher_keys: Mapping[str, bytes]  # neighbour -> AES-GCM key for sealed blobs
    pair_secrets: Mapping[str, bytes]  # neighbour -> per-job pair secret (never revealed)


class SecAggClient:
    """A gateway's side of secure aggregation for one training job (create one per job).

    The private keys are generated at construction and never leave the object; the object
    remembers which labels it masked and unmasked and refuses to do either twice (resending a
    reply after a lost message is the messaging layer's job: cache the returned value).
    """

    def __init__(self, client_id: str, keys: ClientKeyPairs | None = None) -> None:
        self._id = _check_client_id(client_id, "client_id")
        self._keys = keys if keys is not None else ClientKeyPairs.generate()
        self._job: _JobState | None = None
        self._confirmed: set[str] = set()
        self._masked: set[bytes] = set()
        self._unmasked: set[bytes] = set()

    @property
    def client_id(self) -> str:
        return self._id

    @property
    def confirmed_neighbours(self) -> tuple[str, ...]:
        """Neighbours whose key confirmation arrived and matched (the ones it may mask with)."""
        return tuple(sorted(self._confirmed))

    def public_keys(self) -> PublicKeys:
        return self._keys.public_keys()

    def __repr__(self) -> str:
        return f"SecAggClient({self._id!r}, joined={self._job is not None})"

    # --- setup ---------------------------------------------------------------------------------
    def join(
        self, roster: Mapping[str, PublicKeys], neighbours: Sequence[str], threshold: int, job: bytes
    ) -> dict[str, bytes]:
        """Enter a job: derive the keys shared with each neighbour and seal a key confirmation for it.

        Parameters
        ----------
        roster
            Public keys of at least this client and its neighbours (the full roster is fine);
            this client's own entry must be its keys.
        neighbours
            The clients this one masks with and shares to (``server.neighbours[id]``).
        threshold
            Shares needed to rebuild a seed; ``2 <= threshold <= len(neighbours)``.
        job
            The job's label (1 to 256 bytes), bound into every derived key.

        Returns
        -------
        dict[str, bytes]
            Neighbour -> sealed key confirmation (28 + 32 bytes), for ``server.route``.

        Raises
        ------
        SecureAggregationError
            Already joined; own keys missing or different; neighbours containing itself, a
            client without keys or a repeat; a threshold outside ``[2, len(neighbours)]``; a
            low-order public key.
        """
        if self._job is not None:
            raise SecureAggregationError(f"{self._id} already joined a job; create a new SecAggClient per job")
        job = check_label(job, "job")
        roster = dict(roster)
        for client, keys in roster.items():
            _check_client_id(client, "roster key")
            if not isinstance(keys, PublicKeys):
                raise SecureAggregationError(f"roster[{client!r}] must be PublicKeys, got {type(keys).__name__}")
        if roster.get(self._id) != self.public_keys():
            raise SecureAggregationError(f"the roster does not hold {self._id}'s own public keys")
        neighbours = _distinct_ids(neighbours, "neighbours")
        if self._id in neighbours:
            raise SecureAggregationError(f"{self._id} cannot be its own neighbour")
        unknown = sorted(set(neighbours) - set(roster))
        if unknown:
            raise SecureAggregationError(f"neighbours {unknown} have no public keys in the roster")
        if len({share_x(c) for c in (self._id, *neighbours)}) != len(neighbours) + 1:
            raise SecureAggregationError("two ids of the neighbourhood hash to the same Shamir x-coordinate")
        if not (_positive_int(threshold) and 2 <= threshold <= len(neighbours)):
            raise SecureAggregationError(
                f"threshold must be in [2, {len(neighbours)}] (the neighbours holding shares), got {threshold!r}"
            )
        state = _JobState(
            job=job,
            neighbours=tuple(sorted(neighbours)),
            threshold=threshold,
            cipher_keys={v: agree(self._keys.cipher_key, roster[v].cipher, cipher_key_info(job)) for v in neighbours},
            pair_secrets={v: agree(self._keys.mask_key, roster[v].mask, pair_secret_info(job)) for v in neighbours},
        )
        self._job = state
        return {
            v: seal(state.cipher_keys[v], self._confirmation(v), confirmation_associated_data(job, self._id, v))
            for v in state.neighbours
        }

    def _confirmation(self, neighbour: str) -> bytes:
        state = self._joined()
        return derive_key(state.pair_secrets[neighbour], key_confirmation_info(state.job))

    def confirm_keys(self, blobs: Mapping[str, bytes]) -> None:
        """Check the key confirmations neighbours addressed to this client (``server.route(...)[id]``).

        A confirmation opens only if both ends derived the same cipher key and matches only if
        they derived the same pair secret, i.e. if the server gave each the other's true public
        keys. May be called again with late blobs; only confirmed neighbours can take part in
        an aggregation.

        Raises
        ------
        SecureAggregationError
            (nothing is recorded) Not joined; a blob from a non-neighbour; a blob that does not
            open or does not match.
        """
        state = self._joined()
        strangers = sorted(set(blobs) - set(state.neighbours))
        if strangers:
            raise SecureAggregationError(f"key confirmations from {strangers}, which are not neighbours of {self._id}")
        for sender, blob in blobs.items():
            associated = confirmation_associated_data(state.job, sender, self._id)
            received = open_sealed(state.cipher_keys[sender], blob, associated)
            if not hmac.compare_digest(received, self._confirmation(sender)):
                raise SecureAggregationError(
                    f"{sender}'s mask key differs from the one {self._id} was given: the roster is inconsistent"
                )
        self._confirmed.update(blobs)

    def _joined(self) -> _JobState:
        if self._job is None:
            raise SecureAggregationError(f"{self._id} has not joined a job (call join first)")
        return self._job

    # --- masking -------------------------------------------------------------------------------
    def mask(self, label: bytes, vector: np.ndarray, neighbours: Sequence[str] | None = None) -> MaskedInput:
        """Mask ``vector`` for aggregation ``label`` and seal the shares each taking-part neighbour will hold.

        ``masked = vector + PRG(b) + sum_v ±PRG(seed(self, v))`` mod 2**64 over the neighbours v
        taking part, with a fresh 32-byte self-mask seed ``b``; ``b`` and every pair seed are
        Shamir-shared among those neighbours.

        Parameters
        ----------
        neighbours
            The neighbours taking part in this aggregation (``server.participants``); ``None``
            means all. Each must be confirmed, and at least ``threshold`` of them are needed
            (they are the only holders of this client's shares).

        Raises
        ------
        SecureAggregationError
            Not joined; a label already masked; a vector that is not 1-D uint64; taking-part
            neighbours that are not confirmed neighbours, or fewer than ``threshold``.
        """
        state = self._joined()
        label = check_label(label, "label")
        if label in self._masked:
            raise SecureAggregationError(
                f"{self._id} already masked a vector for label {label!r}; labels are single-use"
            )
        vector = _check_ring_vector(vector, "vector")
        taking_part = state.neighbours if neighbours is None else tuple(sorted(_distinct_ids(neighbours, "neighbours")))
        unconfirmed = sorted(set(taking_part) - self._confirmed)
        if unconfirmed:
            raise SecureAggregationError(
                f"{self._id} cannot mask with {unconfirmed}: not neighbours, or their key confirmation never arrived"
            )
        if len(taking_part) < state.threshold:
            raise SecureAggregationError(
                f"{self._id} has {len(taking_part)} neighbours taking part, {state.threshold} needed to hold its shares"
            )
        length = vector.size
        self_seed = secrets.token_bytes(SEED_BYTES)
        masked = vector + expand_mask(self_seed, length, self_mask_info(state.job, label))
        seed_info, mask_info = pair_seed_info(state.job, label), pair_mask_info(state.job, label)
        pair_seeds = {}
        for peer in taking_part:
            pair_seeds[peer] = derive_key(state.pair_secrets[peer], seed_info)
            np.add(masked, pairwise_mask(pair_seeds[peer], self._id, peer, mask_info, length), out=masked)

        holders = [share_x(w) for w in taking_part]
        self_shares = split_secret(self_seed, holders, state.threshold)
        seed_shares = {peer: split_secret(seed, holders, state.threshold) for peer, seed in pair_seeds.items()}
        sealed = {}
        for holder, x in zip(taking_part, holders):
            bundle = ShareBundle(self_shares[x], {peer: shares[x] for peer, shares in seed_shares.items()})
            key = bundle_key(state.cipher_keys[holder], state.job, label, self._id, holder)
            sealed[holder] = CommittedBundle.seal(key, state.job, label, self._id, holder, bundle).to_bytes()
        self._masked.add(label)
        return MaskedInput(masked=masked, shares=sealed)

    # --- unmasking -----------------------------------------------------------------------------
    def unmask(
        self, label: bytes, survivors: Sequence[str], dropped: Sequence[str], shares: Mapping[str, bytes]
    ) -> UnmaskShares:
        """Reveal the shares the server needs to remove the masks of ``label``, after checking the request.

        Parameters
        ----------
        survivors
            Neighbours (and possibly this client) whose masked inputs the server accepted.
        dropped
            Clients asked to take part whose inputs it did not accept, among this client's
            neighbours and its surviving neighbours' neighbours.
        shares
            Surviving neighbour -> the sealed bundle it addressed to this client for ``label``
            (``MaskedInput.shares[this client]``, routed by the server).

        Returns
        -------
        UnmaskShares
            The share of each surviving neighbour's self-mask seed, and the shares of its pair
            seeds with dropped clients. A surviving neighbour whose bundle does not open, parse
            or match the digests it committed to is named in ``complaints`` instead, with the key
            of that bundle as evidence (the server opens that one bundle and decides whom to
            blame, see ``SecAggServer.unmask_sum``).

        Raises
        ------
        SecureAggregationError
            (nothing is revealed) Not joined; ``label`` already unmasked; a client both
            surviving and dropped; a survivor that is not a neighbour; a dropped client not
            adjacent to this client or any surviving neighbour; fewer than ``threshold``
            survivors counting this client (the sum would cover too few gateways); a surviving
            neighbour's bundle missing, or a bundle from a client not listed as a surviving
            neighbour.
        """
        state = self._joined()
        label = check_label(label, "label")
        if label in self._unmasked:
            raise SecureAggregationError(f"{self._id} already answered an unmask request for label {label!r}")
        request = UnmaskRequest(survivors=tuple(survivors), dropped=tuple(dropped), shares=shares)
        alive, gone = set(request.survivors), set(request.dropped)
        both = sorted(alive & gone)
        if both:
            raise SecureAggregationError(f"refused: {both} listed both as survivors and as dropped")
        strangers = sorted(alive - set(state.neighbours) - {self._id})
        if strangers:
            raise SecureAggregationError(f"refused: survivors {strangers} are not neighbours of {self._id}")
        counted = alive | ({self._id} if self._id not in gone else set())
        if len(counted) < state.threshold:
            raise SecureAggregationError(
                f"refused: only {len(counted)} survivors in {self._id}'s neighbourhood, at least {state.threshold} "
                "needed (a sum over fewer clients could expose one of them)"
            )
        surviving_neighbours = alive - {self._id}
        senders = set(request.shares)
        if senders - surviving_neighbours:
            raise SecureAggregationError(
                f"refused: bundles from {sorted(senders - surviving_neighbours)}, which are not surviving neighbours"
            )
        if surviving_neighbours - senders:
            missing = sorted(surviving_neighbours - senders)
            raise SecureAggregationError(f"refused: no bundle from surviving neighbours {missing}")

        bundles, complaints = {}, {}
        for sender in sorted(surviving_neighbours):
            key = bundle_key(state.cipher_keys[sender], state.job, label, sender, self._id)
            try:
                committed = CommittedBundle.from_bytes(request.shares[sender])
                bundles[sender] = committed.open(key, state.job, label, sender, self._id)
            except SecureAggregationError:
                complaints[sender] = key
        adjacent = set(state.neighbours).union(*(bundle.pair_seeds for bundle in bundles.values()))
        remote = sorted(gone - adjacent)
        if remote:
            raise SecureAggregationError(
                f"refused: dropped clients {remote} are neighbours neither of {self._id} nor of its surviving "
                f"neighbours"
            )
        self_mask = {sender: bundle.self_mask for sender, bundle in bundles.items()}
        pair_seeds = {}
        for sender, bundle in bundles.items():
            revealed = {peer: share for peer, share in bundle.pair_seeds.items() if peer in gone}
            if revealed:
                pair_seeds[sender] = revealed
        # The invariant that keeps every vector hidden: no client's self-mask seed and pair
        # seeds are revealed in the same aggregation. alive/gone being disjoint guarantees it;
        # checked again because a slip here would be silent.
        if set(self_mask) & {peer for by_peer in pair_seeds.values() for peer in by_peer}:
            raise SecureAggregationError("refused: a client would be revealed both as survivor and as dropped")
        self._unmasked.add(label)
        return UnmaskShares(self_mask=self_mask, pair_seeds=pair_seeds, complaints=complaints)


@dataclass(frozen=True, eq=False)
class SecureSum:
    """An unmasked aggregation: ``total`` (uint64, mod 2**64) of the ``contributors``' vectors.

    ``culprits``: client -> what it did, for the gateways whose unmask replies were discarded
    (a share that does not match its dealer's commitment, or shares it cannot hold); the sum is
    the same as if those replies had never arrived.
    """

    total: np.ndarray
    contributors: tuple[str, ...]
    culprits: Mapping[str, str]


@dataclass(frozen=True)
class _PendingAggregation:
    """Server state of a label between ``unmask_request`` and a successful ``aggregate``."""

    inputs: Mapping[str, MaskedInput]
    selected: frozenset[str]
    length: int
    requests: Mapping[str, UnmaskRequest]


class SecAggServer:
    """The server's side: builds the job's graph, routes sealed blobs and removes the masks.

    It is honest-but-curious by construction: it asks only for what the protocol needs,
    recomputes only the masks it must remove (a self-mask per survivor, a pairwise mask per
    pair of a survivor and a dropped neighbour) and opens only the bundles complained about.
    """

    def __init__(
        self, config: SecAggConfig, clients: Sequence[str], job: bytes, seed: bytes | int | None = None
    ) -> None:
        """``seed`` fixes the sparse graph; ``None`` derives it from ``job`` (any value works: the
        graph is public, it only has to be the same on every call for this job)."""
        if not isinstance(config, SecAggConfig):
            raise SecureAggregationError(f"config must be a SecAggConfig, got {type(config).__name__}")
        self._config = config
        self._job = check_label(job, "job")
        self._seed = self._job if seed is None else seed
        self._invited = tuple(sorted(_distinct_ids(clients, "clients")))
        self._plan(self._invited)
        self._roster: dict[str, PublicKeys] | None = None
        self._pending: dict[bytes, _PendingAggregation] = {}
        self._finished: set[bytes] = set()

    def _plan(self, participants: tuple[str, ...]) -> None:
        n = len(participants)
        if n < _MIN_CLIENTS:
            raise SecureAggregationError(f"secure aggregation needs at least {_MIN_CLIENTS} clients, got {n}")
        if len({share_x(c) for c in participants}) != n:  # a SHA-256 collision: never in practice
            raise SecureAggregationError("two client ids hash to the same Shamir x-coordinate")
        wanted = self._config.degree if self._config.degree is not None else default_degree(n)
        neighbours = neighbourhoods(participants, wanted, self._seed)
        degree = len(neighbours[participants[0]])
        threshold = self._config.threshold if self._config.threshold is not None else default_threshold(degree)
        if threshold > degree:
            raise SecureAggregationError(
                f"threshold {threshold} exceeds the {degree} neighbours that hold a client's shares"
            )
        self._clients, self._neighbours, self._degree, self._threshold = participants, neighbours, degree, threshold

    # --- read-only views -----------------------------------------------------------------------
    @property
    def job(self) -> bytes:
        return self._job

    @property
    def clients(self) -> tuple[str, ...]:
        """The participating clients (all invited ones until ``set_public_keys`` narrows them)."""
        return self._clients

    @property
    def degree(self) -> int:
        return self._degree

    @property
    def threshold(self) -> int:
        return self._threshold

    @property
    def neighbours(self) -> dict[str, tuple[str, ...]]:
        return dict(self._neighbours)

    @property
    def roster(self) -> dict[str, PublicKeys]:
        """Participants' public keys (a gateway needs only its own and its neighbours')."""
        return dict(self._require_roster())

    def roster_for(self, client: str) -> dict[str, PublicKeys]:
        """The public keys ``client`` needs for ``join``: its own and its neighbours'."""
        roster = self._require_roster()
        if client not in roster:
            raise SecureAggregationError(f"{client!r} is not in the job")
        return {c: roster[c] for c in (client, *self._neighbours[client])}

    def participants(self, client: str, selected: Iterable[str]) -> tuple[str, ...]:
        """``client``'s neighbours among ``selected``: what it must pass to ``mask`` for that aggregation."""
        chosen = set(selected)
        return tuple(v for v in self._neighbours[client] if v in chosen)

    def _require_roster(self) -> dict[str, PublicKeys]:
        if self._roster is None:
            raise SecureAggregationError("no public keys yet: call set_public_keys first")
        return self._roster

    # --- setup ---------------------------------------------------------------------------------
    def set_public_keys(self, keys: Mapping[str, PublicKeys]) -> None:
        """Fix the job's participants: invited clients missing from ``keys`` are out of the job.

        If some are missing, the graph (and a default degree/threshold) is rebuilt on the
        participants, so nobody's neighbourhood contains a client without keys.

        Raises
        ------
        SecureAggregationError
            Called twice, keys of a client not invited, values that are not PublicKeys, or
            fewer than 3 participants (or a configured threshold above the new degree).
        """
        if self._roster is not None:
            raise SecureAggregationError("public keys are already set for this job")
        keys = dict(keys)
        uninvited = sorted(set(keys) - set(self._invited))
        if uninvited:
            raise SecureAggregationError(f"public keys from clients not invited to the job: {uninvited}")
        for client, value in keys.items():
            if not isinstance(value, PublicKeys):
                raise SecureAggregationError(f"keys[{client!r}] must be PublicKeys, got {type(value).__name__}")
        participants = tuple(sorted(keys))
        if participants != self._clients:
            self._plan(participants)
        self._roster = {client: keys[client] for client in participants}

    def route(self, blobs_by_sender: Mapping[str, Mapping[str, bytes]]) -> dict[str, dict[str, bytes]]:
        """Regroup sealed setup blobs (sender -> {receiver: blob}) by receiver (receiver -> {sender: blob}).

        Raises
        ------
        SecureAggregationError
            A sender outside the job or a blob addressed to a client that is not its neighbour.
        """
        roster = self._require_roster()
        routed: dict[str, dict[str, bytes]] = {}
        for sender, by_receiver in blobs_by_sender.items():
            if sender not in roster:
                raise SecureAggregationError(f"blobs from {sender!r}, which is not in the job")
            strangers = sorted(set(by_receiver) - set(self._neighbours[sender]))
            if strangers:
                raise SecureAggregationError(f"{sender} addressed blobs to {strangers}, which are not its neighbours")
            for receiver, blob in by_receiver.items():
                routed.setdefault(receiver, {})[sender] = blob
        return routed

    # --- per aggregation -----------------------------------------------------------------------
    def check_masked_input(
        self, client: str, masked_input: MaskedInput, length: int | None = None, selected: Iterable[str] | None = None
    ) -> None:
        """Reject one malformed contribution on arrival: wrong client, length, or set of bundles
        (exactly one per neighbour among ``selected``; all neighbours if ``selected`` is None,
        each carrying one digest per share it holds).

        Raises
        ------
        MaliciousGateway
            Naming ``client``, whose contribution is malformed: the caller leaves it out of the
            aggregation (it is then dropped like a client that never answered).
        SecureAggregationError
            ``client`` is not in the job.
        """
        roster = self._require_roster()
        if client not in roster:
            raise SecureAggregationError(f"masked input from {client!r}, which is not in the job")
        if not isinstance(masked_input, MaskedInput):
            raise MaliciousGateway({client: f"sent a {type(masked_input).__name__}, not a MaskedInput"})
        if length is not None and masked_input.masked.size != length:
            size = masked_input.masked.size
            raise MaliciousGateway({client: f"sent a masked vector of length {size}, expected {length}"})
        expected = self._neighbours[client] if selected is None else self.participants(client, selected)
        if set(masked_input.shares) != set(expected):
            raise MaliciousGateway({client: "did not address sealed bundles to exactly its neighbours taking part"})
        for holder, blob in masked_input.shares.items():
            try:
                count = len(CommittedBundle.from_bytes(blob).digests)
            except SecureAggregationError as exc:
                raise MaliciousGateway({client: f"sent {holder} a malformed bundle: {exc}"}) from None
            if count != len(expected) + 1:
                wanted = len(expected) + 1
                raise MaliciousGateway({client: f"committed to {count} shares for {holder}, {wanted} expected"})

    def unmask_request(
        self, label: bytes, masked: Mapping[str, MaskedInput], selected: Iterable[str] | None = None
    ) -> dict[str, UnmaskRequest]:
        """Close the masking round of ``label``: the clients in ``masked`` survived, the rest of ``selected`` dropped.

        Parameters
        ----------
        masked
            The accepted masked inputs.
        selected
            The clients that were asked to mask (default: all participants); clients not
            selected are in nobody's masks and are not "dropped".

        Returns
        -------
        dict[str, UnmaskRequest]
            One per survivor. Calling again with the same survivors returns the same requests
            (for resending); with different ones it raises.

        Raises
        ------
        SecureAggregationError
            Malformed inputs, inputs from unselected clients, inconsistent lengths, a finished
            label, or too many dropouts: a survivor with fewer than ``threshold`` surviving
            neighbours could never be unmasked.
        """
        roster = self._require_roster()
        label = check_label(label, "label")
        if label in self._finished:
            raise SecureAggregationError(f"label {label!r} was already aggregated; labels are single-use")
        chosen = frozenset(roster if selected is None else _distinct_ids(selected, "selected"))
        if chosen - set(roster):
            raise SecureAggregationError(f"selected clients {sorted(chosen - set(roster))} are not in the job")
        masked = dict(masked)
        if not masked:
            raise SecureAggregationError("no masked inputs: nothing to aggregate")
        if set(masked) - chosen:
            unexpected = sorted(set(masked) - chosen)
            raise SecureAggregationError(f"masked inputs from clients not selected (or not in the job): {unexpected}")
        first_client, first = next(iter(masked.items()))
        if not isinstance(first, MaskedInput):
            raise SecureAggregationError(f"{first_client}: expected a MaskedInput, got {type(first).__name__}")
        length = first.masked.size
        faults: dict[str, str] = {}
        for client, contribution in masked.items():
            try:
                self.check_masked_input(client, contribution, length, chosen)
            except MaliciousGateway as exc:
                faults.update(exc.culprits)
        if faults:
            raise MaliciousGateway(faults)
        survivors = set(masked)
        pending = self._pending.get(label)
        if pending is not None:
            if set(pending.inputs) != survivors or pending.selected != chosen:
                raise SecureAggregationError(
                    f"label {label!r} already has an unmask request with other survivors; asking again would let "
                    "clients reveal inconsistent shares"
                )
            return dict(pending.requests)
        for client in sorted(survivors):
            alive = sum(1 for v in self._neighbours[client] if v in survivors)
            if alive < self._threshold:
                raise SecureAggregationError(
                    f"too many clients dropped: survivor {client} has {alive} surviving neighbours, "
                    f"{self._threshold} needed to remove its self-mask"
                )
        dropped = chosen - survivors
        requests = {}
        for client in sorted(survivors):
            surviving_neighbours = [v for v in self._neighbours[client] if v in survivors]
            adjacent = set(self._neighbours[client]).union(*(self._neighbours[v] for v in surviving_neighbours))
            requests[client] = UnmaskRequest(
                survivors=tuple(sorted([*surviving_neighbours, client])),
                dropped=tuple(sorted(dropped & adjacent)),
                shares={v: masked[v].shares[client] for v in surviving_neighbours},
            )
        self._pending[label] = _PendingAggregation(inputs=masked, selected=chosen, length=length, requests=requests)
        return dict(requests)

    def aggregate(
        self, label: bytes, masked: Mapping[str, MaskedInput], shares: Mapping[str, UnmaskShares], length: int
    ) -> np.ndarray:
        """The exact sum mod 2**64 of the survivors' vectors of ``label``, or an error naming every culprit.

        ``unmask_sum`` for callers that cannot leave a culprit out of their own records: any
        culprit, even one whose reply could simply be discarded, raises ``MaliciousGateway``.

        >>> SecAggServer(SecAggConfig(), ["a", "b", "c"], b"job").aggregate(b"r", {}, {}, 1)
        Traceback (most recent call last):
        ...
        shared.secure_aggregation.errors.SecureAggregationError: no public keys yet: call set_public_keys first
        """
        result = self.unmask_sum(label, masked, shares, length)
        if result.culprits:
            raise MaliciousGateway(dict(result.culprits))
        return result.total

    def unmask_sum(
        self, label: bytes, masked: Mapping[str, MaskedInput], shares: Mapping[str, UnmaskShares], length: int
    ) -> SecureSum:
        """The exact sum mod 2**64 of the survivors' vectors of ``label``, every revealed share checked.

        Each share a reply reveals is checked against the digest its dealer committed to for
        that holder (``CommittedBundle``); honest holders check the same digests before
        revealing, so a share that does not match was altered by its revealer. Such a reply,
        or one holding shares it cannot hold, is discarded whole, exactly as if it had never
        arrived, and its sender is a culprit: the sum is that of the same survivors.

        Parameters
        ----------
        masked
            The same masked inputs that were passed to ``unmask_request``.
        shares
            Replies of the survivors that answered; missing replies are fine while every
            survivor keeps ``threshold`` answering neighbours.
        length
            The vector length (checked against the inputs).

        Returns
        -------
        SecureSum
            The total over all survivors, and the culprits whose replies were discarded.

        Raises
        ------
        MaliciousGateway
            A complaint decided by its evidence (the key of the bundle complained about, see
            ``_judge_complaints``): a dealer whose bundle does not open or match its digests
            under that key is named, or else the complainer; or a survivor's self-mask cannot be
            rebuilt because more than ``k - threshold`` of its ``k`` share holders complained
            with keys its bundles do not commit to. Those gateways (and any discarded reply's
            sender) are named; their masked vectors are in the inputs, so no sum over the
            others can be given for this label (ask again without them). Also raised, naming
            the discarded replies' senders, when a seed cannot be rebuilt without their shares.
            The label is finished.
        SecureAggregationError
            Inputs differing from those of the unmask request, a reply from a client that was
            not asked, or a seed with fewer than ``threshold`` shares (too many clients dropped
            during unmasking: wait for more replies or give up the label). The label stays
            pending after these errors.

        Examples
        --------
        >>> ids = ["a", "b", "c"]
        >>> clients = {c: SecAggClient(c) for c in ids}
        >>> server = SecAggServer(SecAggConfig(), ids, b"job")
        >>> server.set_public_keys({c: k.public_keys() for c, k in clients.items()})
        >>> blobs = {c: clients[c].join(server.roster_for(c), server.neighbours[c], server.threshold, b"job")
        ...          for c in ids}
        >>> for c, routed in server.route(blobs).items():
        ...     clients[c].confirm_keys(routed)
        >>> masked = {c: clients[c].mask(b"r", np.array([i + 1], np.uint64)) for i, c in enumerate(ids)}
        >>> asked = server.unmask_request(b"r", masked)
        >>> replies = {c: clients[c].unmask(b"r", q.survivors, q.dropped, q.shares) for c, q in asked.items()}
        >>> result = server.unmask_sum(b"r", masked, replies, 1)
        >>> result.total.tolist(), result.contributors, dict(result.culprits)
        ([6], ('a', 'b', 'c'), {})
        """
        self._require_roster()
        label = check_label(label, "label")
        pending = self._pending.get(label)
        if pending is None:
            raise SecureAggregationError(f"no unmask request was made for label {label!r} (or it was aggregated)")
        if length != pending.length:
            raise SecureAggregationError(f"length {length} differs from the masked vectors' length {pending.length}")
        masked = dict(masked)
        if set(masked) != set(pending.inputs):
            raise SecureAggregationError("masked inputs differ from the survivors named in the unmask request")
        for client, contribution in masked.items():
            original = pending.inputs[client]
            same = contribution is original or (
                isinstance(contribution, MaskedInput)
                and np.array_equal(contribution.masked, original.masked)
                and contribution.shares == original.shares
            )
            if not same:
                raise SecureAggregationError(f"{client}'s masked input differs from the one its shares were routed for")
        replies, culprits = self._check_replies(label, pending, shares)
        liars, disputed = self._judge_complaints(label, pending, replies)
        blocked = {**self._blocked_dealers(pending, replies, disputed), **liars}
        if blocked:
            del self._pending[label]
            self._finished.add(label)
            raise MaliciousGateway({**culprits, **blocked})

        try:
            total = self._remove_masks(label, pending, replies)
        except SecureAggregationError:
            if not culprits:
                raise
            del self._pending[label]
            self._finished.add(label)
            raise MaliciousGateway(culprits) from None  # their shares were needed: ask again without them
        del self._pending[label]
        self._finished.add(label)
        return SecureSum(total=total, contributors=tuple(sorted(pending.inputs)), culprits=culprits)

    def _remove_masks(
        self, label: bytes, pending: _PendingAggregation, replies: Mapping[str, UnmaskShares]
    ) -> np.ndarray:
        """The survivors' masked vectors summed, their self-masks and their pair masks with dropped peers removed."""
        survivors = sorted(pending.inputs)
        dropped = pending.selected - set(survivors)
        length = pending.length
        total = ring_sum([pending.inputs[v].masked for v in survivors])
        self_info, pair_info = self_mask_info(self._job, label), pair_mask_info(self._job, label)
        for owner in survivors:
            answering = {w: replies[w] for w in self._neighbours[owner] if w in replies}
            found = {w: reply.self_mask[owner] for w, reply in answering.items() if owner in reply.self_mask}
            self_seed = self._rebuild(owner, "self-mask seed", found)
            np.subtract(total, expand_mask(self_seed, length, self_info), out=total)
            for peer in self._neighbours[owner]:
                if peer not in dropped:
                    continue  # masks between two survivors cancel in the sum; unselected peers had none
                found = {
                    w: reply.pair_seeds[owner][peer]
                    for w, reply in answering.items()
                    if peer in reply.pair_seeds.get(owner, {})
                }
                pair_seed = self._rebuild(owner, f"pair seed with dropped {peer}", found)
                np.subtract(total, pairwise_mask(pair_seed, owner, peer, pair_info, length), out=total)
        return total

    def _judge_complaints(
        self, label: bytes, pending: _PendingAggregation, replies: Mapping[str, UnmaskShares]
    ) -> tuple[dict[str, str], dict[str, list[str]]]:
        """Decide each complaint by its evidence: the liars (with why), and the complaints no evidence decides.

        A complaint carries the key of the bundle complained about. If the bundle's nonce commits
        to that key, the server opens the bundle with it, as the complaining holder did: a bundle
        that does not open or match its digests names its dealer, a good one the complainer. A
        key of the wrong size names the complainer (an honest holder always sends its bundle's
        key). Any other key leaves the complaint undecided, dealer -> holders: either the dealer
        sealed under another key than the pair's, or the holder reveals another key, and only
        the two of them know the pair's key (``_blocked_dealers`` weighs those complaints).
        """
        liars: dict[str, str] = {}
        disputed: dict[str, list[str]] = {}
        for holder in sorted(replies):
            for dealer, key in sorted(replies[holder].complaints.items()):
                committed = CommittedBundle.from_bytes(pending.inputs[dealer].shares[holder])
                if len(key) != DERIVED_KEY_BYTES:
                    liars[holder] = f"complained about {dealer}'s share bundle without the key that sealed it"
                elif not committed.commits_to(key):
                    disputed.setdefault(dealer, []).append(holder)
                elif self._bundle_opens(committed, key, label, dealer, holder):
                    liars[holder] = (
                        f"complained about {dealer}'s share bundle, which the key it revealed opens and which "
                        f"matches {dealer}'s commitments"
                    )
                else:
                    liars[dealer] = (
                        f"sent {holder} a share bundle that does not open or match its commitments "
                        f"(shown by the bundle's key, revealed by {holder})"
                    )
        return liars, disputed

    def _bundle_opens(self, committed: CommittedBundle, key: bytes, label: bytes, dealer: str, holder: str) -> bool:
        """Whether ``committed`` opens under ``key`` and matches its digests (the holder's own check)."""
        try:
            committed.open(key, self._job, label, dealer, holder)
        except SecureAggregationError:
            return False
        return True

    def _blocked_dealers(
        self, pending: _PendingAggregation, replies: Mapping[str, UnmaskShares], disputed: Mapping[str, list[str]]
    ) -> dict[str, str]:
        """Survivors whose self-mask cannot be rebuilt because too many holders dispute their key, with why.

        Of a survivor's ``k`` share holders, more than ``k - threshold`` must complain with a key
        its bundle does not commit to (``disputed``): fewer lying neighbours than that can never
        get an honest gateway named.
        """
        blocked = {}
        for owner, contribution in pending.inputs.items():
            holders = contribution.shares
            found = sum(1 for w in holders if w in replies and owner in replies[w].self_mask)
            complaints = sorted(disputed.get(owner, []))
            if found < self._threshold and len(complaints) > len(holders) - self._threshold:
                blocked[owner] = f"sent bundles that did not open or match its commitments to {complaints}"
        return blocked

    def _check_replies(
        self, label: bytes, pending: _PendingAggregation, shares: Mapping[str, UnmaskShares]
    ) -> tuple[dict[str, UnmaskShares], dict[str, str]]:
        """The usable replies, and the culprits whose replies are discarded (with why).

        A reply is usable if it holds only shares its sender was given, each matching the
        digest its dealer committed to, and complains only about clients that sent it a bundle.
        """
        replies, culprits = {}, {}
        for responder, reply in dict(shares).items():
            if responder not in pending.requests:
                raise SecureAggregationError(f"unmask reply from {responder!r}, which was not asked")
            reason = self._reply_fault(label, pending, responder, reply)
            if reason is None:
                replies[responder] = reply
            else:
                culprits[responder] = reason
        return replies, culprits

    def _reply_fault(self, label: bytes, pending: _PendingAggregation, responder: str, reply: object) -> str | None:
        """Why ``responder``'s unmask reply cannot be used (None: it can)."""
        if not isinstance(reply, UnmaskShares):
            return f"answered the unmask request with a {type(reply).__name__}"
        request = pending.requests[responder]
        senders, dropped = set(request.shares), set(request.dropped)
        if set(reply.self_mask) - senders or set(reply.pair_seeds) - senders or set(reply.complaints) - senders:
            return "revealed shares of, or complained about, clients that sent it no bundle"
        for owner, by_peer in reply.pair_seeds.items():
            if set(by_peer) - dropped or set(by_peer) - set(self._neighbours[owner]):
                return f"revealed pair seeds of {owner} with peers that did not drop"
        revealed: list[tuple[str, str | None, bytes]]  # (owner, peer or None for a self-mask share, share)
        revealed = [(owner, None, share) for owner, share in reply.self_mask.items()]
        for owner, by_peer in reply.pair_seeds.items():
            revealed += [(owner, peer, share) for peer, share in by_peer.items()]
        for owner, peer, share in revealed:
            committed = CommittedBundle.from_bytes(pending.inputs[owner].shares[responder])
            peers = pending.inputs[owner].shares
            if not committed.matches(self._job, label, owner, responder, peer, share, peers):
                slot = "self-mask seed" if peer is None else f"pair seed with {peer}"
                return f"revealed a share of {owner}'s {slot} that does not match {owner}'s commitment"
        return None

    def _rebuild(self, owner: str, what: str, shares_by_holder: Mapping[str, bytes]) -> bytes:
        if len(shares_by_holder) < self._threshold:
            raise SecureAggregationError(
                f"cannot rebuild {owner}'s {what}: {len(shares_by_holder)} of the {self._threshold} needed shares "
                "arrived (too many clients dropped during unmasking)"
            )
        chosen = sorted(shares_by_holder)[: self._threshold]
        return combine_shares({share_x(w): shares_by_holder[w] for w in chosen}, SEED_BYTES)
