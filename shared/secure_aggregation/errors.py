"""The one exception type of secure aggregation.

Everything a secure-aggregation step receives comes from the network (public keys, sealed
shares, masked vectors, unmask requests and replies), so every rejection is a ``ValueError``
subclass that the messaging layer can catch in one place and attribute to the sender. A
refusal is never "repaired": a client that refuses an unmask request reveals nothing, and a
server that cannot remove a mask returns no sum rather than a wrong one.
"""

from __future__ import annotations


class SecureAggregationError(ValueError):
    """A protocol rule was broken (sizes, rosters, dropouts, shares); the message says which."""


class MaliciousGateway(SecureAggregationError):
    """Gateways broke the protocol in a way attributable to them; ``culprits``: client id -> reason.

    >>> str(MaliciousGateway({"gw-3": "revealed a share that does not match its commitment"}))
    'gw-3 revealed a share that does not match its commitment'
    """

    def __init__(self, culprits: dict[str, str]) -> None:
        self.culprits = dict(sorted(culprits.items()))
        super().__init__("; ".join(f"{client} {reason}" for client, reason in self.culprits.items()))
