"""Accuracy at fleet scale: FedSCS-XGB's private default against the non-private histogram
protocol and the DP-TR anchor (Maddock et al. 2022), over paired seeds.

    ulimit -v 4000000; nice .venv/bin/python benchmarks/bench_dp_accuracy.py [--seeds 10] [--gateways 100]
        [--windows 1000] [--eps 0.5,1,2,4,8] [--start 0] [--cached-only] [--check] [--levers EPSILON]
        [--private-rounds N] [--private-learning-rate X] [--private-plan OPENING,SPLITS,LEAVES]

**Data.** No PyPI package ships a labelled wearable or wheelchair recording set of 100 people x
1,000 windows, so the fleet is generated, per split seed, from the bundled real recordings that
the synthetic chair replays on its wrist IMU (the seglearn watch set, 7 shoulder-rehab
exercises, one session per subject): every session runs through the gateway's own feature path
(``extract_recording``, 204 features per 2 s window), the subjects are split into training and
held-out subjects (a quarter held out), and each of ``--gateways`` training gateways (and a fifth
as many test gateways, from the held-out subjects only) gets ``--windows`` windows: a real window
of a class drawn from the gateway's own class mix (Dirichlet), its features scaled by the
gateway's own per-feature gain and shifted by its own offset (a person and a mounting), plus
per-window jitter, all from the gateway's seed. Every window is checked unique by hashing (the
count is printed). Test accuracy is over the held-out subjects' gateways: other people.

**Rows** (the same fleet per seed; the seed also drives every training's noise draws, through
``Participant.seed_noise``, and its public seed):
the private default ``FedSCSXGB(dp_epsilon=e)`` (delta 1e-6 per window and training), the
non-private ``FedSCSXGB(protocol="histogram")``, the anchor ``DPRandomTrees`` at the same epsilons
(the best of 25 / 100 trees per cell, as the anchor's authors tune the tree count), and the
majority class of the test windows. Paired differences are against the histogram protocol: mean,
sd and a 95 % t interval over seeds.

**A candidate private configuration** (``--private-rounds``, ``--private-learning-rate``,
``--private-plan``): its rows at the same epsilons are added beside the default's, labelled with
what it changes, followed by its paired difference to the default per epsilon and each private
row's accuracy per seed. The simulated trainings' scores are cached in the system's
temporary directory (``wheelfed-bench-dp-accuracy``), keyed by seed, fleet size and the
training's full settings, so a re-run after changing one setting trains only what changed.

**The pooled shortcut.** Running 100 gateways through the simulated secure aggregation for every
cell is slow, so each training runs the real ``aggregator.simulate.Simulation`` over three
*pooled* gateways, each holding a third of the fleet's gateways' windows. This is equal in
distribution to the full fleet: every release is a fleet sum of per-window lattice values
(stochastic rounding is per window) plus Skellam shares whose sum is ``Skellam(mu)`` however many
gateways split it, and the opening's grid and counts are fleet sums too. ``--check`` verifies it:
with the noise shares set to zero and rounding to nearest (no randomness left), a fleet of 12
gateways and the same windows pooled into 3 give the same model (trees equal to 1e-9), for the
private and the histogram protocol.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
ANCHOR_TREES = (25, 100)
TEST_FRACTION = 0.25
GAIN_SD, OFFSET_SD, JITTER_SD = 0.1, 0.2, 0.3  # per gateway (log-gain, offset) and per window, in feature sds
CLASS_MIX_ALPHA = 2.0
POOLS = 3
#: Scores of the simulated trainings, keyed by seed, fleet size and the training's full settings (outside the repo).
CACHE = Path(tempfile.gettempdir()) / "wheelfed-bench-dp-accuracy"


@dataclass(frozen=True)
class Source:
    """The real windows per subject: features, label strings, subject ids."""

    X: np.ndarray
    y: np.ndarray
    subject: np.ndarray


@dataclass(frozen=True)
class Fleet:
    """One seed's generated fleet: training gateways (id, X, y) and the held-out test windows."""

    gateways: list[tuple[str, np.ndarray, np.ndarray]]
    X_test: np.ndarray
    y_test: np.ndarray
    duplicates: int


@dataclass(frozen=True)
class Candidate:
    """A private configuration measured beside the default: the settings it changes (None: the
    default's)."""

    n_rounds: int | None = None
    learning_rate: float | None = None
    release_plan: tuple[float, float, float] | None = None

    def settings(self) -> dict:
        """The keyword arguments of ``FedSCSXGB`` this candidate sets."""
        from aggregator.algorithms.fedscs_xgb_private import ReleasePlan

        out: dict = {}
        if self.n_rounds is not None:
            out["n_rounds"] = self.n_rounds
        if self.learning_rate is not None:
            out["learning_rate"] = self.learning_rate
        if self.release_plan is not None:
            out["release_plan"] = ReleasePlan(*self.release_plan)
        return out

    def label(self) -> str:
        """What the candidate changes, for its table rows (empty: nothing)."""
        parts = []
        if self.n_rounds is not None:
            parts.append(f"{self.n_rounds} rounds")
        if self.learning_rate is not None:
            parts.append(f"learning rate {self.learning_rate:g}")
        if self.release_plan is not None:
            parts.append("plan " + " / ".join(f"{v:g}" for v in self.release_plan))
        return ", ".join(parts)


def private_row(epsilon: float, candidate: Candidate | None = None) -> str:
    """The table row of the private protocol at ``epsilon``: the default's, or ``candidate``'s."""
    if candidate is None:
        return f"FedSCS-XGB, private, epsilon {epsilon:g}"
    return f"FedSCS-XGB, private, {candidate.label()}, epsilon {epsilon:g}"


def load_source() -> Source:
    """Every labelled window of every bundled session, through the gateway's feature path."""
    from edge_client.processing import extract_recording
    from firmware_bridge.importers import seglearn_watch

    Xs, ys, subjects = [], [], []
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-dpacc-") as tmp:
        for i, path in enumerate(seglearn_watch.import_all(Path(tmp), shuffle_seed=7)):
            table, _ = extract_recording(path)
            labelled = np.array([v is not None for v in table.labels])
            Xs.append(table.X[labelled].astype(np.float64))
            ys.append(np.array([str(v) for v in table.labels[labelled]]))
            subjects.append(np.full(int(labelled.sum()), i))
    return Source(np.vstack(Xs), np.concatenate(ys), np.concatenate(subjects))


def _gateway_windows(
    pool_X: np.ndarray, pool_y: np.ndarray, classes: np.ndarray, scale: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` windows of one gateway (module docstring): its class mix, gain, offset and jitter."""
    mix = rng.dirichlet(np.full(classes.size, CLASS_MIX_ALPHA))
    label = rng.choice(classes.size, size=n, p=mix)
    order = np.argsort(pool_y, kind="stable")  # the pool's windows grouped by class (classes are sorted)
    start, size = np.searchsorted(pool_y[order], classes), np.unique(pool_y, return_counts=True)[1]
    rows = order[start[label] + (rng.random(n) * size[label]).astype(np.int64)]
    gain = np.exp(GAIN_SD * rng.standard_normal(scale.size))
    offset = OFFSET_SD * scale * rng.standard_normal(scale.size)
    X = pool_X[rows] * gain + offset + JITTER_SD * scale * rng.standard_normal((n, scale.size))
    return X.astype(np.float32), classes[label]


def make_fleet(source: Source, seed: int, n_gateways: int, n_windows: int) -> Fleet:
    """The fleet of split seed ``seed``: training gateways from three quarters of the subjects,
    test gateways (a fifth as many) from the rest."""
    rng = np.random.default_rng([seed, 0])
    subjects = np.unique(source.subject)
    held = rng.choice(subjects, size=max(1, round(TEST_FRACTION * subjects.size)), replace=False)
    test_rows = np.isin(source.subject, held)
    classes = np.unique(source.y)
    scale = np.maximum(source.X[~test_rows].std(axis=0), 1e-9)
    gateways = []
    for g in range(n_gateways):
        X, y = _gateway_windows(
            source.X[~test_rows], source.y[~test_rows], classes, scale, n_windows, np.random.default_rng([seed, 1, g])
        )
        gateways.append((f"gw-{g:04d}", X, y))
    tests = [
        _gateway_windows(
            source.X[test_rows], source.y[test_rows], classes, scale, n_windows, np.random.default_rng([seed, 2, g])
        )
        for g in range(max(1, n_gateways // 5))
    ]
    X_all = np.vstack([X for _, X, _ in gateways] + [X for X, _ in tests])
    unique = len({hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in X_all})
    return Fleet(
        gateways, np.vstack([X for X, _ in tests]), np.concatenate([y for _, y in tests]), X_all.shape[0] - unique
    )


def pooled(gateways: list[tuple[str, np.ndarray, np.ndarray]], pools: int = POOLS) -> list:
    """The gateways' windows in ``pools`` clients (module docstring: equal in distribution)."""
    from edge_client.training_data import ClientData

    parts = np.array_split(np.arange(len(gateways)), pools)
    return [
        ClientData(
            f"pool-{i}", np.vstack([gateways[j][1] for j in part]), np.concatenate([gateways[j][2] for j in part])
        )
        for i, part in enumerate(parts)
    ]


def macro_f1(y: np.ndarray, pred: np.ndarray, classes: np.ndarray) -> float:
    scores = []
    for c in classes:
        tp = np.sum((pred == c) & (y == c))
        denom = np.sum(pred == c) + np.sum(y == c)
        scores.append(2 * tp / denom if denom else 0.0)
    return float(np.mean(scores))


def run_seed(
    source: Source,
    seed: int,
    args: argparse.Namespace,
    epsilons: tuple[float, ...],
    candidate: Candidate | None = None,
) -> tuple[dict, int] | None:
    """Accuracy and macro-F1 of every row on one seed's fleet, the candidate's private rows
    after the default's (None with ``--cached-only`` when a training of that seed is not in the
    cache)."""
    from aggregator.algorithms import FedSCSXGB
    from aggregator.baselines.dp_random_trees import DPRandomTrees
    from aggregator.simulate import Simulation

    fleet = make_fleet(source, seed, args.gateways, args.windows)
    classes = np.unique(fleet.y_test)
    out = {}

    def score(name: str, pred: np.ndarray) -> None:
        pred = np.asarray(pred).astype(str)
        out[name] = (float(np.mean(pred == fleet.y_test)), macro_f1(fleet.y_test, pred, classes))

    values, counts = np.unique(fleet.y_test, return_counts=True)
    score("majority class", np.full(fleet.y_test.size, values[np.argmax(counts)]))
    clients = pooled(fleet.gateways)
    rows = [("FedSCS-XGB, histogram (no DP)", FedSCSXGB(protocol="histogram"))]
    rows += [(private_row(e), FedSCSXGB(dp_epsilon=e)) for e in epsilons]
    if candidate is not None:
        rows += [(private_row(e, candidate), FedSCSXGB(dp_epsilon=e, **candidate.settings())) for e in epsilons]
    cache_path = CACHE / f"seed{seed}-{args.gateways}x{args.windows}.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    for name, algorithm in rows:
        started = time.perf_counter()
        if repr(algorithm) not in cache:
            if args.cached_only:
                return None
            sim = Simulation(clients)
            for participant in sim.participants.values():  # the noise and rounding draws, from the seed
                participant.seed_noise(seed)
            model = sim.run(algorithm, seed=seed)
            pred = np.asarray(model.predict(fleet.X_test)).astype(str)
            cache[repr(algorithm)] = [float(np.mean(pred == fleet.y_test)), macro_f1(fleet.y_test, pred, classes)]
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache))
        out[name] = tuple(cache[repr(algorithm)])
        print(f"  seed {seed}: {name}: {out[name][0]:.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
    X = np.vstack([X for _, X, _ in fleet.gateways])
    y = np.concatenate([y for _, _, y in fleet.gateways])
    for e in epsilons:
        key = f"best of {ANCHOR_TREES} trees: {DPRandomTrees(epsilon=e)!r}"
        if key not in cache:
            if args.cached_only:
                return None
            best = max(
                (DPRandomTrees(n_trees=t, epsilon=e).fit(X, y, seed=seed) for t in ANCHOR_TREES),
                key=lambda m: float(np.mean(m.predict(fleet.X_test) == fleet.y_test)),
            )
            pred = best.predict(fleet.X_test)
            cache[key] = [float(np.mean(pred == fleet.y_test)), macro_f1(fleet.y_test, pred, classes)]
            cache_path.write_text(json.dumps(cache))
        out[f"DP-TR anchor, epsilon {e:g}"] = tuple(cache[key])
    print(
        f"  seed {seed}: anchors done; {fleet.duplicates} duplicated windows of {len(y) + fleet.y_test.size}",
        flush=True,
    )
    return out, fleet.duplicates


def check() -> None:
    """The pooled shortcut equals the full fleet with every random draw removed (module docstring)."""
    import edge_client.algorithms.fedscs_xgb as client_xgb
    import edge_client.fleet_sums as client_sums
    from aggregator.algorithms import FedSCSXGB
    from aggregator.simulate import Simulation

    def no_noise(shape, mu, shares, rng=None):
        return np.zeros(shape, dtype=np.int64)

    def nearest(values, scale, rng=None):
        return np.floor(np.asarray(values, dtype=np.float64) * scale + 0.5).astype(np.int64)

    client_xgb.skellam_share = client_sums.skellam_share = no_noise
    client_xgb.stochastic_round = nearest
    source = load_source()
    fleet = make_fleet(source, 0, 12, 60)
    for name, algorithm in [
        ("private", FedSCSXGB(n_rounds=4, dp_epsilon=1.0)),
        ("histogram", FedSCSXGB(n_rounds=4, protocol="histogram", n_bins=32)),
    ]:
        from edge_client.training_data import ClientData

        full = Simulation([ClientData(g, X, y) for g, X, y in fleet.gateways]).run(algorithm, seed=3)
        pool = Simulation(pooled(fleet.gateways)).run(algorithm, seed=3)
        assert len(full.trees) == len(pool.trees) > 0
        worst = 0.0
        for a, b in zip(full.trees, pool.trees, strict=True):
            np.testing.assert_array_equal(a.feature, b.feature)
            for field in ("threshold", "value"):
                worst = max(worst, float(np.max(np.abs(getattr(a, field) - getattr(b, field)))))
        assert worst <= 1e-9, worst
        np.testing.assert_array_equal(full.predict(fleet.X_test), pool.predict(fleet.X_test))
        print(f"check {name}: 12 gateways == 3 pooled gateways, {len(full.trees)} trees, largest difference {worst:g}")


def levers(source: Source, args: argparse.Namespace, epsilon: float) -> None:
    """The private protocol with the settings below at one epsilon, over the seeds
    (the gateways' noise seeded as in the table); an epsilon of 1000 leaves almost no noise, so
    the gap that remains to the histogram protocol there is the structure's."""
    from aggregator.algorithms import FedSCSXGB
    from aggregator.algorithms.fedscs_xgb_private import ReleasePlan
    from aggregator.simulate import Simulation

    former = {"n_rounds": 10, "max_depth": 4, "learning_rate": 0.5, "release_plan": ReleasePlan(0.1, 0.5, 0.4)}
    variants = {
        "10 rounds, depth 4, plan 0.1 / 0.5 / 0.4 (the first default)": former,
        "the first default, dp_features 64": {**former, "dp_features": 64},
        "the first default, plan 0.05 / 0.75 / 0.2": {**former, "release_plan": ReleasePlan(0.05, 0.75, 0.2)},
        "20 rounds, depth 6, plan 0.1 / 0.5 / 0.4": {**former, "n_rounds": 20, "max_depth": 6},
        "20 rounds, depth 6, plan 0.05 / 0.75 / 0.2 (the second default)": {"n_rounds": 20, "learning_rate": 0.5},
        "40 rounds, depth 6, learning rate 0.3 (the default)": {},
    }
    fleets = {
        seed: make_fleet(source, seed, args.gateways, args.windows)
        for seed in range(args.start, args.start + args.seeds)
    }
    for name, change in variants.items():
        scores = []
        for seed, fleet in fleets.items():
            sim = Simulation(pooled(fleet.gateways))
            for participant in sim.participants.values():
                participant.seed_noise(seed)
            model = sim.run(FedSCSXGB(dp_epsilon=epsilon, **change), seed=seed)
            scores.append(float(np.mean(np.asarray(model.predict(fleet.X_test)).astype(str) == fleet.y_test)))
        print(f"| {name} | {np.mean(scores):.3f} | {' '.join(f'{a:.3f}' for a in scores)} |", flush=True)


def paired(results: list[dict], name: str, reference: str) -> list[str]:
    """The accuracy difference ``name`` minus ``reference`` over the seeds, in percentage
    points: mean, sd and 95 % t interval, formatted."""
    from scipy.stats import t as t_dist

    diff = np.array([r[name][0] - r[reference][0] for r in results])
    sd = float(diff.std(ddof=1)) if len(results) > 1 else math.nan
    half = float(t_dist.ppf(0.975, len(results) - 1)) * sd / math.sqrt(len(results)) if len(results) > 1 else math.nan
    return [
        f"{100 * diff.mean():+.1f}",
        f"{100 * sd:.1f}",
        f"[{100 * (diff.mean() - half):+.1f}, {100 * (diff.mean() + half):+.1f}]",
    ]


def summarise(results: list[dict], reference: str) -> list[list[str]]:
    """Per row: mean and sd of accuracy, mean macro-F1, and the paired difference to
    ``reference`` in percentage points (mean, sd, 95 % t interval)."""
    rows = []
    for name in results[0]:
        acc = np.array([r[name][0] for r in results])
        f1 = np.array([r[name][1] for r in results])
        sd = f"{acc.std(ddof=1) if len(acc) > 1 else math.nan:.3f}"
        rows.append([name, f"{acc.mean():.3f}", sd, f"{f1.mean():.3f}", *paired(results, name, reference)])
    return rows


def print_candidate(results: list[dict], seeds: list[int], epsilons: tuple[float, ...], candidate: Candidate) -> None:
    """The candidate's paired difference to the default per epsilon, and the private rows'
    accuracy per seed."""
    print(f"\nThe candidate ({candidate.label()}) minus the default, paired per seed:\n")
    print(
        markdown_table(
            ["epsilon", "default", "candidate", "difference (pp, mean)", "sd (pp)", "95 % CI (pp)"],
            [
                [
                    f"{e:g}",
                    f"{np.mean([r[private_row(e)][0] for r in results]):.3f}",
                    f"{np.mean([r[private_row(e, candidate)][0] for r in results]):.3f}",
                    *paired(results, private_row(e, candidate), private_row(e)),
                ]
                for e in epsilons
            ],
        )
    )
    names = ["FedSCS-XGB, histogram (no DP)"] + [private_row(e, c) for c in (None, candidate) for e in epsilons]
    print("\nAccuracy per seed:\n")
    print(
        markdown_table(
            ["row", *(f"seed {s}" for s in seeds)], [[n, *(f"{r[n][0]:.4f}" for r in results)] for n in names]
        )
    )


def parse_candidate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Candidate | None:
    """The candidate of ``--private-*`` (None when no option is given); a bad value exits with one line."""
    plan = None
    if args.private_plan is not None:
        try:
            plan = tuple(float(v) for v in args.private_plan.split(","))
        except ValueError:
            parser.error(f"--private-plan: not three numbers: {args.private_plan!r}")
        if len(plan) != 3 or min(plan) < 0 or abs(sum(plan) - 1.0) > 1e-9:
            parser.error(f"--private-plan: three non-negative shares adding up to 1, not {args.private_plan!r}")
    if args.private_rounds is not None and args.private_rounds < 1:
        parser.error("--private-rounds must be at least 1")
    if args.private_learning_rate is not None and not 0 < args.private_learning_rate <= 1:
        parser.error("--private-learning-rate must be in (0, 1]")
    candidate = Candidate(args.private_rounds, args.private_learning_rate, plan)  # type: ignore[arg-type]
    return candidate if candidate.label() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--start", type=int, default=0, help="first seed (runs over seed ranges share the cache)")
    parser.add_argument("--gateways", type=int, default=100)
    parser.add_argument("--windows", type=int, default=1000)
    parser.add_argument("--eps", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument(
        "--cached-only", action="store_true", help="train nothing: the table over the seeds whose every score is cached"
    )
    parser.add_argument(
        "--levers",
        type=float,
        metavar="EPSILON",
        help="the private protocol's levers at this epsilon (1000: almost no noise), and exit",
    )
    parser.add_argument("--check", action="store_true", help="verify the pooled shortcut and exit")
    parser.add_argument("--private-rounds", type=int, metavar="N", help="a candidate's boosting rounds")
    parser.add_argument("--private-learning-rate", type=float, metavar="X", help="a candidate's learning rate")
    parser.add_argument(
        "--private-plan", metavar="OPENING,SPLITS,LEAVES", help="a candidate's release plan (shares adding up to 1)"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.check:
        check()
        return
    if args.levers:
        levers(load_source(), args, args.levers)
        return
    epsilons = tuple(float(e) for e in args.eps.split(","))
    candidate = parse_candidate(parser, args)
    print_machine(
        "Accuracy at fleet scale: private FedSCS-XGB vs histogram vs DP-TR",
        "ulimit -v 4000000; nice .venv/bin/python benchmarks/bench_dp_accuracy.py " + " ".join(sys.argv[1:]),
    )
    source = load_source()
    print(
        f"source: {source.X.shape[0]} real windows x {source.X.shape[1]} features, "
        f"{np.unique(source.subject).size} subjects; fleet: {args.gateways} gateways x {args.windows} windows\n"
    )
    results, seeds, duplicates = [], [], 0
    started = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        done = run_seed(source, seed, args, epsilons, candidate)
        if done is None:
            print(f"seed {seed}: not all cached, left out", flush=True)
            continue
        result, dup = done
        results.append(result)
        seeds.append(seed)
        duplicates += dup
        print(f"seed {seed} done ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\nduplicated windows over all seeds: {duplicates}\n")
    if not results:
        print("no seed has every score cached: nothing to tabulate")
        return
    reference = "FedSCS-XGB, histogram (no DP)"
    print(
        markdown_table(
            ["row", "accuracy (mean)", "sd", "macro-F1", "vs histogram (pp, mean)", "sd (pp)", "95 % CI (pp)"],
            summarise(results, reference),
        )
    )
    if candidate is not None:
        print_candidate(results, seeds, epsilons, candidate)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{len(results)} seeds, {time.perf_counter() - started:.0f} s, peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
