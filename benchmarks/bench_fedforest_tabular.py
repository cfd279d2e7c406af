"""FedForest on scikit-learn's diabetes, breast_cancer and wine split over K = 20 clients by
Dirichlet label skew (App. B): FedForest vs centralized scikit-learn RF vs Local Learning vs
Local Ensembling, mean ± std over seeds.

    .venv/bin/python benchmarks/bench_fedforest_tabular.py [--quick] [--seeds N] [--jobs J]

Protocol, per (dataset, alpha, seed):
1. Held-out test set: 30 % of the rows, stratified by class (classification) or by target
   quintile (diabetes), ``default_rng([dataset, seed])``; the rest is the training pool.
2. Partition (App. B says only "Dirichlet allocation over K = 20 clients"; this is the scheme of
   Hsu et al. 2019, label-distribution skew with equal client sizes): the training pool's
   "label" is the class, or for regression the target quintile (5 bins at the training pool's
   quantiles); prior p = the pool's label frequencies. Client sizes are n // K or n // K + 1
   (rows shuffled). Client k draws label proportions q_k ~ Dirichlet(alpha * K_labels * p)
   (so the mean is p and alpha is the concentration per label) and fills its slots one by one,
   drawing a label from q_k restricted to the labels still available, and a random remaining row
   of that label, without replacement. Every row goes to exactly one client, no client is empty,
   alpha = 0.1 gives nearly single-label clients, alpha = 10 nearly i.i.d. ones.
3. Methods (the paper's hyper-parameters: T = 50 trees, max_depth 8, min_samples_leaf 5,
   max_features d/3 (regression) or sqrt(d) (classification), bootstrap, B = 32):
   * FedForest = ``FedForest(task=..., evaluation="exact")`` (quantile candidates, exact pooled
     gains, no client splits) through ``Simulation(clients).run(FedForest(protocol="sketches", ...), seed=seed)``;
   * Centralized RF = scikit-learn ``RandomForestRegressor/Classifier`` with the same settings
     on the pooled training rows;
   * Local Learning = ``LocalLearning(forest)``: each client's own 50-tree forest, each scored on
     the whole test set, averaged over the 20 clients (per seed);
   * Local Ensembling = ``LocalEnsembling(forest)`` (library default: 50 // 20 = 2 trees per
     client, 40 trees averaged).
4. Metric on the pooled held-out test set: R^2 (diabetes), balanced accuracy (breast_cancer, wine).

Output: one table of mean ± std over seeds per (dataset, alpha), with per cell "FedForest
within one std of centralized RF" = |mean_FF - mean_RF| <= max(sd_FF, sd_RF), and "ahead of
LL / LE" = mean_FF > mean_LL and mean_FF > mean_LE (the issue's goal). ``--quick``: 2 seeds; default 10 seeds.
``--jobs`` (default 2) runs cells in parallel worker processes. Runtime on the 2-core dev
machine (load ~3): full (10 seeds) 7.5 min.

Exit status 1 if a correctness check fails: every partition covers the training pool exactly
once with 20 non-empty clients; every score finite; FedForest's and the library baselines'
predictions are labels of the dataset.
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
from _fedforest_common import Block, client_data, log, mean_std

K = 20
ALPHAS = (0.1, 1.0, 10.0)
DATASETS = ("diabetes", "breast_cancer", "wine")
TEST_FRACTION = 0.3
N_QUANTILE_BINS = 5
METHODS = ("FedForest", "Centralized RF", "Local Learning", "Local Ensembling")


#: Generated datasets (``bench_fedforest_appendix.py``): drawn afresh per seed, regression or not.
GENERATED = {"make_classification": False, "make_friedman1": True}


def load(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray, bool]:
    """(X, y, regression): a dataset shipped with scikit-learn (``load_<name>``), or one generated
    with ``seed``: ``make_classification`` (1,000 x 20, 3 classes, 8 informative) or
    ``make_friedman1`` (1,000 x 10, noise 1)."""
    from sklearn import datasets

    if name == "make_classification":
        X, y = datasets.make_classification(
            n_samples=1000, n_features=20, n_informative=8, n_classes=3, random_state=seed
        )
        return X, y, False
    if name == "make_friedman1":
        X, y = datasets.make_friedman1(n_samples=1000, n_features=10, noise=1.0, random_state=seed)
        return X, y, True
    data = getattr(datasets, f"load_{name}")()
    return np.asarray(data.data, dtype=np.float64), np.asarray(data.target), name == "diabetes"


def strata(y: np.ndarray, regression: bool, edges: np.ndarray | None = None) -> np.ndarray:
    if not regression:
        return np.unique(y, return_inverse=True)[1]
    if edges is None:
        edges = np.quantile(y, np.linspace(0, 1, N_QUANTILE_BINS + 1)[1:-1])
    return np.searchsorted(edges, y, side="right")


def test_split(y: np.ndarray, regression: bool, rng) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows): TEST_FRACTION of every stratum held out."""
    s = strata(y, regression)
    test = []
    for label in np.unique(s):
        rows = rng.permutation(np.flatnonzero(s == label))
        test.append(rows[: round(TEST_FRACTION * rows.size)])
    test = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(y.size), test), test


def dirichlet_partition(labels: np.ndarray, alpha: float, rng) -> list[np.ndarray]:
    """Hsu et al. (2019) label skew with equal sizes: see the module docstring (step 2)."""
    n = labels.size
    values, inverse = np.unique(labels, return_inverse=True)
    L = values.size
    prior = np.bincount(inverse, minlength=L) / n
    pools = [list(rng.permutation(np.flatnonzero(inverse == c))) for c in range(L)]
    sizes = np.full(K, n // K)
    sizes[rng.permutation(K)[: n % K]] += 1
    parts = []
    for k in range(K):
        q = rng.dirichlet(np.maximum(alpha * L * prior, 1e-12))
        rows = []
        for _ in range(sizes[k]):
            left = np.array([len(p) > 0 for p in pools], dtype=np.float64)
            w = q * left
            w = w / w.sum() if w.sum() > 0 else left / left.sum()
            c = int(rng.choice(L, p=w))
            rows.append(pools[c].pop())
        parts.append(np.sort(np.array(rows, dtype=np.int64)))
    return parts


def score(y_true: np.ndarray, pred: np.ndarray, regression: bool) -> float:
    from sklearn.metrics import balanced_accuracy_score, r2_score

    if regression:
        return float(r2_score(y_true, pred))
    return float(balanced_accuracy_score(np.asarray(y_true).astype(str), np.asarray(pred).astype(str)))


def run_cell(dataset: str, alpha: float, seed: int, n_trees: int) -> dict:
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    from aggregator.algorithms import FedForest
    from aggregator.baselines import LocalEnsembling, LocalLearning
    from aggregator.simulate import Simulation

    X, y, regression = load(dataset)
    rng = np.random.default_rng([DATASETS.index(dataset), seed, int(alpha * 10)])
    train, test = test_split(y, regression, rng)
    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    labels = strata(
        ytr, regression, np.quantile(ytr, np.linspace(0, 1, N_QUANTILE_BINS + 1)[1:-1]) if regression else None
    )
    parts = dirichlet_partition(labels, alpha, rng)
    problems = []
    flat = np.sort(np.concatenate(parts))
    if flat.size != ytr.size or np.any(flat != np.arange(ytr.size)) or min(p.size for p in parts) == 0:
        problems.append(f"{dataset} alpha={alpha} seed {seed}: partition does not cover the pool once")
    blocks = [Block(f"client-{k:02d}", Xtr[p], ytr[p], Xte[:0], yte[:0]) for k, p in enumerate(parts)]
    task = "regression" if regression else "classification"
    forest = FedForest(
        protocol="sketches", n_trees=n_trees, max_depth=8, n_bins=32, task=task, min_samples_leaf=5, max_features="auto"
    )  # d // 3 (regression), int(sqrt(d)) (classification)
    sim = Simulation(client_data(blocks))
    out: dict[str, float] = {}
    seconds: dict[str, float] = {}
    known = set(np.asarray(y).astype(str).tolist())
    for name, algo in (
        ("FedForest", forest),
        ("Local Learning", LocalLearning(forest)),
        ("Local Ensembling", LocalEnsembling(forest)),
    ):
        t0 = time.perf_counter()
        model = sim.run(algo, seed=seed, job_id=f"{dataset}-{alpha}-{seed}-{name}")
        seconds[name] = time.perf_counter() - t0
        models = list(model.values()) if isinstance(model, dict) else [model]
        preds = [m.predict(Xte) for m in models]
        if not regression and not all(set(np.asarray(p).astype(str).tolist()) <= known for p in preds):
            problems.append(f"{dataset} alpha={alpha} seed {seed} {name}: predicts unknown labels")
        out[name] = float(np.mean([score(yte, p, regression) for p in preds]))
    t0 = time.perf_counter()
    if regression:
        rf = RandomForestRegressor(
            n_estimators=n_trees, max_depth=8, min_samples_leaf=5, max_features=1 / 3, random_state=seed, n_jobs=1
        )
    else:
        rf = RandomForestClassifier(
            n_estimators=n_trees, max_depth=8, min_samples_leaf=5, max_features="sqrt", random_state=seed, n_jobs=1
        )
    out["Centralized RF"] = score(yte, rf.fit(Xtr, ytr).predict(Xte), regression)
    seconds["Centralized RF"] = time.perf_counter() - t0
    for k, v in out.items():
        if not np.isfinite(v):
            problems.append(f"{dataset} alpha={alpha} seed {seed} {k}: score {v}")
    # heterogeneity of the partition: mean over clients of the share of its most common label
    purity = float(np.mean([np.bincount(labels[p]).max() / p.size for p in parts]))
    return {
        "dataset": dataset,
        "alpha": alpha,
        "seed": seed,
        "score": out,
        "seconds": seconds,
        "problems": problems,
        "purity": purity,
        "sizes": (min(p.size for p in parts), max(p.size for p in parts)),
        "n_train": int(ytr.size),
        "n_test": int(yte.size),
    }


def _cell(args: tuple) -> dict:
    return run_cell(*args)


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="2 seeds")
    parser.add_argument("--seeds", type=int, help="seeds 0..N-1 (default 10; --quick 2)")
    parser.add_argument("--trees", type=int, default=50, help="trees per forest (default 50, the paper's)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args()
    n_seeds = max(1, args.seeds or (2 if args.quick else 10))

    import sklearn

    command = shlex.join(["python", "benchmarks/bench_fedforest_tabular.py", *sys.argv[1:]])
    print_machine(
        "FedForest on scikit-learn tabular data with Dirichlet label skew over 20 clients (App. B)",
        command,
        {
            "scikit-learn": sklearn.__version__,
            "parallelism": f"{args.jobs} worker processes, one (dataset, alpha, seed) cell each",
        },
    )
    print(
        f"- T = {args.trees}, max_depth 8, min_samples_leaf 5, max_features d/3 (regression) / sqrt(d) "
        f"(classification), B = 32; K = {K}; alpha in {list(ALPHAS)}; seeds 0..{n_seeds - 1}; test = "
        f"{int(TEST_FRACTION * 100)} % stratified hold-out"
    )
    print()

    tasks = [(d, a, s, args.trees) for d in DATASETS for a in ALPHAS for s in range(n_seeds)]
    results = []
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for r in pool.map(_cell, tasks):
            results.append(r)
            log(
                f"{r['dataset']} alpha={r['alpha']} seed {r['seed']}: "
                + ", ".join(f"{k} {v:.3f}" for k, v in r["score"].items())
            )
    wall = time.perf_counter() - started
    failures = [p for r in results for p in r["problems"]]

    rows = []
    goal_met = 0
    for d in DATASETS:
        for a in ALPHAS:
            cell = [r for r in results if r["dataset"] == d and r["alpha"] == a]
            v = {m: [r["score"][m] for r in cell] for m in METHODS}
            mean = {m: float(np.mean(v[m])) for m in METHODS}
            sd = {m: float(np.std(v[m], ddof=1)) if len(v[m]) > 1 else 0.0 for m in METHODS}
            within = abs(mean["FedForest"] - mean["Centralized RF"]) <= max(sd["FedForest"], sd["Centralized RF"])
            ahead = mean["FedForest"] > mean["Local Learning"] and mean["FedForest"] > mean["Local Ensembling"]
            goal_met += within and ahead
            sizes = (min(r["sizes"][0] for r in cell), max(r["sizes"][1] for r in cell))
            rows.append(
                [
                    d,
                    "R²" if d == "diabetes" else "bal. acc.",
                    f"{a:g}",
                    f"{cell[0]['n_train']}",
                    f"{sizes[0]}-{sizes[1]}",
                    f"{np.mean([r['purity'] for r in cell]):.2f}",
                    *(mean_std(v[m]) for m in METHODS),
                    f"{mean['FedForest'] - mean['Centralized RF']:+.3f}",
                    "yes" if within else "no",
                    "yes" if ahead else "no",
                ]
            )
    print(f"### Test score, mean ± std over {n_seeds} seeds (higher is better)\n")
    print(
        markdown_table(
            [
                "dataset",
                "metric",
                "α",
                "train rows",
                "rows/client",
                "label purity",
                "FedForest",
                "Centralized RF",
                "Local Learning (mean over clients)",
                "Local Ensembling",
                "FF − RF",
                "FF within 1 sd of RF",
                "FF ahead of LL and LE",
            ],
            rows,
        )
    )
    print()
    print(
        f"Goal (within one sd of centralized RF and ahead of both local baselines) met in {goal_met} of "
        f"{len(rows)} cells. 'label purity' = mean over clients of the share of the client's most common label "
        "(class or target quintile): 1.0 = single-label clients. 'within 1 sd' = |mean_FF − mean_RF| <= "
        "max(sd_FF, sd_RF)."
    )
    print()
    secs = {m: [r["seconds"][m] for r in results] for m in METHODS}
    print("### Wall time per fit (worker process, median / total over all cells)\n")
    print(
        markdown_table(
            ["method", "median (s)", "total (s)"],
            [[m, f"{np.median(secs[m]):.2f}", f"{np.sum(secs[m]):.0f}"] for m in METHODS],
        )
    )
    print()
    print(
        f"Total wall time of the cells: {wall:.0f} s with {args.jobs} workers; load average at the end "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores."
    )
    print()
    print("correctness: " + ("all checks passed" if not failures else "FAILED"))
    for failure in failures:
        print(f"  - {failure}")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
