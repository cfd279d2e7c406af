"""The reconstruction attack on the sums the aggregator decodes, per protocol and bins.

    .venv/bin/python benchmarks/bench_reconstruction_attack.py [--seeds N] [--quick]

The bundled recordings (10 gateways, the training windows of ``bench_private_bytes.load_fleet``:
the first 80 % of each subject's labelled windows, 1,728 windows x 204 features, 7 classes),
trained through ``aggregator.simulate`` while ``tests/privacy_attacks/reconstruction.py``
records every fleet sum the aggregator decodes and attacks them (singleton cells, labels from the
sign of G or the class column, cells linked by equal (G, H) and records merged by bins; the
module docstring has the attack and the scoring). Rows: FedSCS-XGB's non-DP histogram protocol
(``n_rounds=10, max_depth=4``) at 256, 32 and 16 bins and its private default; FedForest's
non-DP histogram protocol (its defaults: 50 trees, depth 8) at 256, 32 and 16 bins and its
private default. The private rows pool ``--seeds`` runs (noise seeds 0..N-1; default 3).
``--quick``: 3 boosting rounds and 10 trees.

Columns: singletons = decoded non-empty (node, feature, slot) cells whose count is 1 (rounds to 1
on noisy sums), as a share of the non-empty ones; rebuilt = windows a record rebuilds (label
right, >= 10 features named, >= half of them its slots) and the median number of features their
records name; label rate = share of all windows whose label the attacker gets right when it
labels each window by the record attributed to it, else by the majority class, next to the
majority-class share; claims = boosting's singleton cells with a stated label, and how many of
those the attacker reads right among those that really hold one window.
"""

from __future__ import annotations

import argparse
import logging
import time

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import description, markdown_table, print_machine
from bench_private_bytes import load_fleet


def rows(seeds: int, quick: bool):
    from aggregator.algorithms import FedForest, FedSCSXGB

    rounds, trees = (3, 10) if quick else (10, 50)
    for bins in (256, 32, 16):
        yield (
            "FedSCS-XGB",
            "histogram",
            bins,
            FedSCSXGB(protocol="histogram", n_rounds=rounds, max_depth=4, n_bins=bins),
            1,
        )
    private = FedSCSXGB(n_rounds=rounds)
    yield "FedSCS-XGB", "private (default)", private.bins, private, seeds
    for bins in (256, 32, 16):
        yield "FedForest", "histogram", bins, FedForest(protocol="histogram", n_trees=trees, n_bins=bins), 1
    forest = FedForest(n_trees=trees)
    yield "FedForest", "private (default)", forest.bins, forest, seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--seeds", type=int, default=3, help="runs (noise seeds) pooled per private row")
    parser.add_argument("--quick", action="store_true", help="3 boosting rounds, 10 trees")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the non-DP protocols' one-line warnings
    from tests.privacy_attacks.reconstruction import attack_training

    print_machine(
        "Reconstruction attack on the decoded fleet sums",
        "benchmarks/bench_reconstruction_attack.py" + (" --quick" if args.quick else ""),
    )
    clients, _, _ = load_fleet()
    n = sum(len(c.y) for c in clients)
    print(f"fleet: {len(clients)} gateways, {n} training windows x {clients[0].X.shape[1]} features\n")
    table = []
    for algorithm, protocol, bins, config, runs in rows(args.seeds, args.quick):
        started = time.perf_counter()
        scores = [attack_training(clients, config, seed=s, noise_seed=s) for s in range(runs)]
        seconds = (time.perf_counter() - started) / runs
        windows = sum(s.windows for s in scores)
        nonempty, singletons = sum(s.nonempty_cells for s in scores), sum(s.singleton_cells for s in scores)
        rebuilt = sum(s.rebuilt for s in scores)
        medians = [s.median_features for s in scores if s.rebuilt]
        claims = sum((s.claims for s in scores[1:]), scores[0].claims)
        table.append(
            [
                algorithm,
                protocol,
                str(bins),
                str(runs),
                f"{nonempty / runs:,.0f}",
                f"{100 * singletons / max(nonempty, 1):.1f} %",
                f"{rebuilt / runs:,.0f} ({100 * rebuilt / windows:.1f} %)",
                f"{sorted(medians)[len(medians) // 2]:.0f}" if medians else "-",
                f"{100 * sum(s.labelled_right for s in scores) / windows:.1f} %",
                f"{100 * scores[0].majority:.1f} %",
                f"{claims.cells / runs:,.0f}" if claims.cells else "-",
                f"{claims.right:,} / {claims.isolated:,}" if claims.cells else "-",
                f"{seconds:.0f}",
            ]
        )
        print(" | ".join(table[-1]), flush=True)
    print()
    print(
        markdown_table(
            [
                "algorithm",
                "protocol",
                "bins",
                "runs",
                "non-empty cells",
                "singletons",
                "windows rebuilt",
                "median features",
                "label rate",
                "majority",
                "claims",
                "claims right / real singletons",
                "s per run",
            ],
            table,
        )
    )


if __name__ == "__main__":
    main()
