"""One gateway of ten lying in its training replies: detected and excluded, job stopped, or the accuracy it costs.

    ulimit -v 4000000; nice .venv/bin/python benchmarks/bench_poisoning.py [--seeds 5] [--only xgb|forest|both]

The fleet is the demo's first training (``bench_dp_curve.load_fleet``: the bundled recordings,
one gateway per subject, 10 gateways, each gateway's last 25 % of labelled windows held out;
a seed is a series order, the demo's 7 first). The liar is the gateway with the most training
windows. It lies by overriding only its own client handler (``aggregator.hostile.lie_in_vectors``:
it computes its honest vector, rewrites it, and masks the rewritten one correctly, so secure
aggregation sees nothing wrong) -- except "labels flipped", where its data carry every
window's label shifted to the next class (an in-bound lie by construction), and "garbage
share bundles", where it replaces the sealed share bundles of its masked vectors by random
bytes.

Each row trains through the real in-process simulation (``aggregator.simulate.Simulation``)
with the demo's sizes (FedSCS-XGB 10 rounds, depth 4; FedForest 30 trees, depth 5, 16 bins, at
least 3 windows per leaf) in the private default (differential privacy at the demo's epsilon 32,
secure aggregation) and in the non-DP histogram protocol (FedSCS-XGB on 64 bins), the latter with
secure aggregation and in plain mode. Every participant's noise draws are seeded from the seed,
so a liar's run and the all-honest run of the same seed differ only by the lie (paired).
Outcome per run: *stopped* (the job failed; its one-line reason), *excluded* (the liar was
rejected by name and the job finished without it), or *absorbed*; the accuracy minus the
all-honest run's, mean and worst over seeds, on the honest gateways' held-out windows (the bar:
what one liar does to everybody else's model) and, beside it, pooled over every gateway's
held-out windows including the liar's own (whose labels the liar corrupts for itself alike).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine
from bench_dp_curve import DEMO_SERIES_SEED, Fleet, load_fleet

from aggregator.demo.epsilon import DEMO_EPSILON as EPSILON
from aggregator.demo.epsilon import DEMO_LEARNING_RATE

#: The bar: one gateway in ten may cost the other gateways at most this much accuracy.
BAR = 0.02

Lie = Callable[[np.ndarray, Any], np.ndarray]


# --- where the cells are in each request's vector ------------------------------------------------


def xgb_view(vector: np.ndarray, body: Any) -> tuple[np.ndarray, int, np.ndarray | None]:
    """``(cells, m, count)``: a FedSCS-XGB vector's statistics with G in ``cells[:, :m]``, and
    its count row (None for the private leaves, which carry none)."""
    from shared.protocol.messages.fedscs_xgb import (
        XgbHistogramRequest,
        XgbPrivateLevelRequest,
    )

    m = body.task.node_columns
    if isinstance(body, XgbHistogramRequest):
        n = vector.shape[0] - 2 * body.with_loss
        cells = vector[:n].reshape(body.node_tree.shape[0], body.stats, body.task.n_features, body.slots)
        return cells, m, cells[:, -1]
    if isinstance(body, XgbPrivateLevelRequest):
        cells = vector.reshape(body.node_id.shape[0], body.stats, body.round.features.shape[0], body.round.slots)
        return cells, m, cells[:, -1]
    return vector.reshape(body.leaves.shape[0], 2 * m), m, None


def forest_counts(vector: np.ndarray, body: Any) -> tuple[np.ndarray, int]:
    """``(class counts, units per window)`` of a FedForest vector (a view)."""
    from shared.protocol.messages.fedforest import ForestHistogramRequest

    if isinstance(body, ForestHistogramRequest):
        return vector.reshape(body.features.shape[0], body.slots, body.terms)[..., 1:], 1
    return vector, int(body.noise.scale)


def xgb_scaled(factor: int) -> Lie:
    """G times ``factor`` in the ring's integers (wrapping as the liar's words would)."""

    def lie(vector, body):
        cells, m, _ = xgb_view(vector, body)
        with np.errstate(over="ignore"):
            cells[:, :m] *= factor
        return vector

    return lie


def xgb_counts_minus(n: int) -> Lie:
    def lie(vector, body):
        _, _, count = xgb_view(vector, body)
        if count is not None:
            count -= n * (body.lattice.scale if hasattr(body, "lattice") else 1)
        return vector

    return lie


def xgb_counts_times(factor: int) -> Lie:
    def lie(vector, body):
        _, _, count = xgb_view(vector, body)
        if count is not None:
            with np.errstate(over="ignore"):
                count *= factor
        return vector

    return lie


def xgb_extreme_in_bound(vector, body):
    """Every G cell pushed against its honest sign with the largest magnitude a cell of that
    many windows may hold (``|g| <= bound`` per window, per class ``bound / sqrt(m)`` under the
    private protocol's L2 clip); the leaves' G negated."""
    cells, m, count = xgb_view(vector, body)
    g = cells[:, :m]
    if count is None:
        g *= -1
        return vector
    if hasattr(body, "lattice"):  # count is windows x scale; G is g x scale
        per_window = body.lattice.grad_bound / np.sqrt(m)
        g[:] = -np.sign(g) * np.floor(per_window * count[:, None])
    else:
        per_window = np.floor(body.gradient_bound * (1 << body.frac_bits))
        g[:] = -np.sign(g) * per_window * count[:, None]
    return vector


def forest_negated(vector, body):
    counts, _ = forest_counts(vector, body)
    counts *= -1
    return vector


def forest_minus(n: int) -> Lie:
    def lie(vector, body):
        counts, unit = forest_counts(vector, body)
        counts -= n * unit
        return vector

    return lie


def forest_times(factor: int) -> Lie:
    def lie(vector, body):
        counts, _ = forest_counts(vector, body)
        counts *= factor
        return vector

    return lie


@dataclasses.dataclass(frozen=True)
class Variant:
    """A way to lie: ``lie`` rewrites the liar's vectors (None: ``kind`` says what else)."""

    name: str
    lie: Lie | None = None
    kind: str = "vector"  # "vector", "labels", "garbage_shares"


XGB_VARIANTS = [
    Variant("G x1000", xgb_scaled(1000)),
    Variant("G x -20", xgb_scaled(-20)),
    Variant("count cells -1000", xgb_counts_minus(1000)),
    Variant("G negated (in bound)", xgb_scaled(-1)),
    Variant("G extreme against its sign, per cell", xgb_extreme_in_bound),
    Variant("count cells x100", xgb_counts_times(100)),
    Variant("labels flipped (in bound)", kind="labels"),
    Variant("garbage share bundles", kind="garbage_shares"),
]
FOREST_VARIANTS = [
    Variant("class counts negated", forest_negated),
    Variant("class counts -1000", forest_minus(1000)),
    Variant("class counts x10", forest_times(10)),
    Variant("class counts x2", forest_times(2)),
    Variant("labels flipped (in bound)", kind="labels"),
    Variant("garbage share bundles", kind="garbage_shares"),
]


@dataclasses.dataclass(frozen=True)
class Setting:
    """An algorithm in one protocol: ``make()`` the config, ``requests`` the liar rewrites."""

    name: str
    make: Callable[[list[str]], Any]
    requests: tuple[type, ...]
    secure: bool


def settings(only: set[str]) -> list[tuple[Setting, list[Variant]]]:
    from aggregator.algorithms import FedForest, FedSCSXGB
    from shared.protocol.messages.fedforest import (
        ForestHistogramRequest,
        PrivateForestHistogramRequest,
        PrivateForestLeavesRequest,
    )
    from shared.protocol.messages.fedscs_xgb import (
        XgbHistogramRequest,
        XgbPrivateLeavesRequest,
        XgbPrivateLevelRequest,
    )

    def xgb(**kw):
        return lambda classes: FedSCSXGB(n_rounds=10, max_depth=4, classes=classes, **kw)

    def forest(**kw):
        return lambda classes: FedForest(n_trees=30, max_depth=5, n_bins=16, min_samples_leaf=3, classes=classes, **kw)

    out = []
    if "xgb" in only:
        out += [
            (
                Setting(
                    "FedSCS-XGB private (epsilon 32)",
                    xgb(
                        protocol="private",
                        dp_epsilon=EPSILON,
                        learning_rate=DEMO_LEARNING_RATE,
                        secure_aggregation=True,
                    ),
                    (XgbPrivateLevelRequest, XgbPrivateLeavesRequest),
                    True,
                ),
                XGB_VARIANTS,
            ),
            (
                Setting(
                    "FedSCS-XGB histogram, secure",
                    xgb(protocol="histogram", n_bins=64, secure_aggregation=True),
                    (XgbHistogramRequest,),
                    True,
                ),
                XGB_VARIANTS,
            ),
            (
                Setting(
                    "FedSCS-XGB histogram, plain",
                    xgb(protocol="histogram", n_bins=64, secure_aggregation=False),
                    (XgbHistogramRequest,),
                    False,
                ),
                XGB_VARIANTS,
            ),
        ]
    if "forest" in only:
        out += [
            (
                Setting(
                    "FedForest private (epsilon 32)",
                    forest(dp_epsilon=EPSILON, secure_aggregation=True),
                    (PrivateForestHistogramRequest, PrivateForestLeavesRequest),
                    True,
                ),
                FOREST_VARIANTS,
            ),
            (
                Setting(
                    "FedForest histogram, secure",
                    forest(protocol="histogram", secure_aggregation=True),
                    (ForestHistogramRequest,),
                    True,
                ),
                FOREST_VARIANTS,
            ),
            (
                Setting(
                    "FedForest histogram, plain",
                    forest(protocol="histogram", secure_aggregation=False),
                    (ForestHistogramRequest,),
                    False,
                ),
                FOREST_VARIANTS,
            ),
        ]
    return out


# --- one run -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Outcome:
    accuracy: float | None  # on the honest gateways' held-out windows; None: the job stopped
    pooled: float | None  # on every gateway's held-out windows, the liar's included
    rejected: tuple[str, ...]
    reason: str = ""


def accuracies(fleet: Fleet, model, liar: str) -> tuple[float, float]:
    """(accuracy on the honest gateways' held-out windows, accuracy on every gateway's)."""
    right = {g: (int(np.sum(np.asarray(model.predict(X)) == y)), len(y)) for g, (X, y) in fleet.tests.items() if len(y)}
    honest = [v for g, v in right.items() if g != liar]
    return (
        sum(c for c, _ in honest) / sum(n for _, n in honest),
        sum(c for c, _ in right.values()) / sum(n for _, n in right.values()),
    )


def garbage_shares(sim, liar: str) -> None:
    """The liar's masked vectors go out with random bytes for sealed share bundles."""
    from aggregator.hostile import change_bundles

    change_bundles(sim, liar, lambda n, envelope, shares: {w: os.urandom(len(blob)) for w, blob in shares.items()})


def flipped(fleet: Fleet, liar: str) -> list:
    classes = fleet.classes
    nxt = {c: classes[(i + 1) % len(classes)] for i, c in enumerate(classes)}
    return [
        dataclasses.replace(c, y=np.array([nxt[v] for v in c.y])) if c.client_id == liar else c for c in fleet.clients
    ]


def run(fleet: Fleet, setting: Setting, variant: Variant | None, liar: str, seed: int) -> Outcome:
    from aggregator.hostile import Recorded, lie_in_vectors
    from aggregator.jobs import JobSettings, TrainingError
    from aggregator.simulate import Simulation

    clients = flipped(fleet, liar) if variant is not None and variant.kind == "labels" else fleet.clients
    sim = Simulation(clients, record_bodies=False, reply_cache_bytes=1 << 20)
    for participant in sim.participants.values():
        participant.seed_noise(seed)
    if variant is not None and variant.kind == "vector":
        for request_type in setting.requests:
            lie_in_vectors(sim, liar, request_type, variant.lie)
    elif variant is not None and variant.kind == "garbage_shares":
        garbage_shares(sim, liar)
    recorded = Recorded(setting.make(fleet.classes))
    try:
        model = sim.run(recorded, seed=seed, settings=JobSettings(deadline_s=30.0, min_fraction=0.5))
    except TrainingError as exc:
        rejected = tuple(sorted(recorded.job.rejected)) if recorded.job else ()
        return Outcome(None, None, rejected, str(exc).splitlines()[0])
    finally:
        for transport in sim.transports.values():
            transport.close()
        sim.server.close()
    return Outcome(*accuracies(fleet, model, liar), tuple(sorted(recorded.job.rejected)))


def note(seed: int, setting: str, variant: str, outcome: Outcome, started: float) -> None:
    """One progress line on stderr per run."""
    gc.collect()
    what = (
        f"{outcome.accuracy:.3f} (pooled {outcome.pooled:.3f})"
        if outcome.accuracy is not None
        else f"stopped: {outcome.reason[:100]}"
    )
    print(
        f"    seed {seed} | {setting} | {variant}: {what} rejected={list(outcome.rejected)} "
        f"[{time.perf_counter() - started:.0f} s, {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB]",
        file=sys.stderr,
        flush=True,
    )


def applies(setting: Setting, variant: Variant) -> bool:
    return setting.secure or variant.kind != "garbage_shares"


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--seeds", type=int, default=5, help="split seeds (the demo's 7 first, then 0, 1, ...)")
    parser.add_argument("--only", choices=["xgb", "forest", "both"], default="both")
    args = parser.parse_args()
    only = {"xgb", "forest"} if args.only == "both" else {args.only}
    logging.disable(logging.WARNING)  # the rejections are read from the job's record
    print_machine("Poisoning: one lying gateway of ten", " ".join(["benchmarks/bench_poisoning.py", *sys.argv[1:]]))
    seeds = [DEMO_SERIES_SEED] + [s for s in range(args.seeds + 1) if s != DEMO_SERIES_SEED][: args.seeds - 1]
    plan = settings(only)
    started = time.perf_counter()
    results: dict[tuple[str, str], list[tuple[Outcome, Outcome]]] = {}
    liars = []
    for k, seed in enumerate(seeds):
        fleet = load_fleet(seed)
        liar = max(fleet.clients, key=lambda c: len(c.y)).client_id
        liars.append(liar)
        for setting, variants in plan:
            honest = run(fleet, setting, None, liar, seed)
            note(seed, setting.name, "all honest", honest, started)
            results.setdefault((setting.name, "none (all honest)"), []).append((honest, honest))
            for variant in variants:
                if applies(setting, variant):
                    outcome = run(fleet, setting, variant, liar, seed)
                    note(seed, setting.name, variant.name, outcome, started)
                    results.setdefault((setting.name, variant.name), []).append((outcome, honest))
        print(f"  [{k + 1}/{len(seeds)} seeds, {time.perf_counter() - started:.0f} s]", file=sys.stderr, flush=True)
    rows = []
    for (setting, variant), pairs in results.items():
        stopped = [o for o, _ in pairs if o.accuracy is None]
        named = [o for o, _ in pairs if o.accuracy is not None and o.rejected]
        wrong = sorted({c for o, _ in pairs for c in o.rejected} - set(liars))
        drops = [h.accuracy - o.accuracy for o, h in pairs if o.accuracy is not None and h.accuracy is not None]
        pooled = [h.pooled - o.pooled for o, h in pairs if o.pooled is not None and h.pooled is not None]
        parts = []
        if stopped:
            parts.append(f"stopped {len(stopped)}/{len(pairs)}: {stopped[0].reason[:110]}")
        if named:
            parts.append(f"liar excluded by name {len(named)}/{len(pairs)}")
        absorbed = len(pairs) - len(stopped) - len(named)
        if absorbed and variant != "none (all honest)":
            parts.append(f"absorbed {absorbed}/{len(pairs)}")
        if wrong:
            parts.append(f"honest gateways named: {', '.join(wrong)}")
        honest_acc = [h.accuracy for _, h in pairs if h.accuracy is not None]
        rows.append(
            [
                setting,
                variant,
                "; ".join(parts) or "finished",
                f"{np.mean(honest_acc):.3f}" if honest_acc else "-",
                f"{np.mean(drops) * 100:+.1f}" if drops else "-",
                f"{max(drops) * 100:+.1f}" if drops else "-",
                ("yes" if max(drops) <= BAR else "no") if drops else "-",
                f"{np.mean(pooled) * 100:+.1f}" if pooled else "-",
            ]
        )
    print(
        f"seeds (series orders): {', '.join(map(str, seeds))}; liar (the gateway with the most training "
        f"windows) per seed: {', '.join(liars)}\n"
    )
    print(
        markdown_table(
            [
                "setting",
                "lie",
                "outcome",
                "all-honest accuracy, honest gateways",
                "drop, mean (pp)",
                "drop, worst (pp)",
                f"worst <= {BAR * 100:.0f} pp",
                "drop pooled with the liar's windows, mean (pp)",
            ],
            rows,
        )
    )
    print(
        f"\n{time.perf_counter() - started:.0f} s in all; peak resident memory "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
