"""FedGA-Tree against local trees, a centralized tree and the IBM DP tree: the paper's
Fig. 3/8 shape, plus N in {5, 10, 15, 30} and c in {0.25, 0.5, 1}.

    .venv/bin/python benchmarks/bench_fedga_tree.py [--generations G] [--splits S] [--workers W]
                                                     [--skip-recordings] [--quick]

Every FedGA run is ``aggregator.simulate(FedGATree(...), clients, seed)``: the real server and
client halves over the in-memory transport. Per client i, Eq. 3: Δ^i = (score of its FedGA tree
/ score of its local tree - 1) x 100, score = macro F1 on test (classification) or MSE
(regression; negative Δ is better); Δ = mean over clients; "gain" = share of clients whose
FedGA tree scores better than their local tree. Baselines, as §IV-A 2:

* local tree: scikit-learn CART on the client's training data, depth by 5-fold CV in [2, 15];
* centralized tree: the same on the pooled training data (one tree, scored per client too);
* IBM tree (classification only): ``aggregator.baselines.DPTree``, depth 6, ε = 1, candidate
  thresholds at the edges of 5 quantile bins of the pooled training data (the paper
  discretises with KBinsDiscretizer).

Data. Generated (scikit-learn ``make_*``, ≥ 200 training samples per client at N = 20): each
split draws a fresh dataset of 5,000 samples (seed = split), 10 % common test set, the rest dealt
at random to the clients (the paper's protocol). Real: the bundled seglearn watch recordings
(``bench_seglearn_accuracy.load_subjects``), one client per subject, 204 features, the
"series tail" split (last 20 % of every exercise series tests, after a one-window gap); the
split is fixed, so its rows vary the GA seed only.

Each table row: mean ± sd over the splits (or seeds) of the per-split mean over clients.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine

CLASSIFICATION = ("make_classification", "hastie_10_2", "gaussian_quantiles", "moons")
REGRESSION = ("friedman1", "make_regression")
N_SAMPLES = 5000
PARTS = ("generated", "grid", "recordings")


def generated(name: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn import datasets

    rng = np.random.RandomState(seed)
    if name == "make_classification":
        return datasets.make_classification(N_SAMPLES, 10, n_informative=6, n_classes=3, flip_y=0.05,
                                            random_state=rng)
    if name == "hastie_10_2":
        X, y = datasets.make_hastie_10_2(N_SAMPLES, random_state=rng)
        return X, (y > 0).astype(int)
    if name == "gaussian_quantiles":
        return datasets.make_gaussian_quantiles(n_samples=N_SAMPLES, n_features=6, n_classes=3, random_state=rng)
    if name == "moons":
        X, y = datasets.make_moons(N_SAMPLES, noise=0.3, random_state=rng)
        return np.column_stack([X, rng.normal(size=(N_SAMPLES, 4))]), y  # 4 noise features
    if name == "friedman1":
        return datasets.make_friedman1(N_SAMPLES, n_features=8, noise=1.0, random_state=rng)
    if name == "make_regression":
        X, y = datasets.make_regression(N_SAMPLES, 8, n_informative=4, noise=20.0, random_state=rng)
        return X, y + 5 * np.sin(X[:, 0]) * X[:, 1]
    raise ValueError(f"unknown dataset {name!r}")


@dataclass
class Case:
    """One FedGA run: clients' (X, y) train and test, and the settings."""

    label: str
    regression: bool
    train: list[tuple[np.ndarray, np.ndarray]]
    test: list[tuple[np.ndarray, np.ndarray]]
    seed: int
    generations: int
    active_fraction: float = 1.0
    dp: bool = True


@dataclass
class Outcome:
    label: str
    delta: dict[str, float]  # method -> Δ (mean over clients)
    gain: dict[str, float]  # method -> share of clients gaining
    nodes: dict[str, float]  # method -> mean decision nodes per tree
    seconds: float


def deal(X: np.ndarray, y: np.ndarray, n_clients: int, seed: int
         ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """10 % common test set, the rest dealt at random to ``n_clients`` (the paper's split)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    n_test = len(y) // 10
    test, train = order[:n_test], order[n_test:]
    parts = np.array_split(train, n_clients)
    return [(X[p], y[p]) for p in parts], [(X[test], y[test])] * n_clients


def cv_tree(X: np.ndarray, y: np.ndarray, regression: bool, seed: int):
    """scikit-learn CART with its depth chosen by 5-fold CV in [2, 15] (the paper's local and
    centralized trees); folds scored with macro F1 or R² (numpy versions of scikit-learn's,
    equal to them in the tests: ``cross_val_score``'s overhead dominated these small fits)."""
    from sklearn.model_selection import KFold
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    from edge_client.algorithms.fedga_cart import f1_macro, r2

    model = DecisionTreeRegressor if regression else DecisionTreeClassifier
    classes, codes = (None, y) if regression else np.unique(y, return_inverse=True)
    depths = range(2, 16)
    scores = np.zeros(len(depths))
    for train, held in KFold(5, shuffle=True, random_state=seed).split(X):
        for j, depth in enumerate(depths):
            predicted = model(max_depth=depth, random_state=seed).fit(X[train], codes[train]).predict(X[held])
            scores[j] += (r2(codes[held], predicted[None, :]) if regression
                          else f1_macro(codes[held], predicted[None, :].astype(np.int64), len(classes)))[0]
    return model(max_depth=depths[int(np.argmax(scores))], random_state=seed).fit(X, y)


def score(regression: bool, y: np.ndarray, predicted: np.ndarray) -> float:
    from sklearn.metrics import f1_score, mean_squared_error

    return float(mean_squared_error(y, predicted)) if regression else float(
        f1_score(y, predicted, average="macro", zero_division=0))


def run_case(case: Case) -> Outcome:
    import aggregator
    from aggregator.algorithms import FedGATree
    from aggregator.baselines import DPTree
    from aggregator.baselines.dp_tree import quantile_edges

    started = time.perf_counter()
    task = "regression" if case.regression else "classification"
    fed = aggregator.simulate(FedGATree(task=task, generations=case.generations,
                                        active_fraction=case.active_fraction), case.train, seed=case.seed)
    X_all = np.concatenate([x for x, _ in case.train])
    y_all = np.concatenate([t for _, t in case.train])
    central = cv_tree(X_all, y_all, case.regression, case.seed)
    methods: dict[str, list[float]] = {"FedGA": [], "centralized": [], "IBM DP": []}
    local_scores, nodes = [], {"FedGA": [], "local": [], "centralized": [], "IBM DP": []}
    dp = None
    if case.dp and not case.regression:
        classes = tuple(np.unique(y_all).tolist())
        dp = DPTree(max_depth=6, epsilon=1.0).fit(case.train, edges=quantile_edges(X_all, 5), classes=classes,
                                                  seed=case.seed)
        nodes["IBM DP"].append(int((dp.trees[0].feature >= 0).sum()))
    nodes["centralized"].append(int((central.tree_.children_left >= 0).sum()))
    for k, ((X, y), (X_test, y_test)) in enumerate(zip(case.train, case.test)):
        local = cv_tree(X, y, case.regression, case.seed)
        local_scores.append(score(case.regression, y_test, local.predict(X_test)))
        nodes["local"].append(int((local.tree_.children_left >= 0).sum()))
        model = fed[f"client-{k:03d}"]
        methods["FedGA"].append(score(case.regression, y_test, model.predict(X_test)))
        nodes["FedGA"].append(int((model.trees[0].feature >= 0).sum()))
        methods["centralized"].append(score(case.regression, y_test, central.predict(X_test)))
        if dp is not None:
            methods["IBM DP"].append(score(case.regression, y_test, dp.predict(X_test)))
    base = np.array(local_scores)
    delta, gain = {}, {}
    for name, values in methods.items():
        if not values:
            continue
        v = np.array(values)
        delta[name] = float(np.mean((v / base - 1) * 100))
        gain[name] = float(np.mean(v < base if case.regression else v > base))
    return Outcome(case.label, delta, gain, {k: float(np.mean(v)) for k, v in nodes.items() if v},
                   time.perf_counter() - started)


def pm(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1) if len(values) > 1 else 0.0:.{digits}f}"


def table(outcomes: list[Outcome], methods: tuple[str, ...]) -> str:
    rows = []
    for label in dict.fromkeys(o.label for o in outcomes):
        group = [o for o in outcomes if o.label == label]
        row = [label, str(len(group))]
        for m in methods:
            row.append(pm([o.delta[m] for o in group if m in o.delta]))
            row.append(pm([100 * o.gain[m] for o in group if m in o.gain], 0))
        row += [pm([o.nodes[m] for o in group if m in o.nodes], 1) for m in ("FedGA", "local", *methods[1:])]
        row.append(f"{np.mean([o.seconds for o in group]):.0f}")
        rows.append(row)
    headers = ["data", "runs"]
    for m in methods:
        headers += [f"Δ {m} %", f"{m} gain %"]
    headers += [f"nodes {m}" for m in ("FedGA", "local", *methods[1:])] + ["s/run"]
    return markdown_table(headers, rows)


def recording_cases(seeds: int, generations: int) -> list[Case]:
    import bench_seglearn_accuracy as seglearn
    from firmware_bridge.importers import seglearn_watch

    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory() as tmp:
        subjects, _ = seglearn.load_subjects(Path(tmp), classes)
    splits = [seglearn.series_tail(s) for s in subjects]
    train = [(s.X[sp.train], s.y[sp.train]) for s, sp in zip(subjects, splits)]
    test = [(s.X[sp.test], s.y[sp.test]) for s, sp in zip(subjects, splits)]
    return [Case("seglearn watch (10 subjects)", False, train, test, seed, generations) for seed in range(seeds)]


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--generations", type=int, default=100, help="G (Table II: 100)")
    parser.add_argument("--splits", type=int, default=10, help="train/test splits per generated dataset")
    parser.add_argument("--grid-splits", type=int, default=10, help="splits per N/c setting")
    parser.add_argument("--recording-seeds", type=int, default=10, help="GA seeds on the recordings' fixed split")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="which tables to measure (default: all)")
    parser.add_argument("--quick", action="store_true", help="2 splits, 5 generations, 2 datasets (smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.splits, args.grid_splits, args.generations, args.recording_seeds = 2, 1, 5, 1
    command = " ".join([".venv/bin/python", "benchmarks/bench_fedga_tree.py", *sys.argv[1:]])
    import sklearn

    print_machine("FedGA-Tree vs local, centralized and IBM DP trees", command, {"scikit-learn": sklearn.__version__})
    print(f"- FedGATree defaults (Table II) except G = {args.generations}; {args.splits} splits per generated "
          f"dataset ({N_SAMPLES} samples, 10 % common test, the rest over N clients); {os.cpu_count()} cores, "
          f"{args.workers} worker processes\n")
    datasets = CLASSIFICATION[:1] + REGRESSION[:1] if args.quick else CLASSIFICATION + REGRESSION
    datasets = datasets if "generated" in args.parts else []
    cases = []
    for name in datasets:
        for split in range(args.splits):
            X, y = generated(name, split)
            train, test = deal(X, y, 20, split)
            cases.append(Case(name, name in REGRESSION, train, test, split, args.generations))
    grid = []
    for n_clients in (5, 10, 15, 30):
        for split in range(args.grid_splits if "grid" in args.parts else 0):
            X, y = generated("make_classification", 100 + split)
            train, test = deal(X, y, n_clients, split)
            grid.append(Case(f"N = {n_clients}, c = 1", False, train, test, split, args.generations))
    for c in (0.25, 0.5, 1.0):
        for split in range(args.grid_splits if "grid" in args.parts else 0):
            X, y = generated("make_classification", 100 + split)
            train, test = deal(X, y, 20, split)
            grid.append(Case(f"N = 20, c = {c:g}", False, train, test, split, args.generations, active_fraction=c,
                             dp=False))  # DPTree models all clients answering
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        data_out = list(pool.map(run_case, cases))
        if cases:
            print_generated(data_out)
        grid_out = list(pool.map(run_case, grid))
        if grid:
            print("### N clients and active share c (make_classification, Figs. 6-7)\n")
            print(table(grid_out, ("FedGA", "IBM DP")))
            print(flush=True)
        if "recordings" in args.parts:
            real_out = list(pool.map(run_case, recording_cases(args.recording_seeds, args.generations)))
            print("### Real recordings (one client per subject, macro F1)\n")
            print(table(real_out, ("FedGA", "centralized", "IBM DP")))
            print()
    print(f"- total {time.perf_counter() - started:.0f} s wall clock")
    return 0


def print_generated(data_out: list) -> None:
    print("### Generated datasets, N = 20, c = 1 (Fig. 3: classification, macro F1; Fig. 8: regression, MSE)\n")
    print(table([o for o in data_out if o.label in CLASSIFICATION], ("FedGA", "centralized", "IBM DP")))
    print()
    print(table([o for o in data_out if o.label in REGRESSION], ("FedGA", "centralized")))
    print()
    cls = [o for o in data_out if o.label in CLASSIFICATION]
    mean = {m: (np.mean([o.delta[m] for o in cls]), 100 * np.mean([o.gain[m] for o in cls]))
            for m in ("FedGA", "IBM DP")}
    print(f"- classification, mean over datasets and splits: Δ FedGA = {mean['FedGA'][0]:.2f} %, "
          f"{mean['FedGA'][1]:.0f} % of clients gain; Δ IBM DP = {mean['IBM DP'][0]:.2f} %, "
          f"{mean['IBM DP'][1]:.0f} % gain (paper: +5.58 % / 75 %; IBM -2.58 % / 31 %)\n", flush=True)


if __name__ == "__main__":
    sys.exit(main())
