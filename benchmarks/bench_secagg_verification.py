"""What checking every share costs secure aggregation: one aggregation of 100 gateways (default
degree 16, threshold 9), 10**4 elements, 10% dropped before masking, in process.

    python -m benchmarks.bench_secagg_verification

Prints a Markdown table: seconds for all gateways to mask (which now includes the digests of
their shares), to answer the unmask requests (which now includes checking the digests), for the
server to unmask the sum (which now includes checking every revealed share), and the bytes one
gateway sends beside its vector (its committed, sealed bundles). Median of 5 runs.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks._common import markdown_table, print_machine
from shared.secure_aggregation import SecAggClient, SecAggConfig, SecAggServer

N, LENGTH, RUNS = 100, 10**4, 5
JOB = b"bench/secagg"


def one_run(seed: int) -> tuple[float, float, float, int]:
    ids = [f"gw-{i:03d}" for i in range(N)]
    clients = {c: SecAggClient(c) for c in ids}
    server = SecAggServer(SecAggConfig(), ids, JOB)
    server.set_public_keys({c: k.public_keys() for c, k in clients.items()})
    confirmations = {c: clients[c].join(server.roster_for(c), server.neighbours[c], server.threshold, JOB) for c in ids}
    for receiver, blobs in server.route(confirmations).items():
        clients[receiver].confirm_keys(blobs)
    rng = np.random.default_rng(seed)
    dropped = set(ids[::10])
    label = f"round-{seed}".encode()
    start = time.perf_counter()
    masked = {
        c: clients[c].mask(label, rng.integers(0, 2**63, LENGTH, dtype=np.uint64)) for c in ids if c not in dropped
    }
    mask_s = time.perf_counter() - start
    requests = server.unmask_request(label, masked)
    start = time.perf_counter()
    replies = {c: clients[c].unmask(label, r.survivors, r.dropped, r.shares) for c, r in requests.items()}
    unmask_s = time.perf_counter() - start
    start = time.perf_counter()
    server.aggregate(label, masked, replies, LENGTH)
    server_s = time.perf_counter() - start
    sent = sum(len(blob) for blob in masked[ids[1]].shares.values())
    return mask_s, unmask_s, server_s, sent


def main() -> None:
    print_machine("Secure aggregation with every share checked", "python -m benchmarks.bench_secagg_verification")
    runs = [one_run(seed) for seed in range(RUNS)]
    rows = [[str(N), str(LENGTH), *(f"{statistics.median(r[i] for r in runs):.3f}" for i in range(3)),
             str(runs[0][3])]]
    print(markdown_table(["gateways", "elements", "mask all (s)", "unmask answers (s)", "server unmask (s)",
                          "bundle bytes per gateway"], rows))


if __name__ == "__main__":
    main()
