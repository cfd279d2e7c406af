"""FedForest on a small fleet of tiny clients: wine's 178 rows, 30 % held
out, the rest dealt to K = 20 clients (6-7 rows each) by Dirichlet label skew, alpha in {0.1, 1,
10}; FedForest's variants against centralized scikit-learn random forests, paired per split.

    .venv/bin/python benchmarks/bench_fedforest_small_fleets.py [--seeds N] [--variants A,B] [--jobs J]

Splits and partitions are ``bench_fedforest_tabular``'s (same rng per (dataset, seed, alpha):
stratified 30 % test set, Hsu et al. label skew with equal client sizes). Scores: accuracy on
the held-out rows. Every FedForest variant runs in simulation over the 20 clients
(``Simulation(clients).run(FedForest(...), seed=seed)``); "Δ vs RF" is the mean ± sd over all
(alpha, seed) cells of the paired difference to scikit-learn's ``RandomForestClassifier`` with
its defaults (100 trees, unlimited depth, sqrt features, ``random_state=seed``), the reference
the issue quotes; "RF (FedForest's settings)" is scikit-learn with FedForest's defaults (50
trees, depth 8).

Variants (FedForest's defaults unless named; the default protocol is the private histogram one):
* ``default`` -- 50 trees, depth 8, 32 bins, min_crowd 5, min_samples_leaf 1;
* ``min_crowd=1`` -- no fleet-wide minimum crowd per child (the privacy knob);
* ``n_bins=256`` -- finer fleet-wide edges;
* ``sketches`` -- the paper's protocol (per-node mixture-quantile candidates, per-client data);
* ``100 trees+depth 30`` -- scikit-learn's forest size and (effectively) unlimited depth;
* ``no bootstrap`` -- every client's rows once in every tree;
* ``a+b``: both; ``--variants`` takes comma-separated names (see VARIANTS).

Runtime on the 2-core dev machine: 10 seeds x 3 alphas x all variants ~ 5 min at load ~3.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine
from _fedforest_common import log, mean_std
from bench_fedforest_tabular import DATASETS, dirichlet_partition, load, strata, test_split

ALPHAS = (0.1, 1.0, 10.0)
#: name -> FedForest keyword arguments.
VARIANTS: dict[str, dict] = {
    "default": {},
    "min_crowd=1": {"min_crowd": 1},
    "n_bins=256": {"n_bins": 256},
    "min_crowd=1+n_bins=256": {"min_crowd": 1, "n_bins": 256},
    "sketches": {"protocol": "sketches"},
    "100 trees+depth 30": {"n_trees": 100, "max_depth": 30},
    "no bootstrap": {"bootstrap": False},
}
REFERENCES = ("RF (scikit-learn defaults)", "RF (FedForest's settings)")


def run_cell(alpha: float, seed: int, variants: tuple[str, ...]) -> dict:
    from sklearn.ensemble import RandomForestClassifier

    from aggregator.algorithms import FedForest
    from aggregator.simulate import Simulation
    from edge_client.training_data import ClientData

    X, y, _ = load("wine")
    rng = np.random.default_rng([DATASETS.index("wine"), seed, int(alpha * 10)])
    train, test = test_split(y, False, rng)
    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    parts = dirichlet_partition(strata(ytr, False), alpha, rng)
    sim = Simulation([ClientData(f"client-{k:02d}", Xtr[p], ytr[p]) for k, p in enumerate(parts)])
    score: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for name, rf in (
        (REFERENCES[0], RandomForestClassifier(random_state=seed, n_jobs=1)),
        (
            REFERENCES[1],
            RandomForestClassifier(n_estimators=50, max_depth=8, max_features="sqrt", random_state=seed, n_jobs=1),
        ),
    ):
        score[name] = float(np.mean(rf.fit(Xtr, ytr).predict(Xte) == yte))
    for name in variants:
        t0 = time.perf_counter()
        model = sim.run(FedForest(**VARIANTS[name]), seed=seed, job_id=f"{alpha}-{seed}-{name}")
        seconds[name] = time.perf_counter() - t0
        score[name] = float(np.mean(model.predict(Xte).astype(ytr.dtype) == yte))
    return {
        "alpha": alpha,
        "seed": seed,
        "score": score,
        "seconds": seconds,
        "rows": (min(p.size for p in parts), max(p.size for p in parts)),
    }


def _cell(args: tuple) -> dict:
    return run_cell(*args)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--seeds", type=int, default=10, help="split seeds 0..N-1 (default 10)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names of VARIANTS")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args()
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")

    import sklearn

    print_machine(
        "FedForest on wine over 20 tiny clients",
        shlex.join(["python", "benchmarks/bench_fedforest_small_fleets.py", *sys.argv[1:]]),
        {"scikit-learn": sklearn.__version__, "parallelism": f"{args.jobs} worker processes"},
    )
    print()
    tasks = [(a, s, variants) for a in ALPHAS for s in range(args.seeds)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = []
        for r in pool.map(_cell, tasks):
            results.append(r)
            log(f"alpha={r['alpha']} seed {r['seed']}: " + ", ".join(f"{k} {v:.3f}" for k, v in r["score"].items()))
    methods = (*REFERENCES, *variants)
    rows = []
    for m in methods:
        by_alpha = [mean_std([r["score"][m] for r in results if r["alpha"] == a]) for a in ALPHAS]
        every = [r["score"][m] for r in results]
        delta = [100 * (r["score"][m] - r["score"][REFERENCES[0]]) for r in results]
        rows.append([m, *by_alpha, mean_std(every), "-" if m == REFERENCES[0] else mean_std(delta, 2)])
    print(f"### Accuracy, mean ± sd over {args.seeds} seeds per α; Δ paired per cell (pp)\n")
    print(markdown_table(["method", *(f"α={a:g}" for a in ALPHAS), "all cells", "Δ vs RF defaults (pp)"], rows))
    print()
    sizes = (min(r["rows"][0] for r in results), max(r["rows"][1] for r in results))
    secs = {v: float(np.median([r["seconds"][v] for r in results])) for v in variants}
    print(
        f"{len(results)} cells, {sizes[0]}-{sizes[1]} training rows per client; median FedForest fit: "
        + ", ".join(f"{v} {s:.2f} s" for v, s in secs.items())
        + f". Wall {time.perf_counter() - started:.0f} s, "
        f"load average at the end {'/'.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
