"""What checking every share costs secure aggregation: one aggregation of 100 gateways (default
degree 16, threshold 9), 10**4 elements, 10% dropped before masking, in process.

    python -m benchmarks.bench_secagg_verification

Prints a Markdown table: seconds for all gateways to mask (which now includes the digests of
their shares), to answer the unmask requests (which now includes checking the digests), for the
server to unmask the sum (which now includes checking every revealed share), and the bytes one
gateway sends beside its vector (its committed, sealed bundles). Median of 5 runs.

A second table: the encoded body of one gateway's unmask reply (``secagg.unmask_reply``, CBOR)
when it complains about nobody, and when it complains about one neighbour (given that
neighbour's bundle with a byte of its tag flipped): the complaint's evidence is the key of that
one bundle, and the share of that neighbour's self-mask seed is not sent. Run it on two commits
to compare their honest replies.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks._common import markdown_table, print_machine
from shared.protocol.codec import dumps_value
from shared.protocol.messages.secure_aggregation import SecAggUnmaskReply
from shared.protocol.schema import to_wire
from shared.secure_aggregation import SecAggClient, SecAggConfig, SecAggServer, UnmaskShares

N, LENGTH, RUNS = 100, 10**4, 5
JOB = b"bench/secagg"


def reply_bytes(shares: UnmaskShares) -> int:
    """Bytes of the CBOR body of the ``secagg.unmask_reply`` carrying ``shares``."""
    reply = SecAggUnmaskReply(
        self_mask=dict(shares.self_mask),
        complaints=shares.complaints,
        pair_seeds={v: dict(by_peer) for v, by_peer in shares.pair_seeds.items()},
    )
    return len(dumps_value(to_wire(reply)))


def one_run(seed: int) -> tuple[float, float, float, int, int, int]:
    ids = [f"gw-{i:03d}" for i in range(N)]
    clients = {c: SecAggClient(c) for c in ids}
    server = SecAggServer(SecAggConfig(), ids, JOB)
    server.set_public_keys({c: k.public_keys() for c, k in clients.items()})
    confirmations = {c: clients[c].join(server.roster_for(c), server.neighbours[c], server.threshold, JOB) for c in ids}
    for receiver, blobs in server.route(confirmations).items():
        clients[receiver].confirm_keys(blobs)
    rng = np.random.default_rng(seed)
    dropped = set(ids[::10])
    vectors = {c: rng.integers(0, 2**63, LENGTH, dtype=np.uint64) for c in ids if c not in dropped}
    label = f"round-{seed}".encode()
    start = time.perf_counter()
    masked = {c: clients[c].mask(label, vector) for c, vector in vectors.items()}
    mask_s = time.perf_counter() - start
    requests = server.unmask_request(label, masked)
    start = time.perf_counter()
    replies = {c: clients[c].unmask(label, r.survivors, r.dropped, r.shares) for c, r in requests.items()}
    unmask_s = time.perf_counter() - start
    start = time.perf_counter()
    server.aggregate(label, masked, replies, LENGTH)
    server_s = time.perf_counter() - start
    holder = ids[1]
    sent = sum(len(blob) for blob in masked[holder].shares.values())
    return mask_s, unmask_s, server_s, sent, reply_bytes(replies[holder]), complaint_bytes(server, clients, vectors)


def complaint_bytes(server: SecAggServer, clients: dict[str, SecAggClient], vectors: dict[str, np.ndarray]) -> int:
    """Bytes of the unmask reply of the same holder in a second aggregation, in which the bundle
    of its first neighbour reaches it with a byte of its tag flipped (it complains about it)."""
    label = b"complaint"
    masked = {c: clients[c].mask(label, vector) for c, vector in vectors.items()}
    request = server.unmask_request(label, masked)[sorted(clients)[1]]
    dealer = min(request.shares)
    tampered = request.shares[dealer][:-1] + bytes([request.shares[dealer][-1] ^ 1])
    holder = clients[sorted(clients)[1]]
    return reply_bytes(holder.unmask(label, request.survivors, request.dropped, {**request.shares, dealer: tampered}))


def main() -> None:
    print_machine("Secure aggregation with every share checked", "python -m benchmarks.bench_secagg_verification")
    runs = [one_run(seed) for seed in range(RUNS)]
    rows = [[str(N), str(LENGTH), *(f"{statistics.median(r[i] for r in runs):.3f}" for i in range(3)), str(runs[0][3])]]
    print(
        markdown_table(
            [
                "gateways",
                "elements",
                "mask all (s)",
                "unmask answers (s)",
                "server unmask (s)",
                "bundle bytes per gateway",
            ],
            rows,
        )
    )
    honest, complaining = runs[0][4], runs[0][5]
    print(
        markdown_table(
            ["unmask reply of one gateway", "body bytes"],
            [
                ["no complaint", str(honest)],
                ["one complaint, with its bundle key", str(complaining)],
                ["difference", f"{complaining - honest:+d}"],
            ],
        )
    )


if __name__ == "__main__":
    main()
