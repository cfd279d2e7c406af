"""FedSCS-XGB on the seglearn watch set: accuracy against centralized xgboost, sketch rank error,
bytes and wall time per boosting round.

    .venv/bin/python benchmarks/bench_fedscs_xgb.py [--quick] [--seeds N]

Data: exactly ``bench_seglearn_accuracy.py``'s (imported as a module, nothing copied): the seglearn
watch set through the real gateway path (``import_all`` -> ``extract_recording`` -> labelled
windows, 204 features), and its two splits. Main protocol: **subject tail** (first 80 % of each
subject's labelled windows train, one window gap, the rest test -- the protocol asked for);
secondary (full run only): **series tail** (last 20 % of each exercise series). Features are cast
to float32 once, and both models see those same float32 arrays (FedSCS-XGB's clients and
xgboost's DMatrix would round to float32 anyway).

1. Accuracy. FedSCS-XGB = ``aggregator.simulate``-style in-memory run of the real server and
   client halves (``Simulation(clients).run(FedSCSXGB(protocol="atoms", ...), seed=0)``), one client per subject
   (``ClientData("subject-ii", X_train, y_train)``). Centralized = ``xgboost.train`` on the pooled
   train splits with the same hyper-parameters: ``hist``, ``multi:softprob``, max_depth 4, eta 0.2,
   lambda 1, min_child_weight 1, ``max_bin = B``, default base score, and the same ``gamma``
   (``FedSCSXGB.gamma`` is xgboost's ``gamma``/``min_split_loss``). Both are scored on the
   pooled test splits. B in {64, 128, 256, 512} with 10 rounds
   and B = 256 with 100 rounds (summary sketch, M = B), B = 256 with the paper's DDSketch, and a
   diagnostic row: FedSCS-XGB with its edges fixed to xgboost's own cuts (same bins: what is left
   is tree growth). Both models are deterministic (no subsampling), so each cell is one number;
   the gap is fed - central in percentage points (goal |gap| <= 0.5 pp; one test window is
   ~0.23 pp of the subject-tail test set).
2. Rank error alpha (``shared.sketches.rank_error``) of the round-1 bin edges on the real
   features: weights = round-1 Hessians summed over classes (softmax at the fleet's base score,
   ``Softmax(K).gradients``), the clients' summaries merged (``merge_edges_columns``, M = B and
   4B) and DDSketch (alpha 0.01, raw and standardised by the pooled ``weighted_moments`` -- the
   unweighted moments the server gets at setup) merged per feature (``ddsketch_edges``), against
   the exact pooled weighted quantiles; max and median over the 204 features. xgboost's own
   ``hist`` cuts (count quantiles, computed once, not per round) are shown for scale.
3. Bytes per boosting round sent by the clients (``Simulation.client_bytes``; setup measured
   by an ``n_rounds=0`` run and subtracted), split into sketch and atoms by a run with the edges
   fixed (no sketch phase), vs the raw train matrix (n x d x 4 bytes float32, x 8 float64).
4. Wall time per round: simulation vs ``xgboost.train`` (DMatrix construction included) on the
   pooled data, B = 256, 10 rounds, median of ``--seeds`` repeats (seeds 0..N-1, default 3,
   --quick 2; with all clients sampled the seed must not change the model, which is checked).
   The load average is printed: timings are only as quiet as the machine.

Exit status 1 if a correctness check fails: 10 subjects with 204 finite features, every class in
the pooled train and test sets, each model predicts more than one class, |accuracy gap| <= 3 pp
(a sanity bound, not the goal), summary rank error <= 1/M (+1e-9), exact edges' rank error 0,
FedSCS-XGB bit-identical across seeds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_seglearn_accuracy as seglearn
import numpy as np
from _common import description, markdown_table, median, print_machine

GOAL_PP = 0.5
SANITY_PP = 3.0
T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {message}", file=sys.stderr, flush=True)


# --- data ----------------------------------------------------------------------------------------
@dataclass
class Pooled:
    """One protocol: the clients (one per subject, train split) and the pooled float32 arrays."""

    protocol: str
    clients: list  # ClientData
    Xtr: np.ndarray
    ytr: np.ndarray
    Xte: np.ndarray
    yte: np.ndarray


def pooled(protocol: str, subjects: list, splits: list) -> Pooled:
    from edge_client.training_data import ClientData

    clients = [
        ClientData(f"subject-{i:02d}", s.X[p.train].astype(np.float32), s.y[p.train])
        for i, (s, p) in enumerate(zip(subjects, splits))
    ]
    return Pooled(
        protocol,
        clients,
        np.vstack([c.X for c in clients]),
        np.concatenate([c.y for c in clients]),
        np.vstack([s.X[p.test] for s, p in zip(subjects, splits)]).astype(np.float32),
        np.concatenate([s.y[p.test] for s, p in zip(subjects, splits)]),
    )


# --- the two trainers ----------------------------------------------------------------------------
@dataclass
class FedRun:
    model: object
    seconds: float  # sim.run, setup round included
    round_seconds: list[float]  # per boosting round, from the progress reports (setup excluded)
    client_bytes: int
    server_bytes: int


def run_fed(data: Pooled, config, *, seed: int = 0, label: str = "") -> FedRun:
    from aggregator.simulate import Simulation

    sim = Simulation(data.clients)
    rounds: list = []

    def progress(p) -> None:
        rounds.append(p.elapsed_s)
        if p.total >= 20 and p.step % 10 == 0:
            log(f"  {label}: round {p.step}/{p.total}, train_loss {p.metrics.get('train_loss', float('nan')):.4f}")

    t0 = time.perf_counter()
    model = sim.run(config, seed=seed, progress=progress)
    seconds = time.perf_counter() - t0
    return FedRun(model, seconds, rounds, sim.client_bytes(), sim.server.stats.sent_bytes)


def xgb_params(config, n_classes: int, n_bins: int, nthread: int | None = None) -> dict:
    params = {
        "objective": "multi:softprob",
        "tree_method": "hist",
        "num_class": n_classes,
        "max_depth": config.max_depth,
        "eta": config.learning_rate,
        "lambda": config.reg_lambda,
        "gamma": config.gamma,
        "min_child_weight": config.min_child_weight,
        "max_bin": n_bins,
        "seed": 0,
        "verbosity": 0,
    }
    if nthread is not None:
        params["nthread"] = nthread
    return params


def run_central(data: Pooled, config, n_classes: int, n_bins: int, rounds: int, nthread: int | None = None):
    """(booster, seconds with DMatrix construction, the train DMatrix)."""
    import xgboost as xgb

    t0 = time.perf_counter()
    dtrain = xgb.DMatrix(data.Xtr, label=data.ytr)
    booster = xgb.train(xgb_params(config, n_classes, n_bins, nthread), dtrain, num_boost_round=rounds)
    return booster, time.perf_counter() - t0, dtrain


def xgb_proba(booster, X: np.ndarray) -> np.ndarray:
    import xgboost as xgb

    return booster.predict(xgb.DMatrix(X))


def xgb_cuts(dtrain, d: int) -> tuple[np.ndarray, ...]:
    """xgboost's hist cuts per feature (its minimum sentinel first, then the cut values) as float32 edges."""
    ptr, values = dtrain.get_quantile_cut()
    return tuple(np.asarray(values[ptr[j] : ptr[j + 1]], dtype=np.float32) for j in range(d))


def same_trees(model, booster) -> tuple[int, int, int | None]:
    """Trees of ``model`` with the same split features and thresholds (node order) as xgboost's:
    (identical, total, index of the first differing tree or None)."""
    import json

    theirs = json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
    same, first = 0, None
    for t, (tree, other) in enumerate(zip(model.trees, theirs)):
        internal = np.asarray(other["left_children"]) >= 0
        a = (tree.feature[tree.left >= 0].tolist(), np.float32(tree.threshold[tree.left >= 0]).tolist())
        b = (
            np.asarray(other["split_indices"])[internal].tolist(),
            np.float32(np.asarray(other["split_conditions"])[internal]).tolist(),
        )
        if a == b and len(model.trees) == len(theirs):
            same += 1
        elif first is None:
            first = t
    return same, len(theirs), first


def mlogloss(proba: np.ndarray, y: np.ndarray) -> float:
    return float(-np.mean(np.log(np.maximum(proba[np.arange(y.shape[0]), y], 1e-16))))


# --- section 1: accuracy -------------------------------------------------------------------------
@dataclass
class Comparison:
    protocol: str
    rounds: int
    n_bins: int
    sketch: str
    fed: FedRun
    central_seconds: float
    fed_proba: np.ndarray
    central_proba: np.ndarray
    fed_train_loss: float
    central_train_loss: float
    yte: np.ndarray
    extra: dict = field(default_factory=dict)

    def scores(self) -> tuple[tuple[float, float], tuple[float, float]]:
        return (
            seglearn.scores(self.yte, self.fed_proba.argmax(axis=1)),
            seglearn.scores(self.yte, self.central_proba.argmax(axis=1)),
        )


def compare(data: Pooled, config, n_classes: int, sketch_label: str, *, central=None, label: str = "") -> Comparison:
    """Train both (or reuse ``central`` = (booster, seconds, dtrain)) and keep what the tables need."""
    log(f"{data.protocol}: FedSCS-XGB {label} ...")
    fed = run_fed(data, config, label=label)
    log(f"{data.protocol}: FedSCS-XGB {label} done in {fed.seconds:.1f} s")
    if central is None:
        central = run_central(data, config, n_classes, config.n_bins, config.n_rounds)
        log(f"{data.protocol}: xgboost {label} done in {central[1]:.1f} s")
    booster, central_seconds, _ = central
    return Comparison(
        data.protocol,
        config.n_rounds,
        config.n_bins,
        sketch_label,
        fed,
        central_seconds,
        fed.model.predict_proba(data.Xte),
        xgb_proba(booster, data.Xte),
        mlogloss(fed.model.predict_proba(data.Xtr), data.ytr),
        mlogloss(xgb_proba(booster, data.Xtr), data.ytr),
        data.yte,
    )


def accuracy_rows(results: list[Comparison], failures: list[str]) -> list[list[str]]:
    rows = []
    for r in results:
        (fa, ff), (ca, cf) = r.scores()
        gap, f1_gap = 100 * (fa - ca), 100 * (ff - cf)
        agree = float((r.fed_proba.argmax(axis=1) == r.central_proba.argmax(axis=1)).mean())
        rows.append(
            [
                r.protocol,
                f"{r.rounds}",
                f"{r.n_bins}",
                r.sketch,
                f"{fa:.4f}",
                f"{ca:.4f}",
                f"{gap:+.2f}",
                f"{ff:.4f}",
                f"{cf:.4f}",
                f"{f1_gap:+.2f}",
                f"{100 * agree:.1f} %",
                f"{r.fed_train_loss:.4f} / {r.central_train_loss:.4f}",
                "yes" if abs(gap) <= GOAL_PP else "no",
            ]
        )
        what = f"{r.protocol}, B={r.n_bins}, {r.rounds} rounds, {r.sketch}"
        for name, proba in (("FedSCS-XGB", r.fed_proba), ("xgboost", r.central_proba)):
            if np.unique(proba.argmax(axis=1)).size < 2:
                failures.append(f"{what}: {name} predicts a single class")
        if abs(gap) > SANITY_PP:
            failures.append(f"{what}: accuracy gap {gap:+.2f} pp exceeds the {SANITY_PP} pp sanity bound")
    return rows


ACCURACY_HEADERS = [
    "protocol",
    "rounds",
    "B",
    "FedSCS-XGB sketch",
    "fed acc",
    "central acc",
    "gap (pp)",
    "fed F1",
    "central F1",
    "F1 gap (pp)",
    "same test prediction",
    "train mlogloss fed / central",
    f"|gap| <= {GOAL_PP} pp",
]


# --- section 2: rank error -----------------------------------------------------------------------
def round1_weights(clients: list, n_classes: int) -> list[np.ndarray]:
    """Per client, the round-1 sketch weights w_i = sum_k h_ik at the fleet's base score (as the clients compute
    them)."""
    from shared.objectives import Softmax

    objective = Softmax(n_classes)
    counts = sum(objective.base_score_stats(c.y) for c in clients)
    base = objective.base_score(counts, mode="average")
    out = []
    for c in clients:
        _, h = objective.gradients(np.broadcast_to(base, (c.X.shape[0], n_classes)), c.y)
        out.append(h.sum(axis=1))
    return out


def rank_error_rows(
    data: Pooled, n_classes: int, bins: list[int], failures: list[str]
) -> tuple[list[list[str]], dict, int]:
    """Rows of table 2, the merged round-1 summary edges by (B, M), and the number of constant features."""
    from shared.sketches import (
        DDSketch,
        Standardization,
        ddsketch_edges,
        exact_edges,
        merge_edges_columns,
        rank_error,
        summarize_columns,
        weighted_moments,
    )

    weights = round1_weights(data.clients, n_classes)
    w = np.concatenate(weights)  # same order as data.Xtr (clients stacked)
    X = data.Xtr
    d = X.shape[1]
    moments = weighted_moments(X.astype(np.float64))  # what the clients' setup replies sum to
    maps = {
        "raw": [Standardization()] * d,
        "standardised": [Standardization.from_moments(moments[:, j]) for j in range(d)],
    }
    dd = {
        name: [DDSketch.from_columns(c.X, wc, 0.01, m) for c, wc in zip(data.clients, weights)]
        for name, m in maps.items()
    }
    rows, kept = [], {}
    # A constant feature admits no split; its alpha only says on which side of the value the edges lie.
    varying = np.flatnonzero(X.min(axis=0) < X.max(axis=0))

    def row(B: int, sketch: str, size: str, bound: float | None, all_alphas: np.ndarray, n_edges: float) -> None:
        alphas = all_alphas[varying]
        worst = int(varying[np.argmax(alphas)])
        rows.append(
            [
                f"{B}",
                sketch,
                size,
                "-" if bound is None else f"{bound:.5f}",
                f"{alphas.max():.5f}",
                f"{np.median(alphas):.5f}",
                f"{alphas.max() * B:.2f}",
                f"{int((alphas > 1 / B).sum())}",
                f"{worst}",
                "-" if np.isnan(n_edges) else f"{n_edges:.0f}",
            ]
        )

    for B in bins:
        log(f"rank error: B={B}")
        exact = np.array([rank_error(exact_edges(X[:, j], w, B), X[:, j], w, B) for j in range(d)])
        if exact.max() != 0:
            failures.append(f"exact pooled edges have rank error {exact.max()} at B={B}, expected 0")
        for M in (B, 4 * B):
            summaries = [summarize_columns(c.X, wc, M) for c, wc in zip(data.clients, weights)]
            edges = merge_edges_columns(summaries, B)
            alphas = np.array([rank_error(edges[j], X[:, j], w, B) for j in range(d)])
            row(
                B,
                "summary + mixture",
                f"M={M}" + (" (=B)" if M == B else " (=4B)"),
                1 / M,
                alphas,
                np.mean([e.size for e in edges]),
            )
            if alphas.max() > 1 / M + 1e-9:
                failures.append(f"summary M={M}, B={B}: rank error {alphas.max():.6f} > 1/M")
            kept[(B, M)] = tuple(edges)
        for name in maps:
            edges = [ddsketch_edges([s[j] for s in dd[name]], B) for j in range(d)]
            alphas = np.array([rank_error(edges[j], X[:, j], w, B) for j in range(d)])
            row(B, f"DDSketch alpha=0.01, {name}", "-", None, alphas, np.mean([e.size for e in edges]))
        _, _, dtrain = run_central(data, _Config(), n_classes, B, 1)
        cuts = xgb_cuts(dtrain, d)
        alphas = np.array([rank_error(cuts[j], X[:, j], w, B) for j in range(d)])
        row(B, "xgboost hist cuts (pooled counts, for scale)", "-", None, alphas, np.mean([e.size for e in cuts]))
        row(B, "exact pooled weighted quantiles (reference)", "-", 0.0, exact, np.nan)
    return rows, kept, d - varying.size


@dataclass(frozen=True)
class _Config:
    """Tree settings for a throw-away 1-round xgboost (only its cuts are read)."""

    max_depth: int = 4
    learning_rate: float = 0.2
    reg_lambda: float = 1.0
    gamma: float = 0.1
    min_child_weight: float = 1.0


# --- section 3: bytes ----------------------------------------------------------------------------
def fmt_bytes(n: float) -> str:
    return f"{n / 1e6:,.3f} MB" if n >= 1e5 else f"{n / 1e3:,.1f} kB"


# --- main ----------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="B in {64, 256}, 10 rounds only, subject tail only")
    parser.add_argument(
        "--seeds",
        type=int,
        help="repeats (seeds 0..N-1) of the B=256 10-round run for the "
        "wall-time median and the seed-determinism check (default 3; --quick 2)",
    )
    args = parser.parse_args()
    n_seeds = max(1, args.seeds or (2 if args.quick else 3))

    import scipy
    import sklearn
    import xgboost

    from aggregator.algorithms import FedSCSXGB
    from firmware_bridge.importers import seglearn_watch

    command = " ".join(["python", "benchmarks/bench_fedscs_xgb.py", *sys.argv[1:]])
    print_machine(
        "FedSCS-XGB on the seglearn watch set: accuracy vs centralized xgboost, sketch rank error, bytes "
        "and time per round",
        command,
        {
            "scipy": scipy.__version__,
            "xgboost": xgboost.__version__,
            "scikit-learn": sklearn.__version__,
            "threads": f"xgboost uses all {os.cpu_count()} cores unless stated; the simulation runs in one "
            "process (numpy)",
        },
    )

    load_before = os.getloadavg()
    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    n_classes = len(classes)
    log("loading the seglearn watch set through the gateway path ...")
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-fedscs-") as tmp:
        subjects, info = seglearn.load_subjects(Path(tmp), classes)
    log("data loaded")
    failures: list[str] = []
    if len(subjects) != 10:
        failures.append(f"{len(subjects)} subjects, expected 10")
    if info["n_features"] != 204:
        failures.append(f"{info['n_features']} features per window, expected 204")
    if not all(np.isfinite(s.X).all() for s in subjects):
        failures.append("non-finite features in labelled windows")

    protocols = {"subject tail": seglearn.subject_tail, "series tail": seglearn.series_tail}
    if args.quick:
        protocols.pop("series tail")
    data = {p: pooled(p, subjects, [fn(s) for s in subjects]) for p, fn in protocols.items()}
    for p, dp in data.items():
        if np.unique(dp.ytr).size != n_classes or np.unique(dp.yte).size != n_classes:
            failures.append(f"{p}: pooled train or test lacks a class")
    main_data = data["subject tail"]
    n, d = main_data.Xtr.shape
    print(
        f"- data: {len(subjects)} subjects, {info['labelled']:,} labelled windows x {info['n_features']} features "
        f"(feature set {info['feature_set_version']}), {n_classes} classes; extract_recording "
        f"{info['extract_s']:.1f} s"
    )
    for p, dp in data.items():
        sizes = [c.X.shape[0] for c in dp.clients]
        print(
            f"- {p}: pooled train {dp.Xtr.shape[0]:,} / test {dp.Xte.shape[0]:,} windows; train windows per "
            f"client {min(sizes)}-{max(sizes)}"
        )
    base = FedSCSXGB(protocol="atoms")
    print(
        f"- FedSCSXGB(protocol='atoms', n_rounds, n_bins=B, max_depth={base.max_depth}, "
        f"learning_rate={base.learning_rate}, "
        f"reg_lambda={base.reg_lambda}, gamma={base.gamma}, min_child_weight={base.min_child_weight}, "
        f"base_score={base.base_score!r}, sketch={base.sketch!r} (summary_size M = B) unless stated); "
        f"xgboost {xgb_params(base, n_classes, 0) | {'max_bin': 'B'}}"
    )
    print()

    bins = [64, 256] if args.quick else [64, 128, 256, 512]
    long_rounds = [] if args.quick else [100]

    # -- 1. accuracy ---------------------------------------------------------------------------
    results: list[Comparison] = []
    central_256 = None
    for B in bins:
        config = FedSCSXGB(protocol="atoms", n_rounds=10, n_bins=B)
        central = run_central(main_data, config, n_classes, B, 10)
        log(f"subject tail: xgboost B={B}, 10 rounds done in {central[1]:.1f} s")
        if B == 256:
            central_256 = central
        results.append(
            compare(main_data, config, n_classes, f"summary M={B}", central=central, label=f"B={B}, 10 rounds")
        )
    for rounds in long_rounds:
        results.append(
            compare(
                main_data,
                FedSCSXGB(protocol="atoms", n_rounds=rounds, n_bins=256),
                n_classes,
                "summary M=256",
                label=f"B=256, {rounds} rounds",
            )
        )
    results.append(
        compare(
            main_data,
            FedSCSXGB(protocol="atoms", n_rounds=10, n_bins=256, sketch="ddsketch"),
            n_classes,
            "DDSketch alpha=0.01, standardised",
            central=central_256,
            label="B=256 DDSketch",
        )
    )
    diagnostic = None
    if not args.quick:
        cuts = xgb_cuts(central_256[2], d)
        results.append(
            compare(
                main_data,
                FedSCSXGB(protocol="atoms", n_rounds=10, n_bins=256, edges=cuts),
                n_classes,
                "edges = xgboost's cuts (diagnostic)",
                central=central_256,
                label="B=256, xgboost's cuts",
            )
        )
        diagnostic = (
            same_trees(results[-1].fed.model, central_256[0]),
            float(np.abs(results[-1].fed_proba - results[-1].central_proba).max()),
        )
    secondary: list[Comparison] = []
    if "series tail" in data:
        for B in (64, 256):
            secondary.append(
                compare(
                    data["series tail"],
                    FedSCSXGB(protocol="atoms", n_rounds=10, n_bins=B),
                    n_classes,
                    f"summary M={B}",
                    label=f"B={B}, 10 rounds",
                )
            )

    print("### 1. Accuracy and macro-F1: FedSCS-XGB (simulation) vs centralized xgboost (pooled train)\n")
    print(markdown_table(ACCURACY_HEADERS, accuracy_rows(results, failures)))
    print()
    if secondary:
        print("Secondary protocol (series tail):\n")
        print(markdown_table(ACCURACY_HEADERS, accuracy_rows(secondary, failures)))
        print()
    n_test = main_data.yte.shape[0]
    print(
        f"One subject-tail test window = {100 / n_test:.2f} pp ({n_test} windows; most from exercises the "
        "subject's own train split never saw, so small model differences move accuracy in window-sized steps). "
        "'same test prediction': share of test windows where both models predict the same class. "
        "'train mlogloss': on the pooled train set, after the last round. Both models deterministic: one "
        "number each. The diagnostic row gives FedSCS-XGB xgboost's own bins (its hist cuts: count quantiles "
        "computed once), so any remaining difference comes from tree growth, not from the sketch."
    )
    if diagnostic is not None:
        (same, total, first), dp = diagnostic
        where = (
            ""
            if first is None
            else f"; first difference in tree {first} (round {first // n_classes + 1}, class {first % n_classes})"
        )
        print(
            f"Diagnostic row: {same} of {total} trees identical to xgboost's (split features and thresholds, "
            f"node order){where}; max |probability difference| on the test set {dp:.2g}."
        )
    print()

    # -- 2. rank error --------------------------------------------------------------------------
    rows, kept_edges, n_constant = rank_error_rows(main_data, n_classes, [64, 256], failures)
    print("### 2. Rank error alpha of the round-1 bin edges (Hessian-weighted, subject-tail train, 10 clients)\n")
    print(
        markdown_table(
            [
                "B",
                "sketch",
                "summary size",
                "bound 1/M",
                "max alpha",
                "median alpha",
                "max alpha x B (bins)",
                "features with alpha > 1/B",
                "worst feature",
                "edges (mean)",
            ],
            rows,
        )
    )
    print()
    print(
        "alpha = max over targets b/B of the distance to the nearest edge's rank bracket, on the pooled "
        "float32 features with the round-1 weights w_i = sum_k h_ik (softmax at the base score, XGBoost's "
        f"factor-2 Hessian); max and median over the {d - n_constant} features that are not "
        f"constant in the pooled train set ({n_constant} constant features excluded: no split "
        "exists there). A discrete feature with a heavy tie (e.g. k/4 values, half the weight on one) gives "
        "DDSketch a large alpha: its edges are bucket representatives within 1 % of the tied value but not on "
        "it, so their rank brackets miss the tie. DDSketch standardisation: pooled unweighted "
        "mean and std (what FedSCS-XGB's setup round gives the server). xgboost's hist cuts are count "
        "quantiles built once, shown against the same Hessian-weighted ranks for scale."
    )
    print()

    # -- 3. bytes -------------------------------------------------------------------------------
    from aggregator.simulate import Simulation

    log("bytes: setup only (n_rounds=0) ...")
    sim = Simulation(main_data.clients)
    sim.run(FedSCSXGB(protocol="atoms", n_rounds=0))
    setup_client, setup_server = sim.client_bytes(), sim.server.stats.sent_bytes
    fixed_rounds = 3 if args.quick else 10  # atoms cost about the same every round
    log(f"bytes: B=256 with fixed edges (atoms only), {fixed_rounds} rounds ...")
    fixed = run_fed(
        main_data,
        FedSCSXGB(protocol="atoms", n_rounds=fixed_rounds, n_bins=256, edges=kept_edges[(256, 256)]),
        label="fixed edges",
    )
    raw32, raw64 = n * d * 4, n * d * 8

    def per_round(run: FedRun, rounds: int) -> tuple[float, float]:
        return (run.client_bytes - setup_client) / rounds, (run.server_bytes - setup_server) / rounds

    rows = []
    atoms_256 = per_round(fixed, fixed_rounds)[0]
    for r in results:
        if "diagnostic" in r.sketch:
            continue
        up, down = per_round(r.fed, r.rounds)
        sketch_part = f"{fmt_bytes(up - atoms_256)}" if r.n_bins == 256 and r.rounds == 10 else ""
        atom_part = fmt_bytes(atoms_256) if sketch_part else ""
        rows.append(
            [
                f"{r.rounds}",
                f"{r.n_bins}",
                r.sketch,
                fmt_bytes(up),
                fmt_bytes(up / len(main_data.clients)),
                sketch_part,
                atom_part,
                f"{up / raw32:.2f}",
                f"{up * r.rounds / raw32:.1f}",
                fmt_bytes(down),
            ]
        )
        if up <= 0:
            failures.append(f"B={r.n_bins}, {r.rounds} rounds: no client bytes per round")
    up, down = per_round(fixed, fixed_rounds)
    rows.append(
        [
            f"{fixed_rounds}",
            "256",
            "none: edges fixed (atoms only)",
            fmt_bytes(up),
            fmt_bytes(up / len(main_data.clients)),
            "0",
            fmt_bytes(up),
            f"{up / raw32:.2f}",
            f"{up * 10 / raw32:.1f}",
            fmt_bytes(down),
        ]
    )
    print("### 3. Bytes per boosting round (subject tail, 10 clients)\n")
    print(
        markdown_table(
            [
                "rounds",
                "B",
                "sketch",
                "clients -> server per round",
                "per client per round",
                "of which sketch",
                "of which atoms",
                "per round / raw float32",
                "whole run / raw float32",
                "server -> clients per round",
            ],
            rows,
        )
    )
    print()
    print(
        f"Raw pooled train matrix: {n:,} x {d} = {fmt_bytes(raw32)} as float32, {fmt_bytes(raw64)} as float64 "
        f"(sent once, not per round). The job's opening exchange (an n_rounds=0 run: the clients' data summaries): "
        f"{fmt_bytes(setup_client)} from the clients, subtracted above. Bytes are the encoded payloads on the "
        "in-memory transport (same codec and chunking as MQTT, no MQTT headers). Sketch vs atoms measured at "
        "B=256 only: atoms from a run with the round-1 merged edges fixed (same edge counts, hence the same "
        "bin-id dtype); sketch = full run - that. 'whole run': per round x 10 rounds (x 100 for the 100-round "
        "row). Server -> clients: requests (edges, model deltas)."
    )
    print()

    # -- 4. wall time ---------------------------------------------------------------------------
    ref = next(r for r in results if r.n_bins == 256 and r.rounds == 10 and r.sketch.startswith("summary"))
    reps = [(ref.fed, ref.central_seconds)]
    config = FedSCSXGB(protocol="atoms", n_rounds=10, n_bins=256)
    ref_proba = ref.fed_proba
    load_timing = os.getloadavg()
    for seed in range(1, n_seeds):
        log(f"timing repeat seed {seed} ...")
        fed = run_fed(main_data, config, seed=seed, label=f"seed {seed}")
        _, central_seconds, _ = run_central(main_data, config, n_classes, 256, 10)
        reps.append((fed, central_seconds))
        if fed.model.predict_proba(main_data.Xte).tobytes() != ref_proba.tobytes():
            failures.append(f"FedSCS-XGB with seed {seed} differs from seed 0 (all clients sampled: it must not)")
    one_thread = [run_central(main_data, config, n_classes, 256, 10, nthread=1)[1] for _ in range(n_seeds)]
    fed_totals = [f.seconds for f, _ in reps]
    fed_rounds = [sum(f.round_seconds) / len(f.round_seconds) for f, _ in reps]
    xgb_totals = [c for _, c in reps]
    fed_total, fed_round, xgb_total, xgb1_total = (median(v) for v in (fed_totals, fed_rounds, xgb_totals, one_thread))
    rows = [
        [
            "FedSCS-XGB simulation (10 clients, one process)",
            f"{fed_total:.2f}",
            f"{fed_total / 10:.3f}",
            f"{min(fed_totals) / 10:.3f}",
            f"{fed_round:.3f}",
            f"{fed_total / xgb_total:.0f}x",
            f"{fed_total / xgb1_total:.0f}x",
        ],
        [
            f"xgboost.train, {os.cpu_count()} threads (DMatrix included)",
            f"{xgb_total:.2f}",
            f"{xgb_total / 10:.3f}",
            f"{min(xgb_totals) / 10:.3f}",
            "",
            "1x",
            "",
        ],
        [
            "xgboost.train, 1 thread (DMatrix included)",
            f"{xgb1_total:.2f}",
            f"{xgb1_total / 10:.3f}",
            f"{min(one_thread) / 10:.3f}",
            "",
            "",
            "1x",
        ],
    ]
    print(f"### 4. Wall time, B=256, 10 rounds, subject tail (median of {len(reps)} repeats)\n")
    print(
        markdown_table(
            [
                "trainer",
                "total (s)",
                "per round (s)",
                "per round, fastest repeat (s)",
                "per boosting round, setup excluded (s)",
                f"ratio vs xgboost {os.cpu_count()} threads",
                "ratio vs xgboost 1 thread",
            ],
            rows,
        )
    )
    print()
    print(
        "Simulation total = Simulation.run (setup round included); 'setup excluded' = the mean of the rounds' "
        "own elapsed times from the progress reports (sketch phase + atom phase + tree growth, all in one "
        f"process). Load average (1/5/15 min) at start {'/'.join(f'{v:.2f}' for v in load_before)}, before "
        f"the repeats {'/'.join(f'{v:.2f}' for v in load_timing)}, at the end "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores. Repeats use seeds "
        f"0..{len(reps) - 1}: with every client sampled the models must be "
        "bit-identical (checked)."
    )
    print()

    print("correctness: " + ("all checks passed" if not failures else "FAILED"))
    for failure in failures:
        print(f"  - {failure}")
    log(f"done in {time.perf_counter() - T0:.0f} s")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
