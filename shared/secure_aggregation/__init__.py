"""Secure aggregation: the cloud learns only fleet-level sums of the gateways' vectors, never one gateway's.

Bonawitz et al. 2017 ("Practical Secure Aggregation for Privacy-Preserving Machine Learning"),
with SecAgg+ sparse neighbourhoods (Bell et al. 2020) for large fleets; honest-but-curious
server, with fewer than ``threshold`` of any gateway's neighbours colluding with it.

A gateway that lies cannot corrupt a sum unnoticed. Each share is committed to by its dealer
(a digest sent in the clear beside the sealed bundle); the server checks every revealed share,
and a holder checks its shares before revealing them, so a share that does not match was
altered by its revealer, who is named (``MaliciousGateway``, ``SecureSum.culprits``) and whose
reply is discarded. A holder whose bundle does not open or match complains instead of refusing
the whole request, and reveals the key of that one bundle as evidence (the bundle's nonce
commits to it): the server opens that bundle and names, on a single complaint, the dealer if
it does not open or match, else the complainer. A key the nonce does not commit to decides
nothing; a dealer is then named only when more than ``k - threshold`` of its ``k`` holders
dispute its key. A malformed contribution (bundles for clients that are not its neighbours)
names its sender before unmasking.

What the server sees, in order:

1. Once per job: each gateway's two X25519 public keys, then sealed key confirmations between
   neighbours (each pair proves it derived the same AES-GCM key and pair secret, which the
   server cannot compute).
2. Per aggregation (a unique ``label``): each gateway's vector in Z/2^64 plus a self-mask from a
   fresh seed ``b`` plus pairwise masks (``+m`` / ``-m`` per neighbour, cancelling in the sum):
   uniform mod 2^64. Alongside, Shamir shares of ``b`` and of this label's pair seeds, sealed
   to each neighbour: the server routes them but cannot read them; it sees a 16-byte digest
   of each share (a hash of a uniformly random field element, which hides it).
3. After closing the round, shares revealed by the survivors: for every surviving gateway,
   ``threshold`` shares of its ``b`` (to remove its self-mask); for every dropped gateway, shares
   of its surviving neighbours' pair seeds with it (to remove the masks it never cancelled);
   for each complaint, the key of the one bundle complained about (one share of each of its
   dealer's secrets).
   Never both kinds for the same gateway in the same aggregation: a survivor's vector stays
   behind pairwise masks that only cancel in the sum, a late "dropped" one behind its self-mask.

Only per-label pair seeds are ever revealed, never a long-term key (see ``protocol``): one key
setup serves a whole training job, a gateway that dropped once takes part again in the next
aggregation, and nothing revealed for one label helps unmask another.

Performance (measured on a shared 2-core AMD EPYC server, CPython 3.11, OpenSSL with AES-NI):
``expand_mask`` 3.1 ms per 10**6 elements (~2.5 GB/s); at degree 16 a gateway joins and confirms
keys in 1.5 ms and masks 10**4 elements in 1.6 ms (10**5 in 3.6 ms); 100 gateways, default
degree 16, 10**4 elements, 10% dropped: masking 0.15 s in all, unmask answers 0.03 s, server
aggregation 0.02 s. Checking every share (``benchmarks/bench_secagg_verification.py``, same
fleet): masking 0.21 s in all, unmask answers 0.09 s, server 0.05 s (0.16, 0.02 and 0.02 s
without the checks). Sizes: public keys 64 B, key confirmation 60 B; per aggregation a gateway
sends 8 L bytes of vector plus one committed, sealed bundle per neighbour taking part, of
``112 + 16 k + sum(67 + len(id))`` bytes over those k neighbours (1536 B for 16 neighbours "gw-017").

Dependencies: numpy, the standard library and ``cryptography`` (X25519, HKDF, AES-CTR, AES-GCM),
which gateways importing this package must therefore have installed.
"""

from .bundle import ShareBundle, sealed_bundle_size
from .contexts import MAX_LABEL_BYTES, share_x
from .encryption import SEAL_OVERHEAD, open_sealed, seal
from .errors import MaliciousGateway, SecureAggregationError
from .ring import ring_sum
from .graph import default_degree, default_threshold, neighbourhoods
from .keys import PUBLIC_KEY_BYTES, ClientKeyPairs, PublicKeys, agree, derive_key
from .masks import expand_mask, pairwise_mask
from .messages import MaskedInput, UnmaskRequest, UnmaskShares
from .protocol import SEED_BYTES, SecAggClient, SecAggConfig, SecAggServer, SecureSum
from .shamir import PRIME, SHARE_BYTES, combine_shares, split_secret

__all__ = [
    "MAX_LABEL_BYTES",
    "PRIME",
    "PUBLIC_KEY_BYTES",
    "SEAL_OVERHEAD",
    "SEED_BYTES",
    "SHARE_BYTES",
    "ClientKeyPairs",
    "MaliciousGateway",
    "MaskedInput",
    "PublicKeys",
    "SecAggClient",
    "SecAggConfig",
    "SecAggServer",
    "SecureSum",
    "SecureAggregationError",
    "ShareBundle",
    "UnmaskRequest",
    "UnmaskShares",
    "agree",
    "combine_shares",
    "default_degree",
    "default_threshold",
    "derive_key",
    "expand_mask",
    "neighbourhoods",
    "open_sealed",
    "pairwise_mask",
    "ring_sum",
    "seal",
    "sealed_bundle_size",
    "share_x",
    "split_secret",
]
