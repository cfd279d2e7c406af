"""The private default's knobs on the real recordings: the minimum crowd and differential privacy.

FedSCS-XGB (histogram protocol, secure aggregation; n_rounds=10, max_depth=4, learning_rate=0.2,
gamma=0.1, reg_lambda=1, n_bins=64) and FedForest (n_trees=30, max_depth=8, n_bins=32,
min_samples_leaf=5, bootstrap=False -- DP needs it) on the bundled seglearn recordings, one
gateway per subject, the tail of every subject's series held out
(``bench_privacy.seglearn_fleet``), over split seeds 0..N-1. Per setting: accuracy on the pooled
held-out windows (mean ± sd), the paired difference against the algorithm's default
(``min_crowd=5``, no noise), and for DP the (epsilon, delta = 1e-5) the model reports (zCDP
accounting over every released sum of the job).

    .venv/bin/python benchmarks/bench_privacy_knobs.py            # 10 seeds (~15 min on 2 cores)
    .venv/bin/python benchmarks/bench_privacy_knobs.py --quick    # 2 seeds
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_privacy as bp
import bench_seglearn_accuracy as seglearn
import numpy as np
from _common import description, markdown_table, print_machine

SETTINGS: dict[str, dict] = {
    "FedForest, default (min_crowd=5)": {"forest": True},
    "FedForest, min_crowd=20": {"forest": True, "min_crowd": 20},
    "FedForest, DP, noise multiplier 0.1": {"forest": True, "dp_noise_multiplier": 0.1},
    "FedForest, DP, noise multiplier 1": {"forest": True, "dp_noise_multiplier": 1.0},
    "default (min_crowd=5)": {},
    "min_crowd=1": {"min_crowd": 1},
    "min_crowd=20": {"min_crowd": 20},
    "DP, noise multiplier 0.01": {"dp_noise_multiplier": 0.01},
    "DP, noise multiplier 0.1": {"dp_noise_multiplier": 0.1},
    "DP, noise multiplier 0.5": {"dp_noise_multiplier": 0.5},
    "DP, noise multiplier 2": {"dp_noise_multiplier": 2.0},
    "DP, noise multiplier 8": {"dp_noise_multiplier": 8.0},
}


def run(args: tuple[str, int, int]) -> tuple[str, int, float, float, float]:
    from aggregator.algorithms import FedForest, FedSCSXGB
    from aggregator.simulate import Simulation

    name, seed, rounds = args
    fleet = bp.seglearn_fleet(seed)
    options = dict(SETTINGS[name])
    if options.pop("forest", False):
        config = FedForest(
            n_trees=30 if rounds > 3 else 10, max_depth=8, n_bins=32, min_samples_leaf=5, bootstrap=False, **options
        )
    else:
        config = FedSCSXGB(
            n_rounds=rounds, max_depth=4, learning_rate=0.2, gamma=0.1, reg_lambda=1.0, n_bins=64, **options
        )
    started = time.perf_counter()
    model = Simulation(fleet.clients, record_bodies=False).run(config, seed=seed)
    accuracy = float(np.mean(model.predict(fleet.Xte) == fleet.yte))
    return name, seed, accuracy, float(model.metadata.get("dp_epsilon", 0.0)), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="2 seeds, 3 rounds")
    parser.add_argument("--seeds", type=int, help="split seeds 0..N-1 (default 10)")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    n_seeds = args.seeds or (2 if args.quick else 10)
    rounds = 3 if args.quick else 10
    from firmware_bridge.importers import seglearn_watch

    print_machine(
        "Privacy knobs: minimum crowd and differential privacy",
        shlex.join([".venv/bin/python", "benchmarks/bench_privacy_knobs.py", *sys.argv[1:]]),
        {},
    )
    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-knobs-") as tmp:
        subjects, _ = seglearn.load_subjects(Path(tmp), classes)
    raw = bp.raw_imu_bytes()
    bp._init_worker(subjects, raw)
    tasks = [(name, seed, rounds) for seed in range(n_seeds) for name in SETTINGS]
    results: dict[tuple[str, int], tuple[float, float, float]] = {}
    with ProcessPoolExecutor(args.jobs, initializer=bp._init_worker, initargs=(subjects, raw)) as pool:
        for name, seed, accuracy, epsilon, seconds in pool.map(run, tasks):
            results[(name, seed)] = (accuracy, epsilon, seconds)
            print(
                f"  {name}, seed {seed}: accuracy {accuracy:.4f}, epsilon {epsilon:.3g} ({seconds:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    bases = {
        forest: np.array([results[(name, s)][0] for s in range(n_seeds)])
        for forest, name in ((True, "FedForest, default (min_crowd=5)"), (False, "default (min_crowd=5)"))
    }
    rows = []
    for name in SETTINGS:
        base = bases["forest" in SETTINGS[name]]
        acc = np.array([results[(name, s)][0] for s in range(n_seeds)])
        eps = np.array([results[(name, s)][1] for s in range(n_seeds)])
        secs = np.array([results[(name, s)][2] for s in range(n_seeds)])
        rows.append(
            [
                name if "forest" in SETTINGS[name] else f"FedSCS-XGB, {name}",
                bp.pm(acc),
                bp.pm(acc - base) if "default" not in name else "-",
                f"{eps.mean():.3g}" if eps.any() else "-",
                f"{secs.mean():.0f} s",
            ]
        )
    print(
        markdown_table(
            [
                "setting",
                f"accuracy ({n_seeds} seeds)",
                "paired diff. vs default",
                "epsilon (delta 1e-5)",
                "time per training",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
