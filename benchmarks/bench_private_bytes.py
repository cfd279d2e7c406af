"""Bytes each gateway sends in one private FedSCS-XGB training, and each lever's share of the saving.

    ulimit -v 4000000; nice .venv/bin/python benchmarks/bench_private_bytes.py [--levers] [--with-histogram]

The bundled recordings (10 gateways, 204 features, 7 classes), ``FedSCSXGB(n_rounds=10,
max_depth=4, gamma=0.1)`` through ``aggregator.simulate``: the private default, then the same
with one lever undone at a time (all 204 features per round instead of 8; 256 bins instead of
8), and optionally (``--with-histogram``) the non-DP histogram protocol at 256 bins, the former
default. Each row also gives the held-out accuracy of one run (the tail of each subject's
recording), a single run: indicative, not an accuracy comparison.

``--levers``: the lever table instead. It starts from the non-DP histogram protocol at 256 bins
with one tree per class and round (the former default) and applies one lever at a time,
cumulatively, each row a measured training: one vector-leaf tree per round (multi-output), 8
bins, the private protocol (differential privacy, 32-bit ring words sized from public bounds,
the noisy opening, no per-round loss release) with all 204 features, then 8 features per round
drawn from a public seed (the private default). Each step's factor is the previous row's bytes
over its own; its share of the saving is its part of the logarithm of the total factor (the
levers multiply, so their shares add up in log terms). Sibling subtraction is in every row (the
histogram protocol has it too), so it is not a step: its factor is computed from the cells (a
tree of depth 4 would fetch 15 node histograms instead of 8).
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_seglearn_accuracy as seglearn
import numpy as np
from _common import description, markdown_table, print_machine


def load_fleet():
    from edge_client.training_data import ClientData
    from firmware_bridge.importers import seglearn_watch

    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-bytes-") as tmp:
        subjects, _ = seglearn.load_subjects(Path(tmp), classes)
    splits = [seglearn.subject_tail(s) for s in subjects]
    clients = [
        ClientData(f"subject-{i:02d}", s.X[p.train].astype(np.float32), s.y[p.train])
        for i, (s, p) in enumerate(zip(subjects, splits))
    ]
    Xte = np.vstack([s.X[p.test] for s, p in zip(subjects, splits)]).astype(np.float32)
    yte = np.concatenate([s.y[p.test] for s, p in zip(subjects, splits)])
    return clients, Xte, yte


def run(clients, Xte, yte, algorithm=None, **settings) -> tuple[float, float, float, dict]:
    """(MB per gateway, accuracy, seconds, model metadata) of one training: ``algorithm``, else
    ``FedSCSXGB(n_rounds=10, max_depth=4, gamma=0.1, **settings)``."""
    from aggregator.algorithms import FedSCSXGB
    from aggregator.simulate import Simulation

    sim = Simulation(clients, record_bodies=False)
    started = time.perf_counter()
    model = sim.run(algorithm or FedSCSXGB(n_rounds=10, max_depth=4, gamma=0.1, **settings))
    seconds = time.perf_counter() - started
    accuracy = float(np.mean(model.predict(Xte) == yte))
    return sim.client_bytes() / len(clients) / 1e6, accuracy, seconds, dict(model.metadata)


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument(
        "--with-histogram",
        action="store_true",
        help="also run the non-DP histogram protocol at 256 bins (about a minute, several GB)",
    )
    parser.add_argument(
        "--levers",
        action="store_true",
        help="the cumulative lever table from the non-DP histogram protocol at 256 bins (several GB, "
        "about two minutes)",
    )
    parser.add_argument(
        "--fedforest",
        action="store_true",
        help="FedForest instead: 50 trees of depth 8, the private default and the non-DP histogram "
        "protocol (under a minute)",
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the non-DP rows' one-line warnings
    if args.levers:
        levers()
        return
    if args.fedforest:
        forest()
        return
    print_machine(
        "Private FedSCS-XGB: bytes per gateway per training, by lever",
        " ".join(["python", "benchmarks/bench_private_bytes.py", *sys.argv[1:]]),
    )
    clients, Xte, yte = load_fleet()
    rows, default_mb = [], None
    variants = [
        ("private default (8 features per round, 8 bins)", {}),
        ("all 204 features per round", {"dp_features": 204}),
        ("256 bins", {"n_bins": 256}),
    ]
    if args.with_histogram:
        variants.append(
            (
                "histogram protocol, no DP, 256 bins (the former default)",
                {"protocol": "histogram", "n_bins": 256, "learning_rate": 0.2},
            )
        )
    for name, settings in variants:
        mb, accuracy, seconds, meta = run(clients, Xte, yte, **settings)
        default_mb = default_mb or mb
        eps = f"{meta['dp_epsilon']:.2f}" if "dp_epsilon" in meta else "none"
        rows.append([name, f"{mb:.3f}", f"{mb / default_mb:.1f}x", f"{accuracy:.3f}", eps, f"{seconds:.1f}"])
    print(
        markdown_table(
            ["configuration", "MB sent per gateway", "vs default", "accuracy (1 run)", "epsilon spent", "seconds"], rows
        )
    )
    print()
    print(
        "Levers that are not settings (computed from the default's cells): sibling subtraction -- every level "
        "below the root would send both children, 1 + 2 + 4 + 8 = 15 node histograms per tree of depth 4 instead "
        "of 1 + 1 + 2 + 4 = 8 (1.9x the level bytes); 32-bit ring words -- 64-bit words would double every "
        "vector (2x)."
    )
    print(f"\npeak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


def forest() -> None:
    """FedForest's bytes per gateway per training: 50 trees of depth 8, private default and the
    non-DP histogram protocol."""
    from aggregator.algorithms import FedForest

    print_machine(
        "Private FedForest: bytes per gateway per training",
        " ".join(["python", "benchmarks/bench_private_bytes.py", *sys.argv[1:]]),
    )
    clients, Xte, yte = load_fleet()
    rows = []
    for name, algorithm in [
        ("private default (16 bins, epsilon 8)", FedForest(n_trees=50, max_depth=8)),
        ("private, epsilon 1", FedForest(n_trees=50, max_depth=8, dp_epsilon=1.0)),
        ("histogram protocol, no DP, 32 bins", FedForest(n_trees=50, max_depth=8, protocol="histogram")),
    ]:
        mb, accuracy, seconds, meta = run(clients, Xte, yte, algorithm)
        eps = f"{meta['dp_epsilon']:.2f}" if "dp_epsilon" in meta else "none"
        rows.append([name, f"{mb:.3f}", f"{accuracy:.3f}", eps, f"{seconds:.1f}"])
    print(
        markdown_table(
            [
                "FedForest(n_trees=50, max_depth=8)",
                "MB sent per gateway",
                "accuracy (1 run)",
                "epsilon spent",
                "seconds",
            ],
            rows,
        )
    )
    print(f"\npeak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


LEVERS = [
    (
        "histogram protocol, no DP, 256 bins, one tree per class and round (the former default)",
        {"protocol": "histogram", "n_bins": 256, "learning_rate": 0.2, "multi_strategy": "one_output_per_tree"},
    ),
    (
        "+ one vector-leaf tree per round (multi-output)",
        {"protocol": "histogram", "n_bins": 256, "learning_rate": 0.2, "multi_strategy": "multi_output_tree"},
    ),
    ("+ 8 bins", {"protocol": "histogram", "n_bins": 8, "learning_rate": 0.2, "multi_strategy": "multi_output_tree"}),
    (
        "+ private protocol (DP, 32-bit words, noisy opening), all 204 features per round",
        {"protocol": "private", "dp_features": 204},
    ),
    ("+ 8 features per round from a public seed (the private default)", {}),
]


def levers() -> None:
    """The cumulative lever table (module docstring)."""
    print_machine(
        "Private FedSCS-XGB: each lever's share of the byte saving",
        " ".join(["python", "benchmarks/bench_private_bytes.py", *sys.argv[1:]]),
    )
    clients, Xte, yte = load_fleet()
    measured = []
    for name, settings in LEVERS:
        mb, accuracy, seconds, meta = run(clients, Xte, yte, **settings)
        measured.append((name, mb, accuracy, meta))
        print(f"  {name}: {mb:.3f} MB per gateway, {seconds:.0f} s", file=sys.stderr, flush=True)
    total = np.log(measured[0][1] / measured[-1][1])
    rows = []
    for k, (name, mb, accuracy, meta) in enumerate(measured):
        factor = measured[k - 1][1] / mb if k else 1.0
        eps = f"{meta['dp_epsilon']:.2f}" if "dp_epsilon" in meta else "none"
        rows.append(
            [
                name,
                f"{mb:.3f}",
                "-" if not k else f"{factor:.2f}x",
                "-" if not k else f"{np.log(factor) / total:.0%}",
                f"{accuracy:.3f}",
                eps,
            ]
        )
    print(
        markdown_table(
            [
                "configuration (cumulative)",
                "MB sent per gateway",
                "factor of this step",
                "share of the saving (log)",
                "accuracy (1 run)",
                "epsilon spent",
            ],
            rows,
        )
    )
    print(
        f"\ntotal: {measured[0][1]:.1f} MB -> {measured[-1][1]:.3f} MB per gateway, "
        f"{measured[0][1] / measured[-1][1]:.0f}x. Sibling subtraction, in every row: a tree of depth 4 fetches "
        "1 + 1 + 2 + 4 = 8 node histograms instead of 1 + 2 + 4 + 8 = 15 (1.9x on the level bytes)."
    )
    print(f"\npeak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
