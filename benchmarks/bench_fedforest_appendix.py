"""FedForest's appendix experiments beyond §5: App. B on more datasets with every method, F.1.2
(overlapping supports), F.3 (outliers, Table 7), Table 3 (fragmentation, K = 1..100) and the
F.4 outcome-heterogeneity test beside the covariate-shift one. Mean ± sd over seeds; every
method of a cell sees the same data (paired).

    .venv/bin/python benchmarks/bench_fedforest_appendix.py [--sections tabular,overlap,outliers,
        fragmentation,outcome] [--seeds 10] [--trees 20] [--jobs 2] [--cache cells.jsonl] [--quick]

Shared settings (the paper's, except the tree count): max_depth 8, min_samples_leaf 5, bootstrap,
B = 32 candidates; T = ``--trees`` (default 20, the paper uses 50; every method gets the same T.
On 2 cores, one seed's cell at T = 50 took 6 s (F.1.2) to 61 s (F.3): all five sections at T = 50
and 10 seeds are ~2 core-hours). Federated methods run the real server and client halves through
``aggregator.simulate.Simulation``:

* Quantiles X: ``FedForest(protocol="sketches", evaluation="exact")``; Quantiles X,H: the same
  with ``client_splits=True`` (the client index H as a feature, Fisher-ordered per node), in the
  sections whose test rows each belong to a client (F.1.2, F.3, Table 3, F.4); Centralized RF
  X,H beside it, with H Fisher-encoded by the clients' training target means;
* AvgImp X: ``evaluation="avgimp", top_l=3`` (AvgImp X,H in F.1.2, as the paper's Table 6);
  Federated Histogram: ``FederatedHistogram``
  (fixed-width bins on the fleet's min/max);
* Local Learning: ``LocalLearning`` (each client's own forest, scored on the whole test set,
  mean over clients); Local Ensembling: ``LocalEnsembling`` (T // K trees per client, >= 1);
* Centralized RF: scikit-learn on the pooled training rows with the same settings.

Sections:

* ``tabular`` (App. B): ``bench_fedforest_tabular.py``'s protocol (30 % stratified test set,
  K = 20 clients by Dirichlet label skew, alpha in {0.1, 1, 10}) on its three datasets plus
  iris (scikit-learn), ``make_classification`` (1,000 x 20, 3 classes, generated per seed) and
  ``make_friedman1`` (1,000 x 10 regression, generated per seed). R^2 or balanced accuracy.
  No X,H methods: the test set is drawn from the whole dataset before the Dirichlet deal, so its
  rows belong to no client (the paper's App. B does not say how it tests, and its Table 2 has no
  X,H column).
* ``overlap`` (F.1.2): K = 2 clients, n_k = 150, d = 5, X ~ N((-1)^k gamma 1, 1.5^2 I),
  Y = X_1 + eps, eps ~ N(0, 1); gamma in {0, 1, 2.5, 5}; every feature per split (as F.1.1);
  held-out 30 % of each client; test MSE (irreducible 1).
* ``outliers`` (F.3, Table 7): the §5 homogeneous data (``bench_fedforest_synthetic.py``,
  K = 10, n_k = 200, d = 20, d/3 features per split); a fraction phi in {0, 5, 10, 20} % of
  every client's training rows has its feature vector multiplied by 1,000; clean test rows; MSE.
* ``fragmentation`` (Table 3): the paper's Banknote Authentication data is not shipped with
  scikit-learn, so a generated stand-in of its shape: ``make_classification(1,372 x 4, 2
  classes, 4 informative)`` per seed; 30 % stratified test set; the training rows and, apart,
  the test rows dealt at random into K equal clients, K in {1, 2, 5, 10, 20, 50, 100} (so every
  test row belongs to a client, for X,H); balanced accuracy; sqrt(d) features per split.
* ``outcome`` (F.4): §5 homogeneous, covariate-shift and outcome-shift data; the outcome test
  compares the held-out R^2 of Quantiles X,H and Quantiles X (paired per seed; the paper's
  "significant gain" read as a mean gain above two standard errors), beside the covariate-shift
  test (``aggregator.diagnostics.covariate_shift`` with its default discriminator, scored on the
  clients' held-out rows: client AUC >= 0.7).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_fedforest_synthetic as synthetic
import bench_fedforest_tabular as tabular
import numpy as np
from _common import description, markdown_table, print_machine
from _fedforest_common import Block, client_data, fisher_codes, log, mean_std, model_output, pooled

SECTIONS = ("tabular", "overlap", "outliers", "fragmentation", "outcome")
TABULAR_DATASETS = ("diabetes", "breast_cancer", "wine", "iris", "make_classification", "make_friedman1")
GAMMAS = (0.0, 1.0, 2.5, 5.0)
OUTLIER_FRACTIONS = (0.0, 0.05, 0.10, 0.20)
FRAGMENTS = (1, 2, 5, 10, 20, 50, 100)
OUTCOME_SETTINGS = ("homogeneous", "covariate shift", "outcome shift")


# --- methods ------------------------------------------------------------------------------------
def methods(
    n_trees: int, regression: bool, max_features, K: int, with_h: bool = False, names: tuple[str, ...] | None = None
) -> dict:
    """The section's method configs by table row name; ``with_h`` adds the X,H variants (the
    client index as a feature), which only make sense when every test row belongs to a client."""
    from aggregator.algorithms import FedForest
    from aggregator.baselines import FederatedHistogram, LocalEnsembling, LocalLearning

    task = "regression" if regression else "classification"
    base = FedForest(
        protocol="sketches",
        n_trees=n_trees,
        max_depth=8,
        n_bins=32,
        task=task,
        min_samples_leaf=5,
        max_features=max_features,
    )
    avgimp = replace(base, evaluation="avgimp", top_l=3)
    h = with_h and K > 1
    out = {
        "Quantiles X": base,
        **({"Quantiles X,H": replace(base, client_splits=True)} if h else {}),
        "AvgImp X": avgimp,
        **({"AvgImp X,H": replace(avgimp, client_splits=True)} if h else {}),
        "Fed. Histogram": FederatedHistogram(
            n_trees=n_trees, max_depth=8, n_bins=32, task=task, min_samples_leaf=5, max_features=max_features
        ),
        "Local Ensembling": LocalEnsembling(base, trees_per_client=max(1, n_trees // K)),
        "Local Learning": LocalLearning(base),
    }
    return {k: v for k, v in out.items() if names is None or k in names}


def metric(y_true: np.ndarray, pred: np.ndarray, kind: str) -> float:
    if kind == "mse":
        return float(np.mean((np.asarray(pred, dtype=np.float64) - y_true) ** 2))
    return tabular.score(y_true, pred, kind == "r2")


def run_methods(
    blocks: list[Block], configs: dict, *, seed: int, kind: str, n_trees: int, max_features, rf_with_h: bool = False
) -> dict[str, float]:
    """Every federated method through one simulation of ``blocks``, then centralized RF (X, and
    X,H with Fisher-encoded H if asked); scores on the pooled held-out rows."""
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    from aggregator.simulate import Simulation

    Xtr, ytr, htr, Xte, yte, hte = pooled(blocks)
    out = {}
    sim = Simulation(client_data(blocks), record_bodies=False)
    for name, config in configs.items():
        model = sim.run(config, seed=seed, job_id=f"{name}-{seed}")
        if isinstance(model, dict):  # Local Learning: every client's forest on the whole test set
            out[name] = float(np.mean([metric(yte, m.predict(Xte), kind) for m in model.values()]))
        else:
            out[name] = metric(yte, model_output(model, blocks), kind)
    regression = kind != "balanced_accuracy"
    rf_args = dict(n_estimators=n_trees, max_depth=8, min_samples_leaf=5, bootstrap=True, random_state=seed, n_jobs=1)
    make = (
        (lambda: RandomForestRegressor(max_features=max_features or 1.0, **rf_args))
        if regression
        else (lambda: RandomForestClassifier(max_features=max_features or 1.0, **rf_args))
    )
    out["Centralized RF X"] = metric(yte, make().fit(Xtr, ytr).predict(Xte), kind)
    if rf_with_h:
        codes = fisher_codes(htr, ytr, len(blocks))
        out["Centralized RF X,H"] = metric(
            yte, make().fit(np.column_stack([Xtr, codes[htr]]), ytr).predict(np.column_stack([Xte, codes[hte]])), kind
        )
    return out


# --- the sections' cells ------------------------------------------------------------------------
def tabular_cell(dataset: str, alpha: float, seed: int, n_trees: int) -> dict:
    X, y, regression = tabular.load(dataset, seed)
    rng = np.random.default_rng([TABULAR_DATASETS.index(dataset), seed, int(alpha * 10)])
    train, test = tabular.test_split(y, regression, rng)
    Xtr, ytr, Xte, yte = X[train], y[train], X[test], y[test]
    labels = tabular.strata(
        ytr, regression, np.quantile(ytr, np.linspace(0, 1, tabular.N_QUANTILE_BINS + 1)[1:-1]) if regression else None
    )
    parts = tabular.dirichlet_partition(labels, alpha, rng)
    # the test rows belong to no client (hence no X,H methods here); client 0 carries them for scoring
    blocks = [
        Block(f"client-{k:02d}", Xtr[p], ytr[p], Xte if k == 0 else Xte[:0], yte if k == 0 else yte[:0])
        for k, p in enumerate(parts)
    ]
    kind = "r2" if regression else "balanced_accuracy"
    configs = methods(n_trees, regression, "auto", tabular.K, with_h=False)
    return {
        "key": (dataset, alpha),
        "seed": seed,
        "score": run_methods(
            blocks, configs, seed=seed, kind=kind, n_trees=n_trees, max_features=1 / 3 if regression else "sqrt"
        ),
    }


def overlap_cell(gamma: float, seed: int, n_trees: int) -> dict:
    rng = np.random.default_rng([11, int(gamma * 10), seed])
    blocks = []
    for k in (1, 2):
        X = rng.normal((-1.0) ** k * gamma, 1.5, size=(150, 5))
        y = X[:, 0] + rng.normal(0.0, 1.0, size=150)
        blocks.append(synthetic._split(f"client-{k:02d}", X, y, rng))
    configs = methods(
        n_trees,
        True,
        None,
        2,
        with_h=True,
        names=("Quantiles X", "Quantiles X,H", "AvgImp X", "AvgImp X,H", "Fed. Histogram"),
    )
    return {
        "key": gamma,
        "seed": seed,
        "score": run_methods(
            blocks, configs, seed=seed, kind="mse", n_trees=n_trees, max_features=None, rf_with_h=True
        ),
    }


def outliers_cell(fraction: float, seed: int, n_trees: int) -> dict:
    rng = np.random.default_rng([13, int(fraction * 100), seed])
    blocks = []
    for b in synthetic.make_blocks("homogeneous", seed):
        X = b.X.copy()
        hit = rng.permutation(X.shape[0])[: round(fraction * X.shape[0])]
        X[hit] *= 1000.0
        blocks.append(Block(b.client_id, X, b.y, b.X_test, b.y_test))
    configs = methods(
        n_trees,
        True,
        1 / 3,
        synthetic.K,
        with_h=True,
        names=("Quantiles X", "Quantiles X,H", "AvgImp X", "Fed. Histogram", "Local Ensembling", "Local Learning"),
    )
    return {
        "key": fraction,
        "seed": seed,
        "score": run_methods(
            blocks, configs, seed=seed, kind="mse", n_trees=n_trees, max_features=1 / 3, rf_with_h=True
        ),
    }


def fragmentation_cell(K: int, seed: int, n_trees: int) -> dict:
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=1372, n_features=4, n_informative=4, n_redundant=0, n_classes=2, random_state=seed
    )
    rng = np.random.default_rng([17, K, seed])
    train, test = tabular.test_split(y, False, rng)
    parts = np.array_split(rng.permutation(train), K)
    # the test rows are dealt at random to the K clients too, so each belongs to one (for X,H)
    test_parts = np.array_split(rng.permutation(test), K)
    blocks = [Block(f"client-{k:03d}", X[p], y[p], X[t], y[t]) for k, (p, t) in enumerate(zip(parts, test_parts))]
    configs = methods(
        n_trees,
        False,
        "auto",
        K,
        with_h=True,
        names=("Quantiles X", "Quantiles X,H", "AvgImp X", "Fed. Histogram", "Local Ensembling", "Local Learning"),
    )
    return {
        "key": K,
        "seed": seed,
        "score": run_methods(
            blocks, configs, seed=seed, kind="balanced_accuracy", n_trees=n_trees, max_features="sqrt", rf_with_h=K > 1
        ),
    }


def outcome_cell(setting: str, seed: int, n_trees: int) -> dict:
    from aggregator.diagnostics import covariate_shift
    from aggregator.jobs import FederatedJob
    from aggregator.simulate import Simulation

    blocks = synthetic.make_blocks(setting, seed)
    configs = methods(n_trees, True, 1 / 3, synthetic.K, with_h=True, names=("Quantiles X", "Quantiles X,H"))
    score = run_methods(blocks, configs, seed=seed, kind="r2", n_trees=n_trees, max_features=1 / 3)
    # the discriminator's target is the client: labels are not used (zeros keep the opening a classifier's)
    unlabelled = [replace(b, y=np.zeros(b.y.shape[0], int), y_test=np.zeros(b.y_test.shape[0], int)) for b in blocks]
    sim = Simulation(client_data(unlabelled, with_test=True), record_bodies=False)
    report = covariate_shift(
        FederatedJob(sim.engine, list(sim.transports), job_id=f"shift-{seed}"), seed=seed, split="holdout"
    )
    score["covariate AUC"] = report.auc
    return {"key": setting, "seed": seed, "score": score}


CELLS = {
    "tabular": tabular_cell,
    "overlap": overlap_cell,
    "outliers": outliers_cell,
    "fragmentation": fragmentation_cell,
    "outcome": outcome_cell,
}


def _cell(args: tuple) -> dict:
    section, key, seed, n_trees = args
    t0 = time.perf_counter()
    out = CELLS[section](*key, seed, n_trees) if isinstance(key, tuple) else CELLS[section](key, seed, n_trees)
    out["section"], out["seconds"], out["trees"] = section, time.perf_counter() - t0, n_trees
    return out


# --- tables -------------------------------------------------------------------------------------
def values(cells: list[dict], key, method: str) -> list[float]:
    return [
        c["score"][method] for c in sorted(cells, key=lambda c: c["seed"]) if c["key"] == key and method in c["score"]
    ]


def wide_table(cells: list[dict], keys: list, label) -> str:
    """Rows: methods; columns: the section's keys; cells mean ± sd over seeds."""
    names = list(dict.fromkeys(m for c in cells for m in c["score"]))
    rows = [[m] + [mean_std(values(cells, k, m)) for k in keys] for m in names]
    return markdown_table(["method"] + [label(k) for k in keys], rows)


def outcome_table(cells: list[dict]) -> str:
    rows = []
    for setting in OUTCOME_SETTINGS:
        x, xh = np.array(values(cells, setting, "Quantiles X")), np.array(values(cells, setting, "Quantiles X,H"))
        if x.size == 0:
            continue
        gain = xh - x
        se = gain.std(ddof=1) / np.sqrt(gain.size) if gain.size > 1 else float("nan")
        auc = values(cells, setting, "covariate AUC")
        rows.append(
            [
                setting,
                f"{x.size}",
                mean_std(x),
                mean_std(xh),
                f"{gain.mean():+.3f} ± {gain.std(ddof=1):.3f}",
                f"{int((gain > 0).sum())}/{gain.size}",
                "yes" if gain.mean() > 2 * se else "no",
                mean_std(auc),
                "yes" if np.mean(auc) >= 0.7 else "no",
            ]
        )
    return markdown_table(
        [
            "setting",
            "seeds",
            "R² Quantiles X",
            "R² Quantiles X,H",
            "gain X,H − X (paired)",
            "seeds with gain > 0",
            "outcome heterogeneity (gain > 2 se)",
            "client AUC (covariate test)",
            "covariate shift (AUC ≥ 0.7)",
        ],
        rows,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ", ".join(SECTIONS)
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--trees", type=int, default=20, help="trees per forest, every method (default 20)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--datasets", default=",".join(TABULAR_DATASETS), help="tabular section's datasets")
    parser.add_argument("--cache", type=Path, help="JSON-lines file of finished cells, reused and appended")
    parser.add_argument("--alphas", default="0.1,1,10", help="tabular section's Dirichlet alphas")
    parser.add_argument("--report-only", action="store_true", help="print the tables of the cached cells, run nothing")
    parser.add_argument("--quick", action="store_true", help="2 seeds, 5 trees, few keys per section")
    args = parser.parse_args()
    sections = args.sections.split(",")
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    seeds, n_trees = (2, 5) if args.quick else (args.seeds, args.trees)
    datasets = args.datasets.split(",")
    alphas = [float(a) for a in args.alphas.split(",")]
    keys = {
        "tabular": [(d, a) for d in datasets for a in alphas],
        "overlap": list(GAMMAS),
        "outliers": list(OUTLIER_FRACTIONS),
        "fragmentation": list(FRAGMENTS),
        "outcome": list(OUTCOME_SETTINGS),
    }
    if args.quick:
        keys = {
            "tabular": [(datasets[0], 0.1)],
            "overlap": [0.0, 5.0],
            "outliers": [0.0, 0.2],
            "fragmentation": [1, 10],
            "outcome": ["homogeneous", "outcome shift"],
        }
    command = shlex.join([".venv/bin/python", "benchmarks/bench_fedforest_appendix.py", *sys.argv[1:]])
    print_machine(
        "FedForest appendix experiments (App. B, F.1.2, F.3, Table 3, F.4)",
        command,
        {"trees": str(n_trees), "seeds": f"0..{seeds - 1}"},
    )
    jobs = [(s, k, seed, n_trees) for s in sections for k in keys[s] for seed in range(seeds)]
    cells = []
    if args.cache and args.cache.exists():  # JSON turns the tabular keys into lists
        cells = [json.loads(line) for line in args.cache.read_text().splitlines() if line.strip()]
        for c in cells:
            c["key"] = tuple(c["key"]) if isinstance(c["key"], list) else c["key"]
        cells = [c for c in cells if c["trees"] == n_trees]
    done = {(c["section"], c["key"], c["seed"]) for c in cells}
    jobs = [] if args.report_only else [j for j in jobs if j[:3] not in done]
    log(f"{len(done)} cells cached, {len(jobs)} to run")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        for cell in pool.map(_cell, jobs):
            log(f"{cell['section']} {cell['key']} seed {cell['seed']}: {cell['seconds']:.0f} s")
            cells.append(cell)
            if args.cache:
                with args.cache.open("a") as f:
                    f.write(json.dumps(cell) + "\n")
    wanted = {j[:3] for j in [(s, k, seed, n_trees) for s in sections for k in keys[s] for seed in range(seeds)]}
    cells = [c for c in cells if (c["section"], c["key"], c["seed"]) in wanted]
    by = {s: [c for c in cells if c["section"] == s] for s in sections}
    titles = {
        "tabular": "App. B: score per dataset and alpha (R² for diabetes and friedman1, else balanced accuracy)",
        "overlap": "F.1.2 overlapping supports: test MSE per shift gamma (irreducible 1)",
        "outliers": "F.3 outliers (Table 7): test MSE per outlier fraction",
        "fragmentation": "Table 3 fragmentation: balanced accuracy per client count K",
        "outcome": "F.4: outcome-heterogeneity test (X,H vs X) beside the covariate-shift test",
    }
    labels = {
        "tabular": lambda k: f"{k[0]} α={k[1]:g}",
        "overlap": lambda g: f"γ={g:g}",
        "outliers": lambda f: f"{100 * f:.0f} %",
        "fragmentation": lambda K: f"K={K}",
    }
    for s in sections:
        print(f"\n### {titles[s]}\n")
        if s == "outcome":
            print(outcome_table(by[s]))
        elif s == "tabular":
            for d in dict.fromkeys(k[0] for k in keys[s]):
                print(wide_table(by[s], [k for k in keys[s] if k[0] == d], labels[s]) + "\n")
        else:
            print(wide_table(by[s], keys[s], labels[s]))
        print(f"\n({sum(c['seconds'] for c in by[s]):.0f} s of cell time)")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
