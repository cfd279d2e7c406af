"""The epsilon-accuracy curve at the fleet demo's scale, over paired split seeds.

    ulimit -v 4000000; nice .venv/bin/python benchmarks/bench_dp_curve.py [--seeds 10] [--eps 1,2,4,8,16,32,64]

The data are the demo's first training, built as the demo builds it (``aggregator.demo``):
the bundled recordings (``seglearn_watch.import_all`` with every subject's exercise series in a
seeded random order, one gateway per subject, 10 gateways), each session labelled only over its
first 40 % (``DemoConfig.labelled_fraction``), windows through the gateway's own feature path
(``extract_recording``), and per gateway the last 25 % of its labelled windows held out after a
one-window gap (``DemoConfig.holdout_fraction``, ``training_data.tail_split``). A *split seed* is
the series-order seed (the demo's own is ``sessions.SERIES_SEED`` = 7, the first seed here): it
changes which exercises fall in each gateway's labelled start and in its held-out tail, so every
seed is a different small fleet. The trainings' random seed is the split seed too, so the noise
draws differ between seeds.

For each seed, on the *same* split (paired), every row is trained through the real in-process
simulation (``aggregator.simulate.Simulation``: the product's client and server code, codec and
round engine over an in-memory broker, secure aggregation on) with the demo's settings
(``TrainingPlan.config``): FedSCS-XGB (10 rounds, depth 4) in the private default at each epsilon
and in the non-private histogram protocol (64 bins, the demo's non-DP setting); FedForest (30
trees, ``training.FOREST_DEPTH`` and ``FOREST_BINS``: depth 5, 16 bins; min 3 windows per leaf)
likewise; the local-only baseline
(the demo's ``local_config``, one job per gateway
with that gateway alone, as the demo runs it: a forest of its own windows, scored on its own
held-out windows); and the majority-class rate of the pooled held-out
windows (the demo's "chance"). Accuracy is pooled over every gateway's held-out windows, as the
demo's deployment rule reads it. The table gives mean and sd over seeds, the paired difference to
local-only (mean, sd), and on how many seeds the row beat local-only and chance (both strictly,
as the demo's rule needs), plus the MB each gateway sent in one training (mean over seeds). The
rows "demo's federated model" take, per seed, the better of the two private models at that
epsilon: the one the demo would deploy.
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine

EPSILONS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
DEMO_SERIES_SEED = 7
#: The derived rows: per seed, the better of the two private models at an epsilon (the demo deploys the
#: better-scoring federated model when it beats the local-only baseline and chance).
BETTER = "demo's federated model (the better of the two)"


@dataclass
class Fleet:
    clients: list  # ClientData, one per gateway (training windows)
    tests: dict[str, tuple[np.ndarray, np.ndarray]]  # gateway -> held-out (X, y)
    classes: list[str]

    @property
    def n_train(self) -> int:
        return sum(len(c.y) for c in self.clients)

    @property
    def n_test(self) -> int:
        return sum(len(y) for _, y in self.tests.values())


def load_fleet(seed: int) -> Fleet:
    """The demo's first-training fleet for one series-order seed (module docstring)."""
    from aggregator.demo.orchestrator import DemoConfig
    from edge_client.processing import extract_recording
    from edge_client.training_data import ClientData, tail_split
    from firmware_bridge.importers import seglearn_watch
    from firmware_bridge.recording import Recording
    from firmware_bridge.replay import schedule

    cfg = DemoConfig()
    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    clients, tests = [], {}
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-dpcurve-") as tmp:
        paths = seglearn_watch.import_all(Path(tmp), shuffle_seed=seed)[: cfg.subjects]
        for i, path in enumerate(paths):
            table, _ = extract_recording(path)
            plan = schedule(Recording.load(path))
            first, last = plan[0].at_us, plan[-1].at_us
            cut = first + int(cfg.labelled_fraction * (last - first))  # sessions.prepare_sessions' first cut
            # a window is labelled when it lies inside a label interval; the demo clips the intervals at `cut`
            labelled = np.array([v is not None for v in table.labels]) & (table.end_us <= cut)
            rows = np.flatnonzero(labelled)
            rows = rows[np.argsort(table.start_us[rows], kind="stable")]
            X = table.X[rows].astype(np.float32)
            y = np.array([str(v) for v in table.labels[rows]])  # the gateway's label strings
            train, test = tail_split(np.zeros(rows.size, dtype=np.int64), cfg.holdout_fraction, 1)
            gateway = f"gw-{i + 1:02d}"
            clients.append(ClientData(gateway, X[train], y[train]))
            tests[gateway] = (X[test], y[test])
    return Fleet(clients, tests, classes)


def demo_configs(classes: list[str]) -> tuple[dict, dict, dict]:
    """FedSCS-XGB's, FedForest's and the local-only baseline's settings as the demo's
    ``TrainingPlan`` gives them (secure aggregation on), minus the protocol choice."""
    from aggregator.demo.training import TrainingPlan

    plan = TrainingPlan(gateways=[], algorithms=[], classes=classes, secure_aggregation=True)
    drop = ("protocol", "dp_epsilon", "n_bins")
    xgb = {k: v for k, v in plan.config("fedscs-xgb").items() if k not in drop}
    forest = {k: v for k, v in plan.config("fedforest").items() if k not in ("protocol", "dp_epsilon")}
    local = plan.local_config()
    return xgb, forest, local


def pooled_accuracy(fleet: Fleet, predict) -> float:
    correct = total = 0
    for gateway, (X, y) in fleet.tests.items():
        if len(y):
            correct += int(np.sum(predict(gateway, X) == y))
            total += len(y)
    return correct / total


def run_seed(seed: int, epsilons, only: set[str]) -> tuple[dict[str, float], dict[str, float], Fleet]:
    """Accuracy and MB per gateway of every row on one seed's split."""
    from aggregator.algorithms import FedForest, FedSCSXGB
    from aggregator.simulate import Simulation

    fleet = load_fleet(seed)
    xgb, forest, local = demo_configs(fleet.classes)
    acc, mb = {}, {}
    y_test = np.concatenate([y for _, y in fleet.tests.values()])
    acc["majority class (chance)"] = float(np.unique(y_test, return_counts=True)[1].max() / y_test.size)

    def predicting(model):
        return lambda _gateway, X: np.asarray(model.predict(X))

    rows = []
    if "xgb" in only:
        plain = {k: v for k, v in xgb.items() if k != "learning_rate"}  # the demo pins its private step only
        rows.append(("FedSCS-XGB, histogram (no DP, 64 bins)", FedSCSXGB(**plain, protocol="histogram", n_bins=64)))
        rows += [
            (f"FedSCS-XGB, private, epsilon {e:g}", FedSCSXGB(**xgb, protocol="private", dp_epsilon=e))
            for e in epsilons
        ]
    if "forest" in only:
        rows.append(
            (f"FedForest, histogram (no DP, {forest['n_bins']} bins)", FedForest(**forest, protocol="histogram"))
        )
        rows += [
            (f"FedForest, private, epsilon {e:g}", FedForest(**forest, protocol="private", dp_epsilon=e))
            for e in epsilons
        ]
    started = time.perf_counter()
    models, sent = {}, 0
    for client in fleet.clients:  # the demo's local-only baseline: one job per gateway, that gateway alone
        sim = Simulation([client], record_bodies=False)
        models[client.client_id] = sim.run(FedForest(**local), seed=seed)
        sent += sim.client_bytes()
    acc["local-only (each gateway its own forest)"] = pooled_accuracy(
        fleet, lambda gateway, X: np.asarray(models[gateway].predict(X))
    )
    mb["local-only (each gateway its own forest)"] = sent / len(fleet.clients) / 1e6
    for name, algorithm in rows:
        sim = Simulation(fleet.clients, record_bodies=False)
        model = sim.run(algorithm, seed=seed)
        acc[name] = pooled_accuracy(fleet, predicting(model))
        mb[name] = sim.client_bytes() / len(fleet.clients) / 1e6
    print(
        f"  seed {seed}: {fleet.n_train} training / {fleet.n_test} held-out windows, {len(rows) + 1} trainings "
        f"in {time.perf_counter() - started:.0f} s; local-only {acc['local-only (each gateway its own forest)']:.3f}, "
        f"chance {acc['majority class (chance)']:.3f}",
        file=sys.stderr,
        flush=True,
    )
    return acc, mb, fleet


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--seeds", type=int, default=10, help="split seeds (the demo's 7 first, then 0, 1, ...)")
    parser.add_argument("--eps", default=",".join(f"{e:g}" for e in EPSILONS), help="epsilons, comma-separated")
    parser.add_argument("--only", choices=["xgb", "forest", "both"], default="both")
    args = parser.parse_args()
    epsilons = [float(e) for e in args.eps.split(",")]
    only = {"xgb", "forest"} if args.only == "both" else {args.only}
    logging.disable(logging.WARNING)  # the non-DP rows' one-line warnings
    print_machine(
        "Differential privacy at the demo's scale: the epsilon-accuracy curve",
        " ".join(["benchmarks/bench_dp_curve.py", *sys.argv[1:]]),
    )
    seeds = [DEMO_SERIES_SEED] + [s for s in range(args.seeds + 1) if s != DEMO_SERIES_SEED][: args.seeds - 1]
    started = time.perf_counter()
    accs, mbs, sizes = [], [], []
    for k, seed in enumerate(seeds):
        acc, mb, fleet = run_seed(seed, epsilons, only)
        accs.append(acc)
        mbs.append(mb)
        sizes.append((fleet.n_train, fleet.n_test))
        print(f"  [{k + 1}/{len(seeds)} seeds, {time.perf_counter() - started:.0f} s]", file=sys.stderr, flush=True)
    if only == {"xgb", "forest"}:  # what the demo deploys: the better-scoring of the two, if it beats both bars
        for acc in accs:
            for e in epsilons:
                acc[f"{BETTER}, epsilon {e:g}"] = max(
                    acc[f"FedSCS-XGB, private, epsilon {e:g}"], acc[f"FedForest, private, epsilon {e:g}"]
                )
    names = list(accs[0])
    local_key, chance_key = "local-only (each gateway its own forest)", "majority class (chance)"
    local = np.array([a[local_key] for a in accs])
    chance = np.array([a[chance_key] for a in accs])
    rows = []
    for name in names:
        values = np.array([a[name] for a in accs])
        diff = values - local
        beats = int(np.sum((values > local) & (values > chance)))
        mb = [m[name] for m in mbs if name in m]
        rows.append(
            [
                name,
                f"{values.mean():.3f}",
                f"{values.std(ddof=1):.3f}",
                f"{values.min():.3f}",
                f"{diff.mean():+.3f}",
                f"{diff.std(ddof=1):.3f}",
                "-" if name in (local_key, chance_key) else f"{beats}/{len(seeds)}",
                f"{np.mean(mb):.3f}" if mb else "-",
            ]
        )
    print(
        f"seeds (series orders): {', '.join(map(str, seeds))}; training / held-out windows per seed: "
        f"{', '.join(f'{a}/{b}' for a, b in sizes)}\n"
    )
    print(
        markdown_table(
            [
                "row",
                "accuracy mean",
                "sd",
                "min",
                "minus local-only, mean",
                "sd",
                "beats local-only and chance",
                "MB per gateway",
            ],
            rows,
        )
    )
    print()
    print("per seed (accuracy):")
    print(markdown_table(["row", *map(str, seeds)], [[n, *(f"{a[n]:.3f}" for a in accs)] for n in names]))
    print(
        f"\n{time.perf_counter() - started:.0f} s in all; peak resident memory "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
