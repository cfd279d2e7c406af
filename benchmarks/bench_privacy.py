"""Privacy: what the private protocols and secure aggregation cost, and what they stop.

    .venv/bin/python benchmarks/bench_privacy.py [--quick] [--seeds N] [--hist-seeds N] [--jobs N]

Nothing is downloaded: the seglearn watch set ships with the seglearn package and the tabular sets
with scikit-learn. Data (helpers imported, nothing copied):

* **seglearn**: ``bench_seglearn_accuracy.load_subjects`` (``import_all`` -> ``extract_recording``
  -> labelled 4 s windows, 204 features), one gateway per subject (10). Split = the subject tail
  (``tail_split``: first 80 % of a subject's labelled windows train, one window gap, the rest
  test) over a *seeded order of the subject's exercise series*: seed 0 keeps the dataset's order
  (exactly ``subject_tail``, the split of ``bench_fedscs_xgb.py``); seed s > 0 permutes each
  subject's 14 series with ``default_rng([s, subject])`` before taking the tail, so every seed
  holds out other exercises. Test windows never overlap a train window (checked).
  A gateway's raw sensor bytes: every IMU sample of the subject's recording (all its series,
  50 Hz) x 6 channels x 4 bytes (float32), counted from the dataset.
* **tabular**: ``bench_fedforest_tabular``'s breast_cancer and wine with its stratified 30 % test
  split and Dirichlet label-skew partition over 20 clients (``--alpha``, default 1; same rng as
  that benchmark, so seed s is its seed s). Raw bytes of a gateway: its train rows x d x 4
  (float32) -- there are no sensor samples behind these rows.

Algorithms and modes (every flag passed explicitly; the library's defaults are the private ones):

* FedSCS-XGB ``n_rounds=10, max_depth=4, learning_rate=0.2, gamma=0.1, reg_lambda=1, n_bins=256``:
  ``atoms`` (the paper's: protocol="atoms"), ``histogram`` (protocol="histogram",
  secure_aggregation=False), ``secure`` (protocol="histogram", secure_aggregation=True: the
  private default); ``min_crowd`` 5 (default).
* FedForest ``n_trees=50, max_depth=8, n_bins=32, min_samples_leaf=5``, sqrt(d) features:
  ``sketches`` (the paper's), ``histogram``, ``secure``.

Sections:

1. Per dataset, algorithm and mode: test accuracy (and balanced accuracy) mean +- sd over the
   seeds; the paired difference to the paper's mode (mean +- sd of the per-seed differences, over
   the seeds both ran); bytes each gateway sent per training (sum of the encoded sizes of the
   messages the server received from it -- the server view -- mean over gateways and seeds)
   against its raw bytes; rounds = distinct (job, round) in the server view; wall time of
   ``Simulation.run`` (median). Runs go to ``--jobs`` worker processes (default 2), so wall
   times include the other worker's load. The histogram and secure models must be identical
   (sums mod 2^64 of the same integers): checked on every seed both ran. Memory: one plain
   histogram run on seglearn in a fresh process (resident memory per round, the gateways'
   dispatcher reply caches), and the reply caches at the end of every run.
2. Rank error alpha (``shared.sketches.rank_error``, count weights) of the B = 256 bin edges: the
   histogram protocols' edges as the server sent them (captured at a gateway in a one-round plain
   histogram job on the same clients), next to ``grid_edges`` on the pooled train rows with
   ``include_min_point`` False and True (which one the federated edges equal is printed; every
   split threshold of the seed-0 histogram-mode models must be one of them), vs the atom
   protocol's summary edges (``merge_edges_columns`` over each client's ``summarize_columns``,
   M = 256 as the first privacy review measured it, and the M the clients really send,
   ``summary_points(256, n_k)`` = min(256, n_k // 2)), on seglearn, the tabular train sets and an
   outlier-heavy synthetic feature (1e5 rows, 99 % N(0,1), 1 % exactly 1e6, 10 clients).
3. Label recovery on the server view (seed 0, the tests' argmin-G attack from
   ``tests/aggregator/test_privacy_attacks.py``): atoms -- per window, argmin over classes of its
   atom's G (``atom_label_recovery``); histogram modes -- per level-0 reply (one per round and
   gateway), argmin over classes of the root nodes' G (feature 0's slots summed), guessed for all
   of the sender's windows (the tests' ``histogram_label_recovery`` for K classes). Next to it:
   the fleet's majority-class share, each gateway's own majority share (the best any per-gateway
   guess can do), 1/K, and ``raw_values_seen`` (distinct raw feature values among the floats the
   server received).
4. Secure aggregation alone (``SecAggClient`` / ``SecAggServer`` in one process, no messaging):
   10, 100, 1,000 gateways (default SecAgg+ degree and threshold), one aggregation of a vector
   of L = 7 nodes x 3 x 204 features x 66 slots = 282,744 uint64 entries (one FedSCS-XGB level at
   B = 64; at B = 256 it is 4x longer), 10 % of the gateways dropping out after being selected
   (their masked vectors never arrive): key setup, per-gateway masking, unmask reply, server
   unmask request + aggregate, bytes per gateway (masked vector + sealed share bundles + unmask
   reply, payload bytes before the codec), vs ``ring_sum`` (numpy adds) of the same number of
   uint64 vectors. The result is checked against the plain sum of the survivors' vectors.

``--hist-seeds N`` runs the two FedSCS-XGB histogram modes on seglearn on fewer seeds (the slowest
runs: 20-40 s and ~11 GB resident each at B = 256; they run one at a time in their own worker, the
rest in the others). ``--quick``: 2 seeds, 1 histogram-mode seglearn seed, 3 boosting rounds, 10 trees, secure
aggregation at L = 28,274 (1,000 gateways at L = 2,827). Exit status 1 if a check fails or a run
raised (the traceback is printed; the cell is left out).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_fedforest_tabular as tabular
import bench_seglearn_accuracy as seglearn
import numpy as np
from _common import REPO_ROOT, description, markdown_table, print_machine

sys.path.insert(0, str(REPO_ROOT / "tests" / "aggregator"))
import test_privacy_attacks as attacks  # noqa: E402  (the tests' attacks, imported, not copied)

T0 = time.perf_counter()
B_XGB = 256
B_FOREST = 32
MODES = {
    "FedSCS-XGB": (
        ("atoms", {"protocol": "atoms", "secure_aggregation": False}),
        ("histogram", {"protocol": "histogram", "secure_aggregation": False}),
        ("secure", {"protocol": "histogram", "secure_aggregation": True}),
    ),
    "FedForest": (
        ("sketches", {"protocol": "sketches", "secure_aggregation": False}),
        ("histogram", {"protocol": "histogram", "secure_aggregation": False}),
        ("secure", {"protocol": "histogram", "secure_aggregation": True}),
    ),
}
PAPER = {"FedSCS-XGB": "atoms", "FedForest": "sketches"}
TABULAR = ("breast_cancer", "wine")


def log(message: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f} s] {message}", file=sys.stderr, flush=True)


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def pm(values, digits: int = 4) -> str:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return "-"
    if a.size == 1:
        return f"{a[0]:.{digits}f}"
    return f"{a.mean():.{digits}f} ± {a.std(ddof=1):.{digits}f}"


# --- data ----------------------------------------------------------------------------------------
@dataclasses.dataclass
class Fleet:
    """One (dataset, seed): the gateways' train data, the pooled test set, raw bytes per gateway."""

    dataset: str
    seed: int
    clients: list  # ClientData
    Xte: np.ndarray
    yte: np.ndarray
    raw_bytes: np.ndarray  # per gateway
    n_classes: int
    overlaps: int = 0


SUBJECTS: list = []  # seglearn subjects, set in the main process and in every worker
RAW_IMU: np.ndarray = np.zeros(0)


def _init_worker(subjects: list, raw_imu: np.ndarray) -> None:
    global SUBJECTS, RAW_IMU
    SUBJECTS, RAW_IMU = subjects, raw_imu


def seeded_tail(s, seed: int, subject_index: int):
    """The subject tail over a seeded order of the subject's series (seed 0: the dataset's order)."""
    if seed == 0:
        return seglearn.subject_tail(s)
    order = np.random.default_rng([seed, subject_index]).permutation(np.unique(s.series))
    idx = np.concatenate([np.flatnonzero(s.series == k) for k in order])
    a, b = seglearn.tail_split(idx.size)
    return seglearn.Split(np.sort(idx[a]), np.sort(idx[b]))


def seglearn_fleet(seed: int) -> Fleet:
    from edge_client.training_data import ClientData

    splits = [seeded_tail(s, seed, i) for i, s in enumerate(SUBJECTS)]
    clients = [
        ClientData(f"subject-{i:02d}", s.X[p.train].astype(np.float32), s.y[p.train])
        for i, (s, p) in enumerate(zip(SUBJECTS, splits))
    ]
    Xte = np.vstack([s.X[p.test] for s, p in zip(SUBJECTS, splits)]).astype(np.float32)
    yte = np.concatenate([s.y[p.test] for s, p in zip(SUBJECTS, splits)])
    overlaps = sum(seglearn.overlapping_pairs(s, p) for s, p in zip(SUBJECTS, splits))
    n_classes = int(max(s.y.max() for s in SUBJECTS)) + 1
    return Fleet("seglearn", seed, clients, Xte, yte, RAW_IMU.copy(), n_classes, overlaps)


def tabular_fleet(dataset: str, seed: int, alpha: float) -> Fleet:
    from _fedforest_common import Block, client_data

    X, y, regression = tabular.load(dataset)
    rng = np.random.default_rng([tabular.DATASETS.index(dataset), seed, int(alpha * 10)])  # as run_cell
    train, test = tabular.test_split(y, regression, rng)
    Xtr, ytr = X[train], y[train]
    parts = tabular.dirichlet_partition(tabular.strata(ytr, regression), alpha, rng)
    blocks = [Block(f"client-{k:02d}", Xtr[p], ytr[p], X[test][:0], y[test][:0]) for k, p in enumerate(parts)]
    raw = np.array([p.size * X.shape[1] * 4 for p in parts], dtype=np.float64)
    return Fleet(dataset, seed, client_data(blocks), X[test], y[test], raw, int(np.unique(y).size))


def fleet_for(dataset: str, seed: int, alpha: float) -> Fleet:
    return seglearn_fleet(seed) if dataset == "seglearn" else tabular_fleet(dataset, seed, alpha)


# --- one training run ----------------------------------------------------------------------------
class Recorder:
    """The server view, light: every received message's (client, type, job, round, size), and its
    decoded body only where ``keep(type, body)`` says so (the histogram replies of a B = 256
    FedSCS-XGB run are ~50 MB per gateway and round; the attacks need only the level-0 ones)."""

    def __init__(self, sim, keep) -> None:
        self.entries: list = []
        self.errors: list[str] = []
        sim.engine.audit.keep_bodies = False
        original = sim.server.audit

        def record(topic, message, size) -> None:
            original(topic, message, size)
            try:
                from aggregator.audit import Received

                env = message.envelope
                body = message.body if keep(env.type, message.body) else None
                self.entries.append(Received(env.sender, topic, env.type, env.job, env.round, size, body))
            except Exception:  # the transport swallows audit errors: keep them for the report
                self.errors.append(traceback.format_exc())

        sim.server.audit = record

    def view(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for entry in self.entries:
            out.setdefault(entry.client, []).append(entry)
        return out


def level0_reply(body, n_classes: int, d: int) -> bool:
    """A FedSCS-XGB histogram reply of a round's first level: K root nodes x 3 x d x S + 2 loss cells
    (deeper levels have no loss cells, so their length is never 2 more than a multiple of 3d)."""
    n = body.sums.values.size
    return n > 2 and (n - 2) % (n_classes * 3 * d) == 0


def histogram_recovery(view: dict, clients: list, n_classes: int, d: int) -> float:
    """The tests' ``histogram_label_recovery`` for K classes: per level-0 reply, decode as if plain,
    G of root node k = its G entries of feature 0 summed over the slots; guess argmin_k G for all
    of the sender's windows; mean over replies of the share guessed right."""
    scores = []
    for client in clients:
        for r in view.get(client.client_id, []):
            if r.type != "fedscs_xgb.histogram_reply" or r.body is None:
                continue
            vector = r.body.sums.values.view(np.int64)
            if not level0_reply(r.body, n_classes, d):
                continue
            S = (vector.size - 2) // (n_classes * 3 * d)
            G = vector[: n_classes * 3 * d * S].reshape(n_classes, 3, d, S)[:, 0, 0, :].sum(axis=1)
            scores.append(float(np.mean(client.y == int(np.argmin(G)))))
    return float(np.mean(scores)) if scores else float("nan")


def reset_peak_rss() -> None:
    """Reset this process's peak RSS (Linux: ``5`` to /proc/self/clear_refs), so VmHWM is the run's."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def proc_status(field: str) -> float:
    """``VmHWM`` (peak RSS since the last reset) or ``VmRSS`` of this process in bytes, NaN if unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("nan")


def reply_cache_bytes(sim) -> int:
    """Encoded replies the gateways' dispatchers still hold for resending (all gateways)."""
    return sum(
        len(p)
        for participant in sim.participants.values()
        for payloads in getattr(participant.dispatcher, "_replies", {}).values()
        for p in payloads
    )


def memory_probe(rounds: int) -> dict:
    """A plain FedSCS-XGB histogram run on seglearn seed 0 in a fresh process: resident memory
    after each boosting round, its peak, and the reply caches the gateways hold at the end."""
    from aggregator.algorithms import FedSCSXGB
    from aggregator.simulate import Simulation

    fleet = seglearn_fleet(0)
    sim = Simulation(fleet.clients)
    sim.engine.audit.keep_bodies = False
    reset_peak_rss()
    before = proc_status("VmRSS")
    after_round: list[float] = []
    sim.run(
        FedSCSXGB(
            n_rounds=rounds,
            max_depth=4,
            learning_rate=0.2,
            gamma=0.1,
            reg_lambda=1.0,
            n_bins=B_XGB,
            protocol="histogram",
            secure_aggregation=False,
        ),
        progress=lambda p: after_round.append(proc_status("VmRSS") - before),
    )
    return {
        "rounds": rounds,
        "after_round": after_round,
        "peak": proc_status("VmHWM") - before,
        "cache": reply_cache_bytes(sim),
        "gateways": len(fleet.clients),
        "remember": sim.participants[fleet.clients[0].client_id].dispatcher.remember,
        "remember_bytes": getattr(sim.participants[fleet.clients[0].client_id].dispatcher, "remember_bytes", None),
    }


def make_algorithm(name: str, mode: dict, quick: bool):
    from aggregator.algorithms import FedForest, FedSCSXGB

    if name == "FedSCS-XGB":
        return FedSCSXGB(
            n_rounds=3 if quick else 10, max_depth=4, learning_rate=0.2, gamma=0.1, reg_lambda=1.0, n_bins=B_XGB, **mode
        )
    return FedForest(
        n_trees=10 if quick else 50,
        max_depth=8,
        n_bins=B_FOREST,
        min_samples_leaf=5,
        max_features="auto",
        task="classification",
        **mode,
    )


def run_task(dataset: str, seed: int, algorithm: str, mode_name: str, alpha: float, quick: bool, attack: bool) -> dict:
    import gc

    out = {"dataset": dataset, "seed": seed, "algorithm": algorithm, "mode": mode_name, "error": None}
    try:
        out.update(_run(dataset, seed, algorithm, mode_name, alpha, quick, attack))
    except Exception:
        out["error"] = traceback.format_exc()
    gc.collect()  # the simulation's objects hold GBs (reply caches): free them before the next run
    return out


def _run(dataset: str, seed: int, algorithm: str, mode_name: str, alpha: float, quick: bool, attack: bool) -> dict:
    from aggregator.simulate import Simulation
    from shared.protocol.messages.fedscs_xgb import XgbAtomRequest

    fleet = fleet_for(dataset, seed, alpha)
    mode = dict(MODES[algorithm])[mode_name]
    algo = make_algorithm(algorithm, mode, quick)
    d = fleet.clients[0].X.shape[1]
    K = fleet.n_classes

    def keep(kind: str, body) -> bool:
        if not attack:
            return False
        if kind.endswith("histogram_reply"):  # uint64 vectors only: no float a raw value could hide in
            return kind == "fedscs_xgb.histogram_reply" and level0_reply(body, K, d)
        return True

    sim = Simulation(fleet.clients)
    recorder = Recorder(sim, keep)
    edges: dict[str, list] = {}
    if attack and mode_name == "atoms":  # the edges each gateway was sent (the server knows them; only for scoring)
        for cid, participant in sim.participants.items():
            handler = participant.dispatcher._handlers[XgbAtomRequest]

            def keep_edges(message, cid=cid, handler=handler):
                edges.setdefault(cid, message.body.edges())
                return handler(message)

            participant.dispatcher._handlers[XgbAtomRequest] = keep_edges
    t0 = time.perf_counter()
    model = sim.run(algo, seed=seed, job_id=f"{dataset}-{seed}-{algorithm}-{mode_name}")
    seconds = time.perf_counter() - t0
    pred = np.asarray(model.predict(fleet.Xte)).astype(str)
    truth = fleet.yte.astype(str)
    acc = float(np.mean(pred == truth))
    bal = tabular.score(fleet.yte, np.asarray(model.predict(fleet.Xte)), False)
    view = recorder.view()
    per_gateway = np.array([sum(r.size for r in view.get(c.client_id, [])) for c in fleet.clients], dtype=np.float64)
    result = {
        "acc": acc,
        "bal": bal,
        "seconds": seconds,
        "pred": pred,
        "bytes": per_gateway,
        "raw": fleet.raw_bytes,
        "client_bytes": sim.client_bytes(),
        "rounds": len({(r.job, r.round) for entries in view.values() for r in entries}),
        "reply_cache": reply_cache_bytes(sim),
        "n_clients": len(fleet.clients),
        "n_classes": K,
        "overlaps": fleet.overlaps,
        "audit_errors": recorder.errors,
        "train_classes": int(np.unique(np.concatenate([c.y for c in fleet.clients])).size),
    }
    if attack:
        if mode_name == "atoms":
            result["recovery"] = attacks.atom_label_recovery(view, fleet.clients, edges)
        elif algorithm == "FedSCS-XGB":
            result["recovery"] = histogram_recovery(view, fleet.clients, K, d)
        result["raw_seen"] = attacks.raw_values_seen(view, fleet.clients)
        y = np.concatenate([c.y for c in fleet.clients])
        result["majority"] = attacks.majority_share(fleet.clients) if y.min() >= 0 else float("nan")
        result["own_majority"] = float(sum(np.bincount(c.y).max() for c in fleet.clients) / y.size)
        if mode_name == "histogram":  # the model's thresholds, to check they are grid edges
            result["splits"] = [
                (int(f), float(t))
                for tree in model.trees
                for f, t in zip(tree.feature[tree.left >= 0], tree.threshold[tree.left >= 0])
            ]
    return result


# --- section 2: rank error -----------------------------------------------------------------------
def protocol_edges(clients: list, B: int) -> list[np.ndarray]:
    """The histogram protocol's bin edges as the server sends them: a one-round, depth-1 plain
    FedSCS-XGB histogram job, its first level request captured at one gateway."""
    from aggregator.algorithms import FedSCSXGB
    from aggregator.simulate import Simulation
    from shared.protocol.messages.fedscs_xgb import XgbHistogramRequest

    sim = Simulation(clients)
    participant = sim.participants[clients[0].client_id]
    handler = participant.dispatcher._handlers[XgbHistogramRequest]
    captured: list = []

    def keep(message):
        if not captured:
            captured.append([np.array(e, dtype=np.float32) for e in message.body.edges()])
        return handler(message)

    participant.dispatcher._handlers[XgbHistogramRequest] = keep
    sim.run(FedSCSXGB(n_rounds=1, max_depth=1, n_bins=B, protocol="histogram", secure_aggregation=False))
    return captured[0]


def same_edges(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32)) for x, y in zip(a, b)
    )


def rank_error_rows(sets: list[tuple[str, list]], B: int) -> tuple[list[list[str]], dict, list[str]]:
    """``sets``: (name, per-client ClientData). Rows for the table, the protocol's edges per set (for
    the threshold check) and which pooled ``grid_edges`` call they equal."""
    from edge_client.algorithms.fedscs_xgb import summary_points
    from shared.sketches import grid_edges, merge_edges_columns, rank_error, summarize_columns

    rows, protocol, equal = [], {}, []
    for name, clients in sets:
        parts = [np.asarray(c.X, dtype=np.float32) for c in clients]
        X = np.vstack(parts)
        d = X.shape[1]
        varying = np.flatnonzero(X.min(axis=0) < X.max(axis=0))
        log(f"rank error: {name} ({X.shape[0]:,} x {d})")
        t0 = time.perf_counter()
        sent = protocol_edges(clients, B)
        sent_s = time.perf_counter() - t0
        protocol[name] = sent
        grid = grid_edges(X, B)
        grid_min = grid_edges(X, B, include_min_point=True)
        match = [
            flag
            for flag, e in (("include_min_point=False", grid), ("include_min_point=True", grid_min))
            if same_edges(sent, e)
        ]
        equal.append(f"{name}: {' and '.join(match) if match else 'NEITHER'}")
        Ms = [summary_points(B, p.shape[0]) for p in parts]
        variants = [
            ("histogram protocols: grid edges as the server sent them", sent),
            ("grid_edges(pooled), include_min_point=False", grid),
            ("grid_edges(pooled), include_min_point=True", grid_min),
            (
                f"atoms: summary, M={B} (as the first privacy review measured it)",
                merge_edges_columns([summarize_columns(p, None, B) for p in parts], B),
            ),
        ]
        if min(Ms) < B:  # what the clients really send: M capped at n_k // 2
            Mtext = f"{min(Ms)}" + (f"..{max(Ms)}" if max(Ms) > min(Ms) else "")
            variants.append(
                (
                    f"atoms: summary, M=min({B}, n_k//2) = {Mtext} (as the clients send it)",
                    merge_edges_columns([summarize_columns(p, None, m) for p, m in zip(parts, Ms)], B),
                )
            )
        for label, edges in variants:
            alphas = np.array([rank_error(edges[j], X[:, j], None, B) for j in varying])
            rows.append(
                [
                    name,
                    f"{X.shape[0]:,} x {d} ({varying.size} varying)",
                    f"{len(parts)}",
                    label,
                    f"{alphas.max():.5f}",
                    f"{np.median(alphas):.5f}",
                    f"{alphas.max() * B:.2f}",
                    f"{int((alphas > 1 / B + 1e-12).sum())}",
                    "yes" if alphas.max() <= 1 / B + 1e-12 else "no",
                    f"{np.mean([edges[j].size for j in varying]):.0f}",
                ]
            )
        log(f"rank error: {name} done (protocol run {sent_s:.1f} s)")
    return rows, protocol, equal


def hessian_row(name: str, clients: list, n_classes: int, B: int) -> list[str]:
    """Today's atom-protocol round-1 edges with the Hessian weights the clients use (bench_fedscs_xgb's
    number 0.0022 at B = 256), for reference against the count-weighted rows."""
    import bench_fedscs_xgb
    from shared.sketches import merge_edges_columns, rank_error, summarize_columns

    weights = bench_fedscs_xgb.round1_weights(clients, n_classes)
    X = np.vstack([c.X for c in clients]).astype(np.float32)
    w = np.concatenate(weights)
    varying = np.flatnonzero(X.min(axis=0) < X.max(axis=0))
    edges = merge_edges_columns([summarize_columns(c.X, wc, B) for c, wc in zip(clients, weights)], B)
    alphas = np.array([rank_error(edges[j], X[:, j], w, B) for j in varying])
    return [
        name,
        f"{X.shape[0]:,} x {X.shape[1]} ({varying.size} varying)",
        f"{len(clients)}",
        f"summary, M={B}, round-1 Hessian weights and ranks (bench_fedscs_xgb's table 2)",
        f"{alphas.max():.5f}",
        f"{np.median(alphas):.5f}",
        f"{alphas.max() * B:.2f}",
        f"{int((alphas > 1 / B + 1e-12).sum())}",
        "yes" if alphas.max() <= 1 / B + 1e-12 else "no",
        f"{np.mean([edges[j].size for j in varying]):.0f}",
    ]


# --- section 4: secure aggregation at scale ------------------------------------------------------
def secagg_cost(n: int, length: int, drop_fraction: float, seed: int = 0) -> dict:
    from shared.secure_aggregation import SHARE_BYTES, SecAggClient, SecAggConfig, SecAggServer, ring_sum

    ids = [f"gw-{i:04d}" for i in range(n)]
    job = f"bench-privacy-{n}".encode()
    t0 = time.perf_counter()
    clients = {c: SecAggClient(c) for c in ids}
    server = SecAggServer(SecAggConfig(), ids, job)
    server.set_public_keys({c: cl.public_keys() for c, cl in clients.items()})
    confirmations = {c: clients[c].join(server.roster_for(c), server.neighbours[c], server.threshold, job) for c in ids}
    routed = server.route(confirmations)
    for c in ids:
        clients[c].confirm_keys(routed.get(c, {}))
    setup = time.perf_counter() - t0
    setup_bytes = 64 + np.mean([sum(len(b) for b in confirmations[c].values()) for c in ids])

    rng = np.random.default_rng(seed)
    dropped = set(rng.choice(ids, size=int(round(drop_fraction * n)), replace=False).tolist())
    label = b"level-1"
    masked, mask_s, plain_total = {}, [], np.zeros(length, dtype=np.uint64)
    for c in ids:
        if c in dropped:  # selected, but its masked vector never arrives
            continue
        vector = rng.integers(0, 1 << 40, length, dtype=np.uint64)
        np.add(plain_total, vector, out=plain_total)
        t1 = time.perf_counter()
        masked[c] = clients[c].mask(label, vector, server.participants(c, ids))
        mask_s.append(time.perf_counter() - t1)
    t1 = time.perf_counter()
    requests = server.unmask_request(label, masked, ids)
    request_s = time.perf_counter() - t1
    replies, unmask_s = {}, []
    for c, r in requests.items():
        t1 = time.perf_counter()
        replies[c] = clients[c].unmask(label, r.survivors, r.dropped, r.shares)
        unmask_s.append(time.perf_counter() - t1)
    t1 = time.perf_counter()
    total = server.aggregate(label, masked, replies, length)
    aggregate_s = time.perf_counter() - t1
    vectors = [m.masked for m in masked.values()]
    plain_s = []
    for _ in range(3):
        t1 = time.perf_counter()
        ring_sum(vectors)
        plain_s.append(time.perf_counter() - t1)
    plain = min(plain_s)

    def reply_bytes(reply) -> int:
        n_self = sum(len(k) + SHARE_BYTES for k in reply.self_mask)
        n_pair = sum(len(o) + sum(len(p) + SHARE_BYTES for p in by_peer) for o, by_peer in reply.pair_seeds.items())
        return n_self + n_pair

    bundle_bytes = np.mean([sum(len(b) for b in m.shares.values()) for m in masked.values()])
    unmask_bytes = np.mean([reply_bytes(r) for r in replies.values()])
    return {
        "n": n,
        "dropped": len(dropped),
        "degree": server.degree,
        "threshold": server.threshold,
        "length": length,
        "setup_s": setup,
        "setup_bytes": setup_bytes,
        "mask_s": float(np.mean(mask_s)),
        "unmask_s": float(np.mean(unmask_s)),
        "server_s": request_s + aggregate_s,
        "plain_s": plain,
        "vector_bytes": 8 * length,
        "bundle_bytes": float(bundle_bytes),
        "unmask_bytes": float(unmask_bytes),
        "total_s": setup + float(np.sum(mask_s)) + float(np.sum(unmask_s)) + request_s + aggregate_s,
        "correct": bool(np.array_equal(total, plain_total)),
    }


# --- main ----------------------------------------------------------------------------------------
def raw_imu_bytes() -> np.ndarray:
    """Per subject (sorted, as ``import_all`` orders the recordings): samples x 6 channels x 4 bytes."""
    from firmware_bridge.importers import seglearn_watch

    data = seglearn_watch.load_dataset()
    subjects = np.asarray(data["subject"])
    return np.array(
        [
            sum(
                np.asarray(data["X"][i]).shape[0] * np.asarray(data["X"][i]).shape[1] * 4
                for i in np.flatnonzero(subjects == s)
            )
            for s in sorted({int(v) for v in subjects})
        ],
        dtype=np.float64,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="a fast smoke: 2 seeds, small sizes")
    parser.add_argument("--seeds", type=int, help="split seeds 0..N-1 (default 10; --quick 2)")
    parser.add_argument(
        "--hist-seeds",
        type=int,
        help="seeds of the two FedSCS-XGB histogram modes on seglearn (default: all; --quick 1): "
        "the slowest runs, 20-40 s and ~11 GB each at B=256",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--alpha", type=float, default=1.0, help="Dirichlet alpha of the tabular partitions")
    args = parser.parse_args()
    n_seeds = max(1, args.seeds or (2 if args.quick else 10))
    hist_seeds = min(n_seeds, max(1, args.hist_seeds or (1 if args.quick else n_seeds)))

    import sklearn

    from firmware_bridge.importers import seglearn_watch

    command = shlex.join([".venv/bin/python", "benchmarks/bench_privacy.py", *sys.argv[1:]])
    print_machine(
        "Privacy: protocols, secure aggregation, attacks",
        command,
        {
            "scikit-learn": sklearn.__version__,
            "parallelism": f"{args.jobs} worker processes for the training runs (section 1-3); "
            "sections 2 and 4 in the main process, alone",
        },
    )
    failures: list[str] = []

    log("loading the seglearn recordings ...")
    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-privacy-") as tmp:
        subjects, info = seglearn.load_subjects(Path(tmp), classes)
    raw_imu = raw_imu_bytes()
    if len(subjects) != 10 or raw_imu.size != 10 or info["n_features"] != 204:
        failures.append(
            f"seglearn: {len(subjects)} subjects, {raw_imu.size} raw sample counts, "
            f"{info['n_features']} features (expected 10, 10, 204)"
        )
    _init_worker(subjects, raw_imu)
    log(f"loaded {len(subjects)} subjects in {time.perf_counter() - T0:.1f} s")

    n_rounds = 3 if args.quick else 10
    n_trees = 10 if args.quick else 50
    print(
        f"- seglearn: {len(subjects)} gateways (one per subject), {info['labelled']:,} labelled windows x "
        f"{info['n_features']} features, 7 classes; raw IMU per gateway {fmt_bytes(raw_imu.min())}-"
        f"{fmt_bytes(raw_imu.max())} (samples x 6 channels x 4 B; {raw_imu.sum() / 24:,.0f} samples = "
        f"{raw_imu.sum() / 24 / 50 / 60:.0f} min at 50 Hz in all)"
    )
    print(f"- tabular: {', '.join(TABULAR)}, 20 Dirichlet clients, alpha = {args.alpha:g}, 30 % stratified test")
    print(
        f"- FedSCS-XGB(n_rounds={n_rounds}, max_depth=4, learning_rate=0.2, gamma=0.1, reg_lambda=1, "
        f"n_bins={B_XGB}, min_crowd=5); FedForest(n_trees={n_trees}, max_depth=8, n_bins={B_FOREST}, "
        "min_samples_leaf=5, sqrt(d) features, min_crowd=5)"
    )
    print(
        f"- seeds 0..{n_seeds - 1}"
        + (
            f"; FedSCS-XGB histogram and secure on seglearn: seeds 0..{hist_seeds - 1} "
            "only (REDUCED, see the text under table 1)"
            if hist_seeds < n_seeds
            else ""
        )
    )
    print()

    # -- section 2 first (main process, before the workers load the machine) --------------------
    seg0 = seglearn_fleet(0)
    tab0 = {ds: tabular_fleet(ds, 0, args.alpha) for ds in TABULAR}
    rng = np.random.default_rng(12345)
    n_synth = 100_000
    synth = np.where(rng.random(n_synth) < 0.01, 1e6, rng.normal(size=n_synth))[:, None]
    from edge_client.training_data import ClientData

    synth_y = rng.integers(0, 2, n_synth)
    synthetic = [
        ClientData(f"synth-{k}", x, yk)
        for k, (x, yk) in enumerate(zip(np.array_split(synth, 10), np.array_split(synth_y, 10)))
    ]
    sets = [("seglearn (seed-0 train)", seg0.clients)]
    sets += [(f"{ds} (seed-0 train)", tab0[ds].clients) for ds in TABULAR]
    sets.append(("synthetic: 99 % N(0,1), 1 % = 1e6", synthetic))
    rank_rows, protocol, equal = rank_error_rows(sets, B_XGB)
    rank_rows.append(hessian_row("seglearn (seed-0 train)", seg0.clients, seg0.n_classes, B_XGB))

    # -- sections 1 and 3: the training runs ------------------------------------------------------
    tasks = []
    for dataset in ("seglearn", *TABULAR):
        for algorithm, modes in MODES.items():
            for mode_name, _ in modes:
                seeds = n_seeds
                if dataset == "seglearn" and algorithm == "FedSCS-XGB" and mode_name != "atoms":
                    seeds = hist_seeds
                for seed in range(seeds):
                    tasks.append((dataset, seed, algorithm, mode_name, args.alpha, args.quick, seed == 0))

    def big(task) -> bool:  # ~80 s and ~11 GB peak each (see the memory note): one at a time
        dataset, _, algorithm, mode = task[:4]
        return dataset == "seglearn" and algorithm == "FedSCS-XGB" and mode != "atoms"

    def cost(task) -> float:  # rough seconds per run, to start the longest first
        return 80 if big(task) else 11 if task[0] == "seglearn" else 7 if task[3] == "secure" else 2

    tasks.sort(key=lambda t: -cost(t))
    groups = [[t for t in tasks if big(t)], [t for t in tasks if not big(t)]] if args.jobs >= 2 else [tasks]
    log(f"{len(tasks)} training runs on {args.jobs} workers ({len(groups[0])} large ones one at a time) ...")
    results = []
    started = time.perf_counter()
    pools = [
        ProcessPoolExecutor(
            max_workers=1 if len(groups) > 1 and g is groups[0] else max(1, args.jobs - 1),
            initializer=_init_worker,
            initargs=(subjects, raw_imu),
        )
        for g in groups
    ]
    try:
        futures = [pool.submit(run_task, *t) for pool, g in zip(pools, groups) for t in g]
        for i, future in enumerate(as_completed(futures), 1):
            r = future.result()
            results.append(r)
            what = f"{r['dataset']} {r['algorithm']} {r['mode']} seed {r['seed']}"
            if r["error"]:
                log(f"[{i}/{len(tasks)}] {what}: FAILED\n{r['error']}")
            else:
                log(
                    f"[{i}/{len(tasks)}] {what}: acc {r['acc']:.4f}, {r['seconds']:.1f} s, "
                    f"{fmt_bytes(r['bytes'].mean())} per gateway, {r['rounds']} rounds, "
                    f"reply caches {fmt_bytes(r['reply_cache'])}"
                )
    finally:
        for pool in pools:
            pool.shutdown()
    train_wall = time.perf_counter() - started
    probe_rounds = 1 if args.quick else 3
    log(f"memory probe: FedSCS-XGB histogram on seglearn, {probe_rounds} rounds, fresh process ...")
    with ProcessPoolExecutor(max_workers=1, initializer=_init_worker, initargs=(subjects, raw_imu)) as pool:
        probe = pool.submit(memory_probe, probe_rounds).result()

    errors = [r for r in results if r["error"]]
    for r in errors:
        failures.append(f"{r['dataset']} {r['algorithm']} {r['mode']} seed {r['seed']} raised (traceback below)")
    ok = [r for r in results if not r["error"]]
    for r in ok:
        if r["overlaps"]:
            failures.append(f"{r['dataset']} seed {r['seed']}: {r['overlaps']} test windows overlap a train window")
        if r["audit_errors"]:
            failures.append(
                f"{r['dataset']} {r['algorithm']} {r['mode']} seed {r['seed']}: recorder error {r['audit_errors'][0]}"
            )

    def cell(dataset, algorithm, mode):
        return {r["seed"]: r for r in ok if (r["dataset"], r["algorithm"], r["mode"]) == (dataset, algorithm, mode)}

    # secure == histogram, seed by seed
    same_models = {}
    for dataset in ("seglearn", *TABULAR):
        for algorithm in MODES:
            h, s = cell(dataset, algorithm, "histogram"), cell(dataset, algorithm, "secure")
            common = sorted(set(h) & set(s))
            same = [np.array_equal(h[k]["pred"], s[k]["pred"]) for k in common]
            same_models[(dataset, algorithm)] = (sum(same), len(common))
            if not all(same):
                failures.append(
                    f"{dataset} {algorithm}: secure and histogram predictions differ on "
                    f"{len(common) - sum(same)} of {len(common)} seeds"
                )

    # -- table 1 ----------------------------------------------------------------------------------
    print("### 1. Accuracy, bytes, rounds, time per algorithm and mode\n")
    for dataset in ("seglearn", *TABULAR):
        rows = []
        for algorithm, modes in MODES.items():
            paper = cell(dataset, algorithm, PAPER[algorithm])
            for mode_name, _ in modes:
                runs = cell(dataset, algorithm, mode_name)
                if not runs:
                    rows.append([algorithm, mode_name, "0", "failed", "", "", "", "", "", "", "", ""])
                    continue
                seeds = sorted(runs)
                common = [k for k in seeds if k in paper]
                diff = [100 * (runs[k]["acc"] - paper[k]["acc"]) for k in common]
                per_gateway = np.mean([runs[k]["bytes"] for k in seeds], axis=0)  # (gateways,)
                raw = runs[seeds[0]]["raw"]
                ratio = per_gateway / raw
                rows.append(
                    [
                        algorithm,
                        mode_name,
                        f"{len(seeds)}",
                        pm([runs[k]["acc"] for k in seeds]),
                        "(paper's)"
                        if mode_name == PAPER[algorithm]
                        else (
                            f"{np.mean(diff):+.2f} ± {np.std(diff, ddof=1):.2f}"
                            if len(diff) > 1
                            else f"{diff[0]:+.2f}"
                            if diff
                            else "-"
                        )
                        + f" (n={len(diff)})",
                        pm([runs[k]["bal"] for k in seeds]),
                        fmt_bytes(per_gateway.mean()),
                        fmt_bytes(raw.mean()),
                        f"{ratio.mean():.3g}x ({ratio.min():.3g}-{ratio.max():.3g})",
                        f"{np.median([runs[k]['rounds'] for k in seeds]):.0f}",
                        f"{np.median([runs[k]['seconds'] for k in seeds]):.1f}",
                    ]
                )
        n_test = ok and next((r["pred"].size for r in ok if r["dataset"] == dataset and r["seed"] == 0), 0)
        print(f"{dataset}" + (f" (seed-0 test set: {n_test} windows/rows)" if n_test else "") + ":\n")
        print(
            markdown_table(
                [
                    "algorithm",
                    "mode",
                    "seeds",
                    "accuracy",
                    "Δ acc vs paper's mode (pp, paired)",
                    "balanced acc.",
                    "sent per gateway per training",
                    "raw per gateway",
                    "sent / raw (mean, min-max over gateways)",
                    "rounds",
                    "wall s (median)",
                ],
                rows,
            )
        )
        print()
    view_vs_sent = [r["bytes"].sum() / r["client_bytes"] for r in ok if r["client_bytes"]]
    same_text = "; ".join(f"{d} {a}: {s}/{n}" for (d, a), (s, n) in same_models.items())
    print(
        "Accuracy on the pooled test set of all gateways; Δ = mode - paper's mode per seed, mean ± sd over the "
        "seeds both ran. 'sent': encoded sizes of every message the server received from the gateway "
        "(replies, presence, secure-aggregation keys and shares), summed over the training. 'raw': seglearn = "
        "the subject's whole IMU recording (samples x 6 channels x 4 B); tabular = the client's train rows x d x 4 B. "
        "'rounds' = distinct (job, round) pairs in the server view. Wall time of Simulation.run with "
        f"{args.jobs} runs in parallel on {os.cpu_count()} cores. Secure-mode predictions identical to the plain "
        f"histogram mode's (seeds both ran): {same_text}. Server-view bytes / the clients' transport sent bytes: "
        f"{min(view_vs_sent):.4f}-{max(view_vs_sent):.4f} over the runs."
        + (
            f" FedSCS-XGB histogram and secure on seglearn ran on seeds 0..{hist_seeds - 1} only (--hist-seeds: "
            f"the slowest runs, ~50 MB per gateway and round at B = 256); their Δ is paired over those seeds."
            if hist_seeds < n_seeds
            else ""
        )
    )
    print()

    caches = {
        (d, a, m): max(r["reply_cache"] for r in ok if (r["dataset"], r["algorithm"], r["mode"]) == (d, a, m))
        for d, a, m in {(r["dataset"], r["algorithm"], r["mode"]) for r in ok}
    }
    worst = max(caches, key=caches.get) if caches else None
    print(
        f"Memory (one plain FedSCS-XGB histogram run on seglearn, seed 0, B = {B_XGB}, in a fresh process): resident "
        "memory above the start after each boosting round "
        + ", ".join(fmt_bytes(v) for v in probe["after_round"])
        + f", peak {fmt_bytes(probe['peak'])}; the "
        f"{probe['gateways']} gateways' dispatchers then hold {fmt_bytes(probe['cache'])} of encoded replies "
        f"for resending (each Dispatcher keeps at most {probe['remember']} replies"
        + (f" and {fmt_bytes(probe['remember_bytes'])}" if probe["remember_bytes"] else "")
        + "). Largest reply caches at the end of "
        + (
            f"a run: {worst[0]} {worst[1]} {worst[2]}, {fmt_bytes(caches[worst])} over all gateways."
            if worst
            else "a run: -"
        )
    )
    print()

    # -- table 2 ----------------------------------------------------------------------------------
    from shared.sketches import grid_edges

    checks = []
    for algorithm, B in (("FedSCS-XGB", B_XGB), ("FedForest", B_FOREST)):
        r = cell("seglearn", algorithm, "histogram").get(0)
        if not r or "splits" not in r:
            checks.append(f"{algorithm}: not checked (no seed-0 histogram run)")
            continue
        if B == B_XGB:
            grid, against = protocol["seglearn (seed-0 train)"], "the edges the server sent"
        else:  # the private opening is shared: FedForest's edges are the same grid at its B
            flag = "include_min_point=True" in equal[0]
            grid = grid_edges(np.vstack([c.X for c in seg0.clients]).astype(np.float32), B, include_min_point=flag)
            against = f"grid_edges(pooled, {B}, include_min_point={flag})"
        edge_sets = [set(e.astype(np.float32).tolist()) for e in grid]
        missing = sum(1 for f, t in r["splits"] if float(np.float32(t)) not in edge_sets[f])
        if missing:
            failures.append(
                f"seglearn {algorithm} histogram seed 0: {missing} of {len(r['splits'])} thresholds "
                f"are not among {against}"
            )
        checks.append(f"{algorithm}: {len(r['splits']) - missing} of {len(r['splits'])} among {against}")
    threshold_check = ", ".join(checks)
    print(f"### 2. Rank error alpha of the B = {B_XGB} bin edges (count weights)\n")
    print(
        markdown_table(
            [
                "data",
                "pooled rows x features",
                "clients",
                "edges",
                "max alpha",
                "median alpha",
                "max alpha x B",
                "features with alpha > 1/B",
                "max alpha <= 1/B",
                "edges (mean)",
            ],
            rank_rows,
        )
    )
    print()
    print(
        f"alpha = rank_error(edges, x, None, {B_XGB}) per feature (count weights, as the histogram protocols read "
        f"their edges; 1/B = {1 / B_XGB:.5f}), max and median over the features that are not constant. The first "
        "row of each set is the edges the server actually sent in a plain histogram job on those clients "
        "(captured at a gateway); they equal the pooled oracle " + "; ".join(equal) + ". Summary M: 256 as "
        "the first privacy review measured it, and min(256, n_k // 2) as the clients send it (edge_client's "
        "summary_points: at "
        "most half a client's rows). The last row repeats bench_fedscs_xgb's round-1 measurement "
        "(Hessian-weighted summaries and ranks, M = 256). Seed-0 histogram-mode models on seglearn, split "
        f"thresholds that are bin edges: {threshold_check}."
    )
    print()

    # -- table 3 ----------------------------------------------------------------------------------
    rows = []
    for dataset in ("seglearn", *TABULAR):
        for algorithm, modes in MODES.items():
            for mode_name, _ in modes:
                r = cell(dataset, algorithm, mode_name).get(0)
                if r is None:
                    rows.append([dataset, algorithm, mode_name, "failed", "", "", "", ""])
                    continue
                rec = r.get("recovery")
                K = r["n_classes"]
                rows.append(
                    [
                        dataset,
                        algorithm,
                        mode_name,
                        "-" if rec is None else f"{100 * rec:.1f} %",
                        f"{100 * r['majority']:.1f} %",
                        f"{100 * r['own_majority']:.1f} %",
                        f"{100 / K:.1f} %",
                        f"{r['raw_seen']:,}",
                    ]
                )
    print("### 3. Label recovery (argmin-G attack) and raw values on the server view, seed 0\n")
    print(
        markdown_table(
            [
                "data",
                "algorithm",
                "mode",
                "labels recovered",
                "fleet majority share",
                "gateways' own majority share",
                "1/K",
                "raw feature values seen",
            ],
            rows,
        )
    )
    print()
    print(
        "'labels recovered': share of the train windows whose label the attack guesses (atoms: per window from "
        "its atom; histogram modes: one guess per gateway and level-0 reply, averaged over the replies). "
        "FedForest rows: no label attack is defined for them here (its sketch replies carry per-client label "
        "summaries; see raw values). 'own majority': the share a per-gateway constant guess of the gateway's own "
        "most common label reaches -- the most a per-gateway leak can give. 'raw feature values seen': distinct "
        "raw feature values of the gateways among all floats the server decoded from them "
        "(test_privacy_attacks.raw_values_seen)."
    )
    print()

    # -- section 4 --------------------------------------------------------------------------------
    if args.quick:
        sizes = [(10, 28_274), (100, 28_274), (1000, 2_827)]
    else:
        sizes = [(10, 282_744), (100, 282_744), (1000, 282_744)]
    secagg = []
    for n, length in sizes:
        log(f"secure aggregation: {n} gateways, L = {length:,} ...")
        s = secagg_cost(n, length, 0.1)
        log(f"secure aggregation: {n} gateways done in {s['total_s']:.1f} s")
        secagg.append(s)
        if not s["correct"]:
            failures.append(f"secure aggregation with {n} gateways: the unmasked sum differs from the plain sum")
    rows = []
    for s in secagg:
        per_gateway = s["vector_bytes"] + s["bundle_bytes"] + s["unmask_bytes"]
        rows.append(
            [
                f"{s['n']:,}",
                f"{s['dropped']}",
                f"{s['degree']} / {s['threshold']}",
                f"{s['length']:,}",
                f"{1e3 * s['setup_s'] / s['n']:.2f}",
                f"{1e3 * s['mask_s']:.1f}",
                f"{1e9 * s['mask_s'] / s['length']:.1f}",
                f"{1e3 * s['unmask_s']:.2f}",
                f"{s['server_s']:.3f}",
                f"{s['plain_s']:.4f}",
                f"{s['server_s'] / s['plain_s']:.0f}x",
                f"{(s['total_s'] - s['setup_s']) / s['plain_s']:.0f}x",
                f"{fmt_bytes(s['vector_bytes'])} + {fmt_bytes(s['bundle_bytes'])} + {fmt_bytes(s['unmask_bytes'])}",
                f"{per_gateway / s['vector_bytes']:.4f}",
                f"{s['total_s']:.1f}",
                "yes" if s["correct"] else "NO",
            ]
        )
    print("### 4. Secure aggregation alone: one aggregation, 10 % dropped mid-round (pure protocol classes)\n")
    print(
        markdown_table(
            [
                "gateways",
                "dropped",
                "degree / threshold",
                "L (uint64)",
                "key setup per gateway (ms)",
                "mask per gateway (ms)",
                "mask ns per entry",
                "unmask reply per gateway (ms)",
                "server: unmask request + aggregate (s)",
                "plain numpy sum (s)",
                "server / plain",
                "all secure work / plain",
                "bytes per gateway: vector + bundles + reply",
                "/ plain vector",
                "total wall (s)",
                "sum correct",
            ],
            rows,
        )
    )
    print()
    print(
        "One process, serial: 'total wall' = key setup (once per job) + every survivor's masking + every unmask "
        "reply + the server's work. 'plain numpy sum': ring_sum of the same number of uint64 vectors (fastest of "
        "3); 'all secure work / plain' excludes the key setup. Dropped gateways never deliver their masked "
        "vector: the server rebuilds the survivors' pair seeds with them from shares. Bytes are payloads before "
        "the codec (masked vector 8 L, sealed share bundles to the neighbours taking part, the unmask reply's "
        f"shares); key setup adds {fmt_bytes(secagg[-1]['setup_bytes'])} per gateway once per job at "
        f"{secagg[-1]['n']:,} gateways (public keys + sealed confirmations)."
    )
    print()

    print(
        f"Training runs: {len(results)} in {train_wall:.0f} s with {args.jobs} workers; load average at the end "
        f"{'/'.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} cores."
    )
    print()
    print("correctness: " + ("all checks passed" if not failures else "FAILED"))
    for failure in failures:
        print(f"  - {failure}")
    for r in errors:
        print(f"\n{r['dataset']} {r['algorithm']} {r['mode']} seed {r['seed']}:\n{r['error']}")
    log(f"done in {time.perf_counter() - T0:.0f} s")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
