"""FedSCS-XGB regression: the private default against the histogram protocol and xgboost.

    cd benchmarks && ulimit -v 4000000; nice -n 10 ../.venv/bin/python bench_private_xgb_regression.py
        [--seeds N] [--jobs J] [--datasets diabetes,randhie]

Test RMSE, mean ± std over seeds (paired: every method sees the same split per seed), of

* ``private ε=E``: ``FedSCSXGB(objective="squared_error")`` -- the private default (20 rounds of
  depth 6, 8 bins, learning rate 0.5, residuals clipped to half the width of the noisy octave
  range of the targets) -- at ``dp_epsilon`` E (8 is the default); a training whose range
  release shows nothing above its noise is refused (``TargetRangeUnreadable``): its cell counts
  the refusals and averages the runs that trained;
* ``private, noise off``: the same at ε = 8 with every gateway's noise share zeroed (the
  server's noise-aware thresholds still those of ε = 8): what the private structure -- coarse
  noisy edges, ``dp_features`` features per round, clipped residuals and leaves -- costs by
  itself;
* ``histogram``: ``protocol="histogram"`` (secure sums of exact histograms, no differential
  privacy; 10 rounds of depth 4, 256 bins, learning rate 0.2: the paper's settings);
* ``xgboost``: ``xgboost.train`` on the pooled training rows with the histogram protocol's
  settings (``tree_method="hist"``, ``max_bin=256``, ``gamma=0.1``, ``lambda=1``);
* ``mean``: the training targets' mean for every row (what a model must beat).

Data (nothing is downloaded; both sets ship in wheels the dev extra installs): scikit-learn's
``diabetes`` (442 patients, 10 features, disease progression 25-346) and statsmodels'
``randhie`` (20,190 RAND health-insurance records, 9 features, outpatient visits 0-77). Per
seed a random 80 % / 20 % train/test split; the training rows are dealt at random to 10
gateways. Every federated run is the real server and gateway halves over the in-memory
transport (``aggregator.Simulation``) with secure aggregation.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import trained_mean_std, without_noise

EPSILONS = (1.0, 4.0, 8.0)
DATASETS = ("diabetes", "randhie")
GATEWAYS = 10
METHODS = [f"private ε={e:g}" for e in EPSILONS] + ["private, noise off", "histogram", "xgboost", "mean"]


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features and target of a bundled regression set."""
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True)
        return np.asarray(X, np.float64), np.asarray(y, np.float64)
    if name == "randhie":
        from statsmodels.datasets import randhie

        data = randhie.load_pandas()
        return data.exog.to_numpy(np.float64), data.endog.to_numpy(np.float64).ravel()
    raise ValueError(f"unknown dataset {name!r}: choose from {', '.join(DATASETS)}")


def split(name: str, seed: int):
    """(gateways' ClientData, X_test, y_test) of one seed: 80/20, training rows dealt to 10."""
    from edge_client.training_data import ClientData

    X, y = load(name)
    rng = np.random.default_rng([11, seed])
    order = rng.permutation(y.shape[0])
    n_test = y.shape[0] // 5
    test, train = order[:n_test], order[n_test:]
    parts = np.array_split(train, GATEWAYS)
    clients = [ClientData(f"gw-{k:02d}", X[p], y[p]) for k, p in enumerate(parts)]
    return clients, X[test], y[test]


def cell(args: tuple[str, int]) -> dict[str, float]:
    """Every method's test RMSE on one (dataset, seed), and seconds per fit."""
    name, seed = args
    import logging

    logging.disable(logging.WARNING)
    import xgboost

    from aggregator.algorithms import FedSCSXGB
    from aggregator.algorithms.private_fleet import TargetRangeUnreadable
    from aggregator.simulate import Simulation

    clients, X_test, y_test = split(name, seed)

    def rmse(prediction) -> float:
        return float(np.sqrt(np.mean((np.ravel(prediction) - y_test) ** 2)))

    out: dict[str, float] = {}
    started = time.monotonic()
    for eps in EPSILONS:
        try:
            model = Simulation(clients).run(FedSCSXGB(objective="squared_error", dp_epsilon=eps), seed=seed)
        except TargetRangeUnreadable:  # the budget cannot say where the targets lie: refused
            out[f"private ε={eps:g}"] = out[f"spent ε={eps:g}"] = float("nan")
            continue
        out[f"private ε={eps:g}"] = rmse(model.predict(X_test))
        out[f"spent ε={eps:g}"] = float(model.metadata["dp_epsilon"])
    out["time private"] = (time.monotonic() - started) / len(EPSILONS)
    import edge_client.algorithms.fedscs_xgb as client_half

    noise_off = without_noise(
        lambda: Simulation(clients).run(FedSCSXGB(objective="squared_error"), seed=seed), client_half
    )
    out["private, noise off"] = rmse(noise_off.predict(X_test))
    started = time.monotonic()
    histogram = Simulation(clients).run(FedSCSXGB(objective="squared_error", protocol="histogram"), seed=seed)
    out["time histogram"] = time.monotonic() - started
    out["histogram"] = rmse(histogram.predict(X_test))
    X = np.vstack([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    params = {
        "objective": "reg:squarederror",
        "tree_method": "hist",
        "max_bin": 256,
        "max_depth": 4,
        "eta": 0.2,
        "gamma": 0.1,
        "lambda": 1.0,
        "nthread": 1,
        "seed": seed,
    }
    booster = xgboost.train(params, xgboost.DMatrix(X, y), num_boost_round=10)
    out["xgboost"] = rmse(booster.predict(xgboost.DMatrix(X_test)))
    out["mean"] = rmse(np.full(y_test.shape, y.mean()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    args = parser.parse_args()
    started = time.monotonic()
    print(
        f"# FedSCS-XGB regression over {GATEWAYS} gateways, {args.seeds} seeds, "
        f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores), python {sys.version.split()[0]}"
    )
    print(
        "| data set | "
        + " | ".join(METHODS)
        + " | private ε=8 / histogram | ε spent at 1, 4, 8 (max) | s per fit: private, histogram |"
    )
    print("|---" * (len(METHODS) + 4) + "|", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for name in args.datasets.split(","):  # one row as each data set finishes
            rows = list(pool.map(cell, [(name, seed) for seed in range(args.seeds)]))
            cells = [trained_mean_std([r[m] for r in rows]) for m in METHODS]
            ratio = np.array([r["private ε=8"] / r["histogram"] for r in rows])
            spent = ", ".join(f"{np.nanmax([r[f'spent ε={e:g}'] for r in rows] + [0.0]):.2f}" for e in EPSILONS)
            times = ", ".join(f"{np.mean([r['time ' + m] for r in rows]):.1f}" for m in ("private", "histogram"))
            print(
                f"| {name} | "
                + " | ".join(cells)
                + f" | {np.nanmean(ratio):.2f} (max {np.nanmax(ratio):.2f}) | {spent} | {times} |",
                flush=True,
            )
    print(f"# {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
