"""FedGA-Tree against each client's local CART tree on real tabular data sets that ship inside
installed packages, with the paper's protocol (§IV-A, Fig. 3 and 8, Eq. 3, Appendix A).

    ulimit -v 4000000; nice .venv/bin/python benchmarks/bench_fedga_tree.py [--splits S] [--seeds R]
        [--generations G] [--datasets NAME ...] [--workers W] [--results FILE] [--quick]
        [--clients 5,10,15,30] [--participation 0.5,0.25,0.1]
    .venv/bin/python benchmarks/bench_fedga_tree.py --from FILE   # the tables of saved (partial) results

Data (nothing is downloaded; every set is in a wheel the dev extra installs):

* classification: statsmodels' ``fair`` (6,366 women, 8 features, target "had an affair"),
  scikit-learn's ``digits`` (1,797 images, 64 pixel features, 10 classes) and
  ``breast_cancer`` (569 tumours, 30 features);
* regression: statsmodels' ``randhie`` (20,190 RAND health-insurance records, 9 features,
  target: outpatient visits) and scikit-learn's ``diabetes`` (442 patients, 10 features).

Protocol, as the paper's: per split, a random 90 % / 10 % train/test split, the test part common
to all clients, the training part dealt at random to N clients; N = 20 (the paper's main
setting) where that leaves each client at least 200 training samples, else the largest of the
paper's other client counts (15, 10, 5) that does, else 5 (the per-client count is printed).
Classification features are put into 5 quantile bins by scikit-learn's ``KBinsDiscretizer``
fitted on the split's training part, for every method (Appendix A: a feature left with one bin
gets 2 uniform bins instead). FedGA-Tree is ``aggregator.simulate(FedGATree(task), clients,
seed)`` -- the real server and client halves over the in-memory transport, Table II's defaults
-- run with ``--seeds`` GA seeds per split. The local tree is scikit-learn's CART on all of the
client's training data, its depth chosen by 5-fold cross-validation in [2, 15]. Classification
also runs the paper's IBM tree (``aggregator.baselines.DPTree``: depth 6, ε = 1, candidate
thresholds between the bins), one per split.

Per client i, Eq. 3: Δ^i = (test score of its FedGA tree / test score of its local tree - 1)
x 100, score = macro F1 (classification) or MSE (regression, where a negative Δ is better);
Δ = mean over clients; "gain" = share of clients whose FedGA tree scores better. Per split, Δ
and gain are averaged over the GA seeds (the paper's "averaged across independent runs for each
train/test split"); the table gives their median [IQR] and mean over the splits, and the
paired tests: Wilcoxon's signed-rank test of the per-split Δ against 0 and of every client's
seed-averaged FedGA score against its local score (clients of all splits). The splits run
interleaved across the data sets and each finished split is appended to ``--results`` as one JSON
line, so that ``--from`` tabulates a run that was cut short.

Sweeps (the paper's Fig. 6, 7 and 10): ``--clients`` runs every listed N with full participation
(Fig. 6, 10a); ``--participation`` runs every listed share c of clients active per generation at
the data set's own N (Fig. 7, 10b) through FedGATree's ``active_fraction`` (the opening and each
generation ask a random c share; a client asked for the first time joins with its structure;
every client fits the final population). N stays as given even where it leaves a client fewer
than 200 training samples; the table marks those rows. The IBM tree has no per-query
participation: at c < 1 it is grown from one random c share of the clients (an emulation).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine

CLASSIFICATION = ("fair", "digits", "breast_cancer")
REGRESSION = ("diabetes", "randhie")
PAPER_CLIENTS = (20, 15, 10, 5)
MIN_PER_CLIENT = 200
SWEEP_CLIENTS = (5, 10, 15, 30)  # Fig. 6 and 10a
SWEEP_PARTICIPATION = (0.5, 0.25, 0.1)  # Fig. 7 and 10b


@dataclass(frozen=True)
class Dataset:
    """A bundled data set: features ``X``, target ``y``, and whether it is a regression."""

    name: str
    X: np.ndarray
    y: np.ndarray
    regression: bool


def load(name: str) -> Dataset:
    """One of :data:`CLASSIFICATION` or :data:`REGRESSION`, read from the installed wheels."""
    from sklearn import datasets

    if name == "fair":
        from statsmodels.datasets import fair

        data = fair.load_pandas().data
        return Dataset(
            name,
            data.drop(columns="affairs").to_numpy(np.float64),
            (data["affairs"].to_numpy() > 0).astype(np.int64),
            False,
        )
    if name == "randhie":
        from statsmodels.datasets import randhie

        data = randhie.load_pandas()
        return Dataset(name, data.exog.to_numpy(np.float64), data.endog.to_numpy(np.float64), True)
    loaders = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "diabetes": datasets.load_diabetes,
    }
    if name not in loaders:
        raise ValueError(f"unknown dataset {name!r}")
    X, y = loaders[name](return_X_y=True)
    return Dataset(name, np.asarray(X, np.float64), np.asarray(y), name in REGRESSION)


def n_clients(n_samples: int) -> int:
    """The paper's client count for ``n_samples``: the largest of :data:`PAPER_CLIENTS` that
    leaves every client at least :data:`MIN_PER_CLIENT` training samples (90 % of the data), else
    the smallest one."""
    n_train = n_samples - n_samples // 10
    return next((n for n in PAPER_CLIENTS if n_train // n >= MIN_PER_CLIENT), PAPER_CLIENTS[-1])


def per_client(n_samples: int, clients: int) -> int:
    """The smallest client's training samples when 90 % of ``n_samples`` go to ``clients``."""
    return (n_samples - n_samples // 10) // clients


def ibm_share(clients: int, participation: float, split: int) -> np.ndarray:
    """The clients that grow the IBM tree at participation ``participation``: a random share of
    them, as many as FedGATree asks per generation (all at 1)."""
    k = max(1, int(round(participation * clients)))
    return np.sort(np.random.default_rng([split, clients]).choice(clients, size=k, replace=False))


def deal(n_samples: int, clients: int, split: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Split ``split``: 10 % common test rows, the rest dealt at random to ``clients``."""
    order = np.random.default_rng(split).permutation(n_samples)
    n_test = n_samples // 10
    return np.array_split(order[n_test:], clients), order[:n_test]


def discretise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Appendix A: every feature into 5 quantile bins (ordinal codes) fitted on ``train``; a
    feature for which that leaves one bin gets 2 uniform bins instead."""
    import warnings

    from sklearn.preprocessing import KBinsDiscretizer

    out_train, out_test = np.empty_like(train), np.empty_like(test)
    for j in range(train.shape[1]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "bins whose width are too small ... removed"
            binner = KBinsDiscretizer(5, encode="ordinal", strategy="quantile")
            binner.fit(train[:, j : j + 1])
            if binner.n_bins_[0] < 2:
                binner = KBinsDiscretizer(2, encode="ordinal", strategy="uniform").fit(train[:, j : j + 1])
        out_train[:, j] = binner.transform(train[:, j : j + 1])[:, 0]
        out_test[:, j] = binner.transform(test[:, j : j + 1])[:, 0]
    return out_train, out_test


def bin_edges(X: np.ndarray) -> list[np.ndarray]:
    """Per column, the midpoints between its consecutive distinct (bin) values: the IBM tree's
    candidate thresholds on discretised data."""
    return [(u[1:] + u[:-1]) / 2 for u in (np.unique(column) for column in X.T)]


def cv_tree(X: np.ndarray, y: np.ndarray, regression: bool, seed: int):
    """The paper's local tree: scikit-learn CART on all of ``X``, its depth chosen by 5-fold CV
    in [2, 15] (macro F1 or R² per fold, the scikit-learn-equal numpy scores of the client)."""
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
            scores[j] += (
                r2(codes[held], predicted[None, :])
                if regression
                else f1_macro(codes[held], predicted[None, :].astype(np.int64), len(classes))
            )[0]
    return model(max_depth=depths[int(np.argmax(scores))], random_state=seed).fit(X, y)


def score(regression: bool, y: np.ndarray, predicted: np.ndarray) -> float:
    """Macro F1 or MSE on the test rows."""
    from sklearn.metrics import f1_score, mean_squared_error

    return (
        float(mean_squared_error(y, predicted))
        if regression
        else float(f1_score(y, predicted, average="macro", zero_division=0))
    )


def relative_change(federated: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Eq. 3 per client: (federated / local - 1) x 100."""
    return (federated / local - 1.0) * 100.0


def gains(federated: np.ndarray, local: np.ndarray, regression: bool) -> np.ndarray:
    """Whether each client's FedGA tree scores better than its local tree."""
    return federated < local if regression else federated > local


@dataclass(frozen=True)
class SplitOutcome:
    """One split: per client its local test score and its FedGA test scores (one per GA seed),
    (classification) the IBM tree's test score, and the mean decision nodes of the FedGA and
    local trees."""

    name: str
    split: int
    regression: bool
    local: np.ndarray  # (clients,)
    federated: np.ndarray  # (seeds, clients)
    ibm: float | None
    nodes_federated: float
    nodes_local: float
    seconds: float
    clients: int = 0  # N; 0 in records written before the sweeps: the number of local scores
    participation: float = 1.0  # c

    @property
    def n(self) -> int:
        """N, the clients of the split."""
        return self.clients or self.local.size

    @property
    def setting(self) -> tuple[str, int, float]:
        return self.name, self.n, self.participation

    def to_json(self) -> str:
        return json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in asdict(self).items()})

    @classmethod
    def from_json(cls, line: str) -> SplitOutcome:
        fields = json.loads(line)
        return cls(**{**fields, "local": np.array(fields["local"]), "federated": np.array(fields["federated"])})

    @property
    def delta(self) -> float:
        """Δ averaged over the GA seeds."""
        return float(relative_change(self.federated, self.local[None, :]).mean())

    @property
    def gain(self) -> float:
        """Share of clients gaining, averaged over the GA seeds."""
        return float(gains(self.federated, self.local[None, :], self.regression).mean())

    @property
    def ibm_delta(self) -> float:
        """Eq. 3's Δ of the IBM tree (one tree for every client)."""
        return float(relative_change(np.full(self.local.shape, self.ibm), self.local).mean())

    @property
    def ibm_gain(self) -> float:
        return float(gains(np.full(self.local.shape, self.ibm), self.local, self.regression).mean())


def run_split(
    name: str,
    split: int,
    seeds: int,
    generations: int,
    clients: int | None = None,
    participations: tuple[float, ...] = (1.0,),
) -> list[SplitOutcome]:
    """Split ``split`` of ``name`` dealt to ``clients`` (default :func:`n_clients`): the local
    trees once, then per participation share the IBM tree and ``seeds`` FedGA-Tree runs."""
    import aggregator
    from aggregator.algorithms import FedGATree
    from aggregator.baselines import DPTree

    started = time.perf_counter()
    data = load(name)
    n = clients or n_clients(data.y.size)
    parts, test = deal(data.y.size, n, split)
    X = data.X.copy()
    train_rows = np.concatenate(parts)
    if not data.regression:
        X[train_rows], X[test] = discretise(data.X[train_rows], data.X[test])
    fleet = [(X[p], data.y[p]) for p in parts]
    X_test, y_test = X[test], data.y[test]
    local_scores, local_nodes = [], []
    for Xc, yc in fleet:
        tree = cv_tree(Xc, yc, data.regression, split)
        local_scores.append(score(data.regression, y_test, tree.predict(X_test)))
        local_nodes.append(int((tree.tree_.children_left >= 0).sum()))
    shared_seconds = time.perf_counter() - started
    task = "regression" if data.regression else "classification"
    outcomes = []
    for participation in participations:
        started = time.perf_counter()
        ibm = None
        if not data.regression:
            dp = DPTree(max_depth=6, epsilon=1.0).fit(
                [fleet[k] for k in ibm_share(n, participation, split)],
                edges=bin_edges(X[train_rows]),
                classes=tuple(np.unique(data.y[train_rows]).tolist()),
                seed=split,
            )
            ibm = score(False, y_test, dp.predict(X_test))
        federated, fed_nodes = np.zeros((seeds, n)), []
        algorithm = FedGATree(task=task, generations=generations, active_fraction=participation)
        for seed in range(seeds):
            models = aggregator.simulate(algorithm, fleet, seed=seed)
            for k in range(n):
                model = models[f"client-{k:03d}"]
                federated[seed, k] = score(data.regression, y_test, model.predict(X_test))
                fed_nodes.append(int((model.trees[0].feature >= 0).sum()))
        outcomes.append(
            SplitOutcome(
                name,
                split,
                data.regression,
                np.array(local_scores),
                federated,
                ibm,
                float(np.mean(fed_nodes)),
                float(np.mean(local_nodes)),
                shared_seconds + time.perf_counter() - started,
                n,
                participation,
            )
        )
    return outcomes


def median_iqr(values: np.ndarray, digits: int = 2) -> str:
    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return f"{q2:.{digits}f} [{q1:.{digits}f}, {q3:.{digits}f}]"


def wilcoxon_p(differences: np.ndarray) -> float:
    """Two-sided p of Wilcoxon's signed-rank test of paired differences against 0 (1 if all 0)."""
    from scipy.stats import wilcoxon

    differences = np.asarray(differences, np.float64)
    return 1.0 if not np.any(differences) else float(wilcoxon(differences).pvalue)


def table(outcomes: list[SplitOutcome]) -> str:
    """One row per data set, N and c: Δ and gain over the splits, their tests, the IBM tree's Δ
    (classification), tree sizes and time."""
    rows = []
    for name, n, participation in sorted(dict.fromkeys(o.setting for o in outcomes), key=lambda s: (s[0], -s[2], s[1])):
        group = [o for o in outcomes if o.setting == (name, n, participation)]
        deltas = np.array([o.delta for o in group])
        shares = 100 * np.array([o.gain for o in group])
        per_client_fed = np.concatenate([o.federated.mean(axis=0) for o in group])
        per_client_local = np.concatenate([o.local for o in group])
        samples = per_client(load(name).y.size, n)
        rows.append(
            [
                name,
                "MSE" if group[0].regression else "macro F1",
                str(n),
                f"{100 * participation:.0f}",
                f"{samples}" + (f" (< {MIN_PER_CLIENT})" if samples < MIN_PER_CLIENT else ""),
                f"{len(group)} x {group[0].federated.shape[0]}",
                median_iqr(deltas),
                f"{deltas.mean():.2f}",
                median_iqr(shares, 0),
                f"{wilcoxon_p(deltas):.3g}",
                f"{wilcoxon_p(per_client_fed - per_client_local):.3g}",
                *(
                    []
                    if group[0].regression
                    else [
                        median_iqr(np.array([o.ibm_delta for o in group])),
                        median_iqr(100 * np.array([o.ibm_gain for o in group]), 0),
                    ]
                ),
                f"{np.mean([o.nodes_federated for o in group]):.1f}",
                f"{np.mean([o.nodes_local for o in group]):.1f}",
                f"{np.mean([o.seconds for o in group]):.0f}",
            ]
        )
    headers = [
        "data",
        "score",
        "N",
        "c %",
        "train/client",
        "splits x seeds",
        "Δ % median [IQR]",
        "Δ % mean",
        "gain % median [IQR]",
        "p (splits' Δ)",
        "p (clients)",
        *([] if outcomes[0].regression else ["Δ IBM % median [IQR]", "IBM gain % median [IQR]"]),
        "nodes FedGA",
        "nodes local",
        "s/split",
    ]
    return markdown_table(headers, rows)


def shares(text: str) -> tuple[float, ...]:
    """``--participation``: comma-separated shares in (0, 1]."""
    values = tuple(float(v) for v in text.split(","))
    if not all(0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"every share must be in (0, 1], got {text!r}")
    return values


def counts(text: str) -> tuple[int, ...]:
    """``--clients``: comma-separated client counts >= 2."""
    values = tuple(int(v) for v in text.split(","))
    if not all(v >= 2 for v in values):
        raise argparse.ArgumentTypeError(f"every client count must be >= 2, got {text!r}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--splits", type=int, default=10, help="train/test splits per data set (paper: 10)")
    parser.add_argument("--seeds", type=int, default=10, help="GA seeds per split (paper: 10 runs)")
    parser.add_argument("--generations", type=int, default=100, help="G (Table II: 100)")
    parser.add_argument(
        "--datasets", nargs="+", choices=CLASSIFICATION + REGRESSION, default=list(CLASSIFICATION + REGRESSION)
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--results", type=Path, help="append each finished split here (JSON lines)")
    parser.add_argument("--from", dest="saved", type=Path, help="print the tables of saved results and stop")
    parser.add_argument("--quick", action="store_true", help="2 splits x 1 seed, 5 generations (smoke run)")
    parser.add_argument(
        "--clients", type=counts, help=f"sweep N with c = 100 %% (paper's Fig. 6: {','.join(map(str, SWEEP_CLIENTS))})"
    )
    parser.add_argument(
        "--participation",
        type=shares,
        help=f"sweep c at the data set's own N (paper's Fig. 7: {','.join(map(str, SWEEP_PARTICIPATION))})",
    )
    args = parser.parse_args()
    if args.quick:
        args.splits, args.seeds, args.generations = 2, 1, 5
    command = " ".join([".venv/bin/python", "benchmarks/bench_fedga_tree.py", *sys.argv[1:]])
    import sklearn
    import statsmodels

    print_machine(
        "FedGA-Tree vs local CART trees on bundled real data sets",
        command,
        {"scikit-learn": sklearn.__version__, "statsmodels": statsmodels.__version__},
    )
    if args.saved:
        report([SplitOutcome.from_json(line) for line in args.saved.read_text().splitlines() if line.strip()])
        return 0
    print(
        f"- FedGATree defaults (Table II) except G = {args.generations}; {args.splits} splits x {args.seeds} "
        f"GA seeds per setting; {args.workers} worker processes\n",
        flush=True,
    )
    started = time.perf_counter()
    # (clients or None for the data set's own N, participation shares); without sweeps: (None, (1,))
    settings: list[tuple[int | None, tuple[float, ...]]] = [(n, (1.0,)) for n in args.clients or ()]
    if args.participation:
        settings.append((None, args.participation))
    settings = settings or [(None, (1.0,))]
    jobs = [
        (name, split, args.seeds, args.generations, n, cs)
        for split in range(args.splits)
        for n, cs in settings
        for name in args.datasets
    ]
    outcomes: list[SplitOutcome] = []

    def record(done: list[SplitOutcome]) -> None:
        for outcome in done:
            outcomes.append(outcome)
            print(
                f"  {outcome.name} N {outcome.n} c {100 * outcome.participation:.0f} % split {outcome.split}: "
                f"Δ {outcome.delta:+.2f} %, gain {100 * outcome.gain:.0f} %, {outcome.seconds:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            if args.results:
                with args.results.open("a") as out:
                    out.write(outcome.to_json() + "\n")

    if args.workers == 1:  # one process: no pool
        for job in jobs:
            record(run_split(*job))
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            for future in [pool.submit(run_split, *job) for job in jobs]:
                record(future.result())
    report(outcomes)
    print(f"- total {time.perf_counter() - started:.0f} s wall clock")
    return 0


def report(outcomes: list[SplitOutcome]) -> None:
    """The classification and regression tables and the mean over the classification sets at the
    paper's main setting (each set's own N, c = 100 %)."""
    for kind, names in (
        ("Classification (macro F1; Δ > 0 is better)", CLASSIFICATION),
        ("Regression (MSE; Δ < 0 is better)", REGRESSION),
    ):
        group = [o for o in outcomes if o.name in names]
        if group:
            print(f"### {kind}\n")
            print(table(group))
            print()
    cls = [o for o in outcomes if not o.regression and o.participation == 1 and o.n == n_clients(load(o.name).y.size)]
    if cls:
        by_set = {name: [o for o in cls if o.name == name] for name in dict.fromkeys(o.name for o in cls)}
        delta = np.mean([np.mean([o.delta for o in group]) for group in by_set.values()])
        share = 100 * np.mean([np.mean([o.gain for o in group]) for group in by_set.values()])
        print(
            f"- classification, mean over data sets: Δ = {delta:+.2f} %, {share:.0f} % of clients gain "
            f"(paper, 14 sets: +5.58 %, 75 %)"
        )


if __name__ == "__main__":
    sys.exit(main())
