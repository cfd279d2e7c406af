"""Who shares secrets with whom: complete graphs for small fleets, SecAgg+ sparse graphs for large ones.

Why sparse: in Bonawitz et al. (2017) every client masks with, and secret-shares to, every other
client, so a client's work and messages grow linearly in the fleet size n and the server's
work quadratically. SecAgg+ (Bell et al. 2020) shows that a random k-regular graph with
k = O(log n) keeps the same guarantees with high probability: the server still learns only the
sum, provided fewer than ``threshold`` of any client's neighbours collude with it, and the sum
is recovered provided at least ``threshold`` of each surviving client's neighbours answer.

The sparse graph is a Harary-like ring: the clients are put in a pseudorandom cyclic order
(sorted by a keyed SHA-256 of their id, so the order depends only on the seed and is stable
across Python and numpy versions) and each is linked to the ``k/2`` nearest on either side.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

from .errors import SecureAggregationError

__all__ = ["default_degree", "default_threshold", "neighbourhoods"]

_ORDER_TAG = b"wheelfed/secagg/v1/graph-order"


def _seed_bytes(seed: bytes | int) -> bytes:
    if isinstance(seed, (bytes, bytearray)):
        return b"b" + bytes(seed)
    if isinstance(seed, int) and not isinstance(seed, bool):
        return b"i" + str(seed).encode("ascii")
    raise SecureAggregationError(f"graph seed must be bytes or int, got {type(seed).__name__}")


def _check_clients(clients: Sequence[str]) -> list[str]:
    ids = list(clients)
    for client in ids:
        if not isinstance(client, str) or not client:
            raise SecureAggregationError(f"client ids must be non-empty strings, got {client!r}")
    if len(set(ids)) != len(ids):
        raise SecureAggregationError("client ids must be unique")
    return sorted(ids)


def neighbourhoods(clients: Sequence[str], degree: int | None, seed: bytes | int) -> dict[str, tuple[str, ...]]:
    """Each client's neighbours (sorted), in a symmetric graph without self-loops.

    Parameters
    ----------
    clients
        Unique client ids (order irrelevant).
    degree
        Neighbours per client. ``None`` or ``>= n - 1`` gives the complete graph; otherwise it
        is rounded up to the next even number (a ring links ``degree / 2`` on each side), and if
        that reaches ``n - 1`` the graph is complete too.
    seed
        Makes the graph a pure function of (clients, degree, seed): the server can rebuild it,
        and a test can fix it. It need not be secret.
    """
    ordered = _check_clients(clients)
    n = len(ordered)
    if degree is not None and (isinstance(degree, bool) or not isinstance(degree, int) or degree < 1):
        raise SecureAggregationError(f"degree must be a positive int or None, got {degree!r}")
    even = None if degree is None else degree + degree % 2
    if even is None or even >= n - 1:
        return {client: tuple(other for other in ordered if other != client) for client in ordered}
    key = _seed_bytes(seed)
    ring = sorted(ordered, key=lambda c: hashlib.sha256(_ORDER_TAG + key + b"\x00" + c.encode("utf-8")).digest())
    half = even // 2
    result = {}
    for position, client in enumerate(ring):
        linked = {ring[(position + step) % n] for step in range(1, half + 1)}
        linked |= {ring[(position - step) % n] for step in range(1, half + 1)}
        result[client] = tuple(sorted(linked))
    return result


def default_degree(n: int) -> int:
    """SecAgg+'s O(log n) neighbourhood size: ``min(n - 1, 2 * ceil(log2 n) + 2)``.

    Bell et al. (2020) need k = O(log n) for the random graph to stay connected among honest
    survivors; ``2 log2 n + 2`` is a conservative constant (16 for n = 100, 22 for n = 1000),
    and fleets of up to 10 get the complete graph of the original protocol.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SecureAggregationError(f"n must be a positive int, got {n!r}")
    if n == 1:
        return 0
    return min(n - 1, 2 * math.ceil(math.log2(n)) + 2)


def default_threshold(degree: int) -> int:
    """Shares needed to rebuild a client's seed: a strict majority of its ``degree`` share holders.

    A client's shares are held by its neighbours only, not by itself (a dropped client could not
    contribute its own share), so ``degree`` shares is the most the server can ever collect and
    the threshold must not exceed it. A majority, ``degree // 2 + 1``, is what Bonawitz et al.
    use so that no two disjoint groups of holders could each be talked into revealing a
    different kind of secret for the same client; it also tolerates ``degree - threshold``
    unresponsive neighbours. At least 2, so that no single neighbour alone holds a seed.

    Raises
    ------
    SecureAggregationError
        If ``degree < 2``: with fewer than two neighbours (fewer than 3 clients) there is no
        threshold that is both reachable and above one.
    """
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 2:
        raise SecureAggregationError(
            f"secure aggregation needs neighbourhoods of at least 2 (at least 3 clients), got degree {degree!r}"
        )
    return max(2, degree // 2 + 1)
