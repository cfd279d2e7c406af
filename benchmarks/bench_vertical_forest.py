"""Vertical Federated Forest: the paper's Table 1 shape, a multi-sensor split of the
bundled recordings, and one-round vs classical prediction time.

    .venv/bin/python benchmarks/bench_vertical_forest.py [--quick] [--runs N] [--seeds N]

1. **Table 1 shape** (Liu et al. §5.2-5.3): data shipped with scikit-learn (breast cancer,
   wine, diabetes) and one generated set (``make_classification``), features split at random
   into 2 and into 4 blocks (one party each; the first holds the labels). Per run (``--runs``,
   default 40, the paper's): a random 70/30 split and feature permutation (seed = run); FF =
   ``VerticalFederatedForest`` through ``aggregator.simulate`` (the real server and client
   halves over the in-memory broker and codec); NonFF = scikit-learn's ``RandomForest*`` on the
   joined features; RF1..RFM = the same on each party's block alone. Same settings everywhere:
   ``TREES`` trees, ``DEPTH`` deep, sqrt(d) features per split for classification, all for
   regression, bootstrap. Accuracy (classification) or RMSE (regression): mean ± sd over the
   runs; p = the two-sample Z-test of FF vs NonFF means, as the paper reports (a large p: no
   evidence the federated forest differs). FF and NonFF draw different random numbers; that
   FF *equals* a centralized forest with the same draws is tested, not benchmarked
   (tests/aggregator/test_vertical_forest.py).
2. **Two sensors of one person**: the seglearn watch recordings through the gateway data path
   (``bench_seglearn_accuracy.load_subjects``: 204 features per 4 s window), accelerometer
   features (``watch.a*``, 102) on one party with the labels, gyroscope (``watch.w*``, 102) on
   the other; per subject the first 80 % of its windows train, one window gap, the rest test
   (pooled). Forest seeds ``--seeds`` (default 10): FF, NonFF, each sensor alone; paired
   FF - NonFF differences.
3. **Prediction time** (the paper's Figs. 4-6 shape): the generated set on 4 parties; prediction
   of the test windows through the parties over the in-memory broker with the real codec and
   round engine -- alignment, then one ``route`` round (Alg. 3-4) or one ``directions`` round
   per tree level (classical) -- as trees (8-32), depth (4-16) and the test share grow; median
   of 3 repetitions, rounds per prediction and bytes the parties sent. The in-memory broker
   has no network latency: over MQTT each round adds a broker round trip (BENCHMARKS: MQTT
   QoS-1 request/reply latency), which multiplies the classical protocol's extra rounds.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, mean_sd, print_machine

TREES = 10
DEPTH = 8


def z_test_p(a: list[float], b: list[float]) -> float:
    """Two-sided two-sample Z-test of equal means (the paper's p-value)."""
    se = math.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)) if len(a) > 1 else 0.0
    if se == 0:
        return 1.0 if np.mean(a) == np.mean(b) else 0.0
    z = abs(np.mean(a) - np.mean(b)) / se
    return math.erfc(z / math.sqrt(2))


def datasets():
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine, make_classification

    X, y = make_classification(
        n_samples=1000, n_features=20, n_informative=10, n_redundant=4, n_classes=3, random_state=0
    )
    return [
        ("breast cancer", *load_breast_cancer(return_X_y=True), "classification"),
        ("wine", *load_wine(return_X_y=True), "classification"),
        ("generated (1000 x 20, 3 classes)", X, y, "classification"),
        ("diabetes", *load_diabetes(return_X_y=True), "regression"),
    ]


def sklearn_forest(task: str, seed: int):
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    if task == "regression":
        return RandomForestRegressor(n_estimators=TREES, max_depth=DEPTH, max_features=1.0, random_state=seed)
    return RandomForestClassifier(n_estimators=TREES, max_depth=DEPTH, max_features="sqrt", random_state=seed)


def score(task: str, y: np.ndarray, p: np.ndarray) -> float:
    if task == "regression":
        return float(np.sqrt(np.mean((y - p) ** 2)))
    return float(np.mean(y == p))


def table_one(runs: int) -> None:
    from sklearn.model_selection import train_test_split

    from aggregator import simulate
    from aggregator.algorithms import VerticalFederatedForest

    print(f"### Table 1 shape: FF vs NonFF vs each party alone ({runs} runs each, {TREES} trees, depth {DEPTH})\n")
    rows = []
    for name, X, y, task in datasets():
        for M in (2, 4):
            t0 = time.perf_counter()
            ff, non, alone = [], [], [[] for _ in range(M)]
            for r in range(runs):
                strat = y if task == "classification" else None
                Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=r, stratify=strat)
                blocks = np.array_split(np.random.default_rng(r).permutation(X.shape[1]), M)
                model = simulate(
                    VerticalFederatedForest(n_trees=TREES, max_depth=DEPTH, task=task),
                    [(Xtr[:, b], ytr if i == 0 else None) for i, b in enumerate(blocks)],
                    seed=r,
                )
                ff.append(score(task, yte, model.predict([Xte[:, b] for b in blocks])))
                non.append(score(task, yte, sklearn_forest(task, r).fit(Xtr, ytr).predict(Xte)))
                for i, b in enumerate(blocks):
                    alone[i].append(score(task, yte, sklearn_forest(task, r).fit(Xtr[:, b], ytr).predict(Xte[:, b])))
            metric = "RMSE" if task == "regression" else "accuracy"
            rows.append(
                [
                    name,
                    metric,
                    str(M),
                    " / ".join(f"{np.mean(a):.3f}" for a in alone),
                    mean_sd(non),
                    mean_sd(ff),
                    f"{z_test_p(ff, non):.3f}",
                    f"{time.perf_counter() - t0:.0f}",
                ]
            )
            print(f"  {name} M={M} done", file=sys.stderr)
    print(
        markdown_table(
            [
                "data set",
                "metric",
                "parties",
                "RF1 / RF2 / ... (each party alone)",
                "NonFF",
                "FF",
                "p (Z-test FF vs NonFF)",
                "s",
            ],
            rows,
        )
    )
    print()


def sensors(seeds: int) -> None:
    from bench_seglearn_accuracy import load_subjects, subject_tail

    from aggregator import simulate
    from aggregator.algorithms import VerticalFederatedForest
    from edge_client.processing import extract_recording
    from firmware_bridge.importers import seglearn_watch

    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-vff-") as tmp:
        subjects, info = load_subjects(Path(tmp), classes)
        names = list(extract_recording(sorted(Path(tmp).glob("*.wfrec"))[0])[0].names)  # the columns' sensors
    acc = np.array([n.startswith("watch.a") for n in names])
    gyro = np.array([n.startswith("watch.w") for n in names])
    assert acc.sum() == gyro.sum() == 102 and (acc | gyro).all()
    train = [subject_tail(s) for s in subjects]
    Xtr = np.concatenate([s.X[sp.train] for s, sp in zip(subjects, train)])
    ytr = np.concatenate([s.y[sp.train] for s, sp in zip(subjects, train)])
    Xte = np.concatenate([s.X[sp.test] for s, sp in zip(subjects, train)])
    yte = np.concatenate([s.y[sp.test] for s, sp in zip(subjects, train)])
    print(
        f"### Two sensors of one person: seglearn watch, accelerometer party (labels) + gyroscope party "
        f"({seeds} forest seeds, {TREES} trees, depth {DEPTH})\n"
    )
    print(
        f"- {len(subjects)} subjects, {Xtr.shape[0]} train / {Xte.shape[0]} test windows (subject tail), "
        f"{acc.sum()} + {gyro.sum()} features, {len(classes)} classes\n"
    )
    res: dict[str, list[float]] = {
        "FF (both gateways)": [],
        "NonFF (joined)": [],
        "accelerometer alone": [],
        "gyroscope alone": [],
    }
    t0 = time.perf_counter()
    for seed in range(seeds):
        model = simulate(
            VerticalFederatedForest(n_trees=TREES, max_depth=DEPTH),
            [(Xtr[:, acc], ytr), (Xtr[:, gyro], None)],
            seed=seed,
        )
        res["FF (both gateways)"].append(score("c", yte, model.predict([Xte[:, acc], Xte[:, gyro]])))
        res["NonFF (joined)"].append(score("c", yte, sklearn_forest("c", seed).fit(Xtr, ytr).predict(Xte)))
        for key, cols in (("accelerometer alone", acc), ("gyroscope alone", gyro)):
            res[key].append(score("c", yte, sklearn_forest("c", seed).fit(Xtr[:, cols], ytr).predict(Xte[:, cols])))
    diff = np.array(res["FF (both gateways)"]) - np.array(res["NonFF (joined)"])
    rows = [[k, mean_sd(v)] for k, v in res.items()]
    rows.append(["FF - NonFF (paired)", mean_sd(diff)])
    print(markdown_table(["model", "accuracy"], rows))
    print(
        f"\np (Z-test FF vs NonFF) = {z_test_p(res['FF (both gateways)'], res['NonFF (joined)']):.3f}; "
        f"{time.perf_counter() - t0:.0f} s\n"
    )


def prediction_time(quick: bool) -> None:
    from sklearn.datasets import make_classification

    from aggregator.algorithms import VerticalFederatedForest
    from aggregator.algorithms.vertical_forest import parties_for_simulation, predict_on_parties
    from aggregator.jobs import FederatedJob, JobSettings
    from aggregator.simulate import Simulation

    X, y = make_classification(
        n_samples=3000, n_features=24, n_informative=10, n_redundant=4, n_classes=3, random_state=1
    )
    blocks = np.array_split(np.arange(24), 4)
    reps = 1 if quick else 3
    print(f"### Prediction time, one round vs classical (4 parties, generated 3000 x 24; median of {reps})\n")

    def run(trees: int, depth: int, share: float) -> list[str]:
        n_test = int(share * X.shape[0])
        train, test = slice(n_test, None), slice(0, n_test)
        key = b"k" * 32
        sim = Simulation(
            parties_for_simulation(
                [(X[train, b], y[train] if i == 0 else None) for i, b in enumerate(blocks)], party_key=key
            )
        )
        model = VerticalFederatedForest(n_trees=trees, max_depth=depth, min_samples_leaf=1).run_in(sim, seed=0)
        live = Simulation(
            parties_for_simulation(
                [(X[test, b], y[test] if i == 0 else None) for i, b in enumerate(blocks)], party_key=key
            )
        )
        for p in model.parties:  # deployed: each party's partial trees on its gateway
            live.participants[p].halves["vertical_forest"].forests.update(
                sim.participants[p].halves["vertical_forest"].forests
            )
        out, values = [], []
        for method in ("one_round", "classical"):
            times = []
            for rep in range(reps):
                job = FederatedJob(
                    live.engine,
                    list(model.parties),
                    job_id=f"p-{method}-{rep}-{trees}-{depth}-{share}",
                    settings=JobSettings(deadline_s=120),
                )
                sent = live.client_bytes()
                t0 = time.perf_counter()
                result = predict_on_parties(job, model, method=method, share=False)
                times.append(time.perf_counter() - t0)
                sent = live.client_bytes() - sent
            values.append(result.values)
            out += [f"{statistics.median(times):.3f}", str(job.rounds), f"{sent / 1024:.0f}"]
        if not np.array_equal(values[0], values[1]):
            raise RuntimeError("one-round and classical predictions differ")
        real_depth = max(
            int(np.floor(np.log2(t.split_nodes.max() + 1))) + 1 if t.split_nodes.size else 0 for t in model.trees
        )
        return [str(trees), str(depth), str(real_depth), f"{share:.1f}", str(n_test), *out]

    grid = (
        [(8, 8, 0.3), (32, 8, 0.3), (16, 4, 0.3), (16, 16, 0.3), (16, 8, 0.1), (16, 8, 0.5)]
        if quick
        else [
            (8, 8, 0.3),
            (16, 8, 0.3),
            (32, 8, 0.3),
            (16, 4, 0.3),
            (16, 12, 0.3),
            (16, 16, 0.3),
            (16, 8, 0.1),
            (16, 8, 0.5),
        ]
    )
    rows = [run(*g) for g in grid]
    print(
        markdown_table(
            [
                "trees",
                "max_depth",
                "grown depth",
                "test share",
                "test windows",
                "one-round s",
                "rounds",
                "KiB sent",
                "classical s",
                "rounds",
                "KiB sent",
            ],
            rows,
        )
    )
    print("\nRounds include the alignment round; one-round and classical predictions are checked equal.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="4 runs, 2 seeds, a smaller timing grid")
    parser.add_argument("--runs", type=int, help="Table 1 runs per data set and split (default 40; --quick 4)")
    parser.add_argument("--seeds", type=int, help="forest seeds on the recordings (default 10; --quick 2)")
    args = parser.parse_args()
    runs = args.runs or (4 if args.quick else 40)
    seeds = args.seeds or (2 if args.quick else 10)
    import sklearn

    command = " ".join([".venv/bin/python", "benchmarks/bench_vertical_forest.py", *sys.argv[1:]])
    print_machine(
        "Vertical Federated Forest",
        command,
        {"scikit-learn": sklearn.__version__, "threads": "one (scikit-learn n_jobs=None)"},
    )
    t0, c0 = time.perf_counter(), time.process_time()
    table_one(runs)
    sensors(seeds)
    prediction_time(args.quick)
    print(
        f"total {time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU (this process; the "
        f"wall time depends on what else the machine runs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
