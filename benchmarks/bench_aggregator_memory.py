"""Peak resident memory of whole simulated trainings, and the bytes each gateway sends.

Each case runs in a fresh subprocess (``--case``), so its peak resident set (``VmHWM`` of
``/proc/self/status``) is its own: the server half, every simulated gateway, the data and the
in-memory broker together, in one process. The fleets:

- ``recordings``: the bundled recordings, one gateway per subject (10 gateways, 204 features,
  7 classes; the training part of each subject's recording);
- ``clients64``: 64 gateways of 320 windows each, drawn (with replacement, seed 0) from the
  bundled recordings' windows.

The model is ``FedSCSXGB(n_rounds=10, max_depth=4, gamma=0.1)`` in its private protocol and in the
histogram protocol at 256 bins (``learning_rate=0.2``), ``FedSCSXGB()`` as it comes (the private
default: 40 rounds of depth 6), and ``FedForest(n_trees=10, max_depth=4)``
(its histogram protocol, secure sums). "data only" is the peak of a process that loads the fleet
and starts its gateways but trains nothing: what the training adds is the difference.

Every simulated gateway keeps a cache of its replies (up to 64 MiB, to answer a repeated
request without recomputing); in one process the caches of all the gateways add up, which the
aggregator never holds. ``--capped-caches`` adds rows with each gateway's cache capped at 1 MiB
(``Simulation(reply_cache_bytes=...)``), closer to what the server half alone needs.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, print_machine

FLEETS = ("recordings", "clients64")
MODELS = ("none", "private", "private-default", "histogram256", "fedforest")
#: The simulated gateways' reply caches in the "capped" rows (each keeps its latest reply).
CAPPED_CACHE_BYTES = 1 << 20


def vm_hwm_mb() -> float:
    """The process's peak resident set so far, in MB (``VmHWM`` of /proc/self/status)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def load_fleet(name: str) -> list:
    """The gateways' training data of fleet ``name`` (see the module docstring)."""
    import bench_seglearn_accuracy as seglearn
    from edge_client.training_data import ClientData
    from firmware_bridge.importers import seglearn_watch

    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-memory-") as tmp:
        subjects, _ = seglearn.load_subjects(Path(tmp), classes)
    splits = [seglearn.subject_tail(s) for s in subjects]
    if name == "recordings":
        return [
            ClientData(f"subject-{i:02d}", s.X[p.train].astype(np.float32), s.y[p.train])
            for i, (s, p) in enumerate(zip(subjects, splits))
        ]
    X = np.vstack([s.X[p.train] for s, p in zip(subjects, splits)]).astype(np.float32)
    y = np.concatenate([s.y[p.train] for s, p in zip(subjects, splits)])
    rng = np.random.default_rng(0)
    picks = [rng.integers(0, len(y), 320) for _ in range(64)]
    return [ClientData(f"client-{i:02d}", X[p], y[p]) for i, p in enumerate(picks)]


def algorithm(model: str):
    from aggregator.algorithms import FedForest, FedSCSXGB

    if model == "private":
        return FedSCSXGB(n_rounds=10, max_depth=4, gamma=0.1)
    if model == "private-default":
        return FedSCSXGB()
    if model == "histogram256":
        return FedSCSXGB(n_rounds=10, max_depth=4, gamma=0.1, learning_rate=0.2, protocol="histogram", n_bins=256)
    if model == "fedforest":
        return FedForest(n_trees=10, max_depth=4)
    raise ValueError(f"unknown model {model!r}")


def run_case(fleet: str, model: str, capped: bool = False) -> dict:
    """One case in this process: peak MB, MB sent per gateway, seconds, windows and features."""
    from aggregator.simulate import Simulation

    logging.disable(logging.WARNING)  # the non-DP protocols' one-line warnings
    clients = load_fleet(fleet)
    sim = Simulation(clients, reply_cache_bytes=CAPPED_CACHE_BYTES if capped else None)
    started = time.perf_counter()
    if model != "none":
        sim.run(algorithm(model))
    return {
        "peak_mb": vm_hwm_mb(),
        "sent_mb": sim.client_bytes() / len(clients) / 1e6,
        "seconds": time.perf_counter() - started,
        "gateways": len(clients),
        "windows": sum(len(c.y) for c in clients),
        "features": clients[0].X.shape[1],
    }


def fresh(fleet: str, model: str, capped: bool) -> dict:
    """:func:`run_case` in a fresh interpreter (its own peak)."""
    out = subprocess.run(
        [sys.executable, __file__, "--case", fleet, model, *(["--capped-caches"] if capped else [])],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"case {fleet}/{model} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--case", nargs=2, metavar=("FLEET", "MODEL"), help="run one case here, print JSON")
    parser.add_argument("--fleets", nargs="+", choices=FLEETS, default=list(FLEETS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument(
        "--capped-caches",
        action="store_true",
        help="also run each training with the gateways' reply caches capped at 1 MiB",
    )
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(*args.case, capped=args.capped_caches)))
        return
    print_machine(
        "Peak resident memory of a simulated training (server, gateways and data in one process)",
        " ".join(["python", "benchmarks/bench_aggregator_memory.py", *sys.argv[1:]]),
    )
    rows = []
    for fleet in args.fleets:
        for model in args.models:
            for capped in (False, True) if args.capped_caches and model != "none" else (False,):
                r = fresh(fleet, model, capped)
                rows.append(
                    [
                        fleet,
                        f"{r['gateways']} x {r['windows'] // r['gateways']} x {r['features']}",
                        "data only" if model == "none" else model,
                        "1 MiB" if capped else "64 MiB",
                        f"{r['peak_mb']:.0f}",
                        f"{r['sent_mb']:.3f}",
                        f"{r['seconds']:.1f}",
                    ]
                )
    print(
        markdown_table(
            [
                "fleet",
                "gateways x windows x features",
                "model",
                "gateway reply cache",
                "peak resident MB",
                "MB sent per gateway",
                "seconds",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
