"""FedForest regression: the private default against the non-DP protocols and scikit-learn.

    nice .venv/bin/python benchmarks/bench_private_forest_regression.py [--seeds N] [--jobs J]
                                                                        [--scenarios a,b,...]

Test MSE, mean ± std over seeds (paired: every method sees the same data per seed), of

* ``private ε=E``: ``FedForest(task="regression")`` -- the private default -- at ``dp_epsilon``
  E (8 is the default);
* ``private ε=8, 64 bins``: the default at ε = 8 with ``n_bins=64`` instead of 16 (finer edges:
  better on large fleets, noisier cells on small ones);
* ``private, noise off``: the same private protocol with every gateway's noise share zeroed
  (the server still sets its thresholds and stopping for ε = 8): what the private structure
  -- a public target range, coarse noisy edges, splits read from the root release's marginals,
  one release for the leaves -- costs by itself;
* ``histogram``: ``protocol="histogram"`` (secure sums, no differential privacy);
* ``sketches``: ``protocol="sketches"`` (the paper's);
* ``sklearn RF``: ``RandomForestRegressor`` on the pooled training rows.

Scenarios (every federated run is the real server and client halves over the in-memory
transport):

* ``toy``: 4 clients x 200 rows, x ~ N(0, I_5), y = 3 [x0 > 0] + x1 + N(0, 0.1^2); 10 trees,
  depth 6, every feature tried per split; 2,000 test rows from the same distribution.
* ``toy-large``: the same with 20 clients x 2,000 rows (where differential privacy has room).
* ``paper-homogeneous``, ``paper-covariate``, ``paper-outcome``: the FedForest paper's §5
  synthetic settings (``bench_fedforest_synthetic``: 10 clients, 140 training rows each, d = 20,
  the mixture test sample), 10 trees (the paper: 50), depth 8, d/3 features per split.

App. F.1.1's disjoint-support settings have 2 clients: secure aggregation (which the private
and histogram protocols need) takes at least 3, so they are not run here.

``max_features`` does not apply to the private protocol: its regression trees split where the
root release's marginals call for a split, on every feature (``dp_features``).

The last column is the private default's MSE over the sketches protocol's (the product target:
<= 1.10). A private training whose range release shows nothing above its noise is refused
(``TargetRangeUnreadable``); a cell counts such refusals and averages the runs that trained.
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

EPSILONS = (1.0, 4.0, 8.0, 32.0)
SCENARIOS = ["toy", "paper-homogeneous", "paper-covariate", "paper-outcome", "toy-large"]
PAPER_SETTING = {
    "paper-homogeneous": "homogeneous",
    "paper-covariate": "covariate shift",
    "paper-outcome": "outcome shift",
}


def _toy(seed: int, n_clients: int, n: int):
    from edge_client.training_data import ClientData

    rng = np.random.default_rng([7, seed, n_clients])

    def draw(m: int):
        X = rng.normal(size=(m, 5))
        return X, 3.0 * (X[:, 0] > 0) + X[:, 1] + rng.normal(0.0, 0.1, m)

    clients = [ClientData(f"gw-{k:02d}", *draw(n)) for k in range(n_clients)]
    return clients, *draw(2000)


def data(scenario: str, seed: int):
    """(clients, X_test, y_test, settings) of one scenario and seed."""
    if scenario == "toy":
        return (*_toy(seed, 4, 200), {"n_trees": 10, "max_depth": 6, "max_features": None})
    if scenario == "toy-large":
        return (*_toy(seed, 20, 2000), {"n_trees": 10, "max_depth": 6, "max_features": None})
    import bench_fedforest_synthetic as paper
    from edge_client.training_data import ClientData

    blocks = paper.make_blocks(PAPER_SETTING[scenario], seed)
    clients = [ClientData(b.client_id, b.X, b.y) for b in blocks]
    X_test = np.vstack([b.X_test for b in blocks])
    y_test = np.concatenate([b.y_test for b in blocks])
    return clients, X_test, y_test, {"n_trees": 10, "max_depth": 8, "max_features": 1 / 3}


def cell(args: tuple[str, int]) -> dict[str, float]:
    """Every method's test MSE on one (scenario, seed)."""
    scenario, seed = args
    logging_off()
    from sklearn.ensemble import RandomForestRegressor

    from aggregator.algorithms import FedForest
    from aggregator.algorithms.private_fleet import TargetRangeUnreadable
    from aggregator.simulate import Simulation

    clients, X_test, y_test, s = data(scenario, seed)

    def mse(model) -> float:
        return float(np.mean((model.predict(X_test).ravel() - y_test) ** 2))

    def private(epsilon: float, **options) -> FedForest:
        return FedForest(
            task="regression", n_trees=s["n_trees"], max_depth=s["max_depth"], dp_epsilon=epsilon, **options
        )

    def private_mse(epsilon: float, **options) -> float:
        """The private default's test MSE, NaN when the job is refused (its range release shows
        nothing above the noise)."""
        try:
            return mse(Simulation(clients).run(private(epsilon, **options), seed=seed))
        except TargetRangeUnreadable:
            return float("nan")

    out: dict[str, float] = {}
    started = time.monotonic()
    for eps in EPSILONS:
        out[f"private ε={eps:g}"] = private_mse(eps)
    trained = sum(np.isfinite(out[f"private ε={eps:g}"]) for eps in EPSILONS)
    out["time private"] = (time.monotonic() - started) / trained if trained else float("nan")
    out["private ε=8, 64 bins"] = private_mse(8.0, n_bins=64)
    common = {"n_trees": s["n_trees"], "max_depth": s["max_depth"], "max_features": s["max_features"]}
    started = time.monotonic()
    out["histogram"] = mse(
        Simulation(clients).run(FedForest(task="regression", protocol="histogram", **common), seed=seed)
    )
    out["time histogram"] = time.monotonic() - started
    started = time.monotonic()
    out["sketches"] = mse(
        Simulation(clients).run(
            FedForest(task="regression", protocol="sketches", secure_aggregation=False, **common), seed=seed
        )
    )
    out["time sketches"] = time.monotonic() - started
    X = np.vstack([c.X for c in clients])
    y = np.concatenate([c.y for c in clients])
    rf = RandomForestRegressor(
        n_estimators=s["n_trees"], max_depth=s["max_depth"], max_features=s["max_features"] or 1.0, random_state=seed
    ).fit(X, y)
    out["sklearn RF"] = float(np.mean((rf.predict(X_test) - y_test) ** 2))
    import edge_client.algorithms.fedforest as client_half

    noise_off = without_noise(lambda: Simulation(clients).run(private(8.0), seed=seed), client_half)
    out["private, noise off"] = mse(noise_off)
    return out


def logging_off() -> None:
    import logging

    logging.disable(logging.WARNING)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    args = parser.parse_args()
    scenarios = args.scenarios.split(",")
    started = time.monotonic()
    print(
        f"# FedForest regression, {args.seeds} seeds, {platform.processor() or platform.machine()} "
        f"({os.cpu_count()} cores), python {sys.version.split()[0]}"
    )
    methods = [f"private ε={e:g}" for e in EPSILONS] + [
        "private ε=8, 64 bins",
        "private, noise off",
        "histogram",
        "sketches",
        "sklearn RF",
    ]
    print(
        "| scenario | " + " | ".join(methods) + " | private ε=8 / sketches | s per fit: private, histogram, sketches |"
    )
    print("|---" * (len(methods) + 3) + "|", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        for sc in scenarios:  # one row as each scenario finishes
            rows = list(pool.map(cell, [(sc, seed) for seed in range(args.seeds)]))
            cells = [trained_mean_std([r[m] for r in rows], 3) for m in methods]
            ratio = np.array([r["private ε=8"] / r["sketches"] for r in rows])
            times = ", ".join(
                f"{np.nanmean([r['time ' + m] for r in rows]):.1f}" for m in ("private", "histogram", "sketches")
            )
            print(
                f"| {sc} | "
                + " | ".join(cells)
                + f" | {np.nanmean(ratio):.2f} (max {np.nanmax(ratio):.2f}) | {times} |",
                flush=True,
            )
    print(f"# {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
