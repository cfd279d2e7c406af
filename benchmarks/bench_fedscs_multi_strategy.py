"""FedSCS-XGB's two multiclass strategies on the wire: bytes per boosting round, private protocol.

``multi_strategy="one_output_per_tree"`` (xgboost's default) grows one tree per class per round, so
every depth level asks each gateway for the histograms of every class's nodes: per node, feature
and bin (G, H, count). ``"multi_output_tree"`` (the paper's Alg. 1) grows one tree whose nodes
carry every class's (G, H) and one count: per round ``K`` structures become one, and ``3 K``
statistics per node and bin become ``2 K + 1`` -- ARCHITECTURE §5b lists it as a lever on the
bytes of the masked histograms.

Data: the bundled seglearn watch recordings through the gateway path (one client per subject,
subject-tail split as in ``bench_fedscs_xgb.py``). Model: ``FedSCSXGB(protocol="histogram")``
(secure aggregation, minimum crowd 5, 256 bins) with ``max_depth=4``,
``learning_rate=0.2``, ``gamma=0.1``, ``n_rounds`` (default 10), each strategy once, in-memory
simulation (``aggregator.simulate.Simulation``). Bytes are the encoded MQTT payloads: the
clients' replies (``Simulation.client_bytes()``) and the server's requests (``server.stats``),
the job's opening (fleet sums, grid counts for the edges) reported apart from the boosting
rounds. Accuracy and macro-F1 on the pooled test windows are printed for orientation only: one
split, one seed -- no accuracy claim rests on them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_seglearn_accuracy as seglearn
import numpy as np
from _common import description, markdown_table, print_machine


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--rounds", type=int, default=10, help="boosting rounds (default 10)")
    args = parser.parse_args()

    from sklearn.metrics import f1_score

    from aggregator.algorithms import FedSCSXGB
    from aggregator.simulate import Simulation
    from edge_client.training_data import ClientData
    from firmware_bridge.importers import seglearn_watch

    command = " ".join(["python", "benchmarks/bench_fedscs_multi_strategy.py", *sys.argv[1:]])
    print_machine("FedSCS-XGB multiclass strategies: bytes per boosting round (private protocol)", command)
    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-multi-") as tmp:
        subjects, info = seglearn.load_subjects(Path(tmp), classes)
    splits = [seglearn.subject_tail(s) for s in subjects]
    clients = [
        ClientData(f"subject-{i:02d}", s.X[p.train].astype(np.float32), s.y[p.train])
        for i, (s, p) in enumerate(zip(subjects, splits))
    ]
    Xte = np.vstack([s.X[p.test] for s, p in zip(subjects, splits)]).astype(np.float32)
    yte = np.concatenate([s.y[p.test] for s, p in zip(subjects, splits)])
    print(
        f"- data: {len(clients)} clients, {sum(c.X.shape[0] for c in clients):,} train windows x "
        f"{clients[0].X.shape[1]} features, {len(classes)} classes\n"
    )

    rows = []
    for strategy in ("one_output_per_tree", "multi_output_tree"):
        sim = Simulation(clients)
        sent: list[tuple[int, int]] = []
        sim_start = time.perf_counter()
        config = FedSCSXGB(
            n_rounds=args.rounds,
            max_depth=4,
            learning_rate=0.2,
            gamma=0.1,
            multi_strategy=strategy,
            protocol="histogram",
        )
        model = sim.run(config, progress=lambda p: sent.append((sim.client_bytes(), sim.server.stats.sent_bytes)))
        seconds = time.perf_counter() - sim_start
        rounds_client = (sent[-1][0] - sent[0][0]) / max(len(sent) - 1, 1)
        rounds_server = (sent[-1][1] - sent[0][1]) / max(len(sent) - 1, 1)
        predicted = model.predict(Xte)
        rows.append(
            [
                strategy,
                str(model.n_trees),
                str(sum(t.n_nodes for t in model.trees)),
                f"{rounds_client / len(clients) / 1e6:.2f}",
                f"{rounds_server / len(clients) / 1e6:.2f}",
                f"{sim.client_bytes() / len(clients) / 1e6:.1f}",
                f"{seconds:.0f}",
                f"{(predicted == yte).mean():.4f}",
                f"{f1_score(yte, predicted, average='macro'):.4f}",
            ]
        )
    print(
        markdown_table(
            [
                "multi_strategy",
                "trees",
                "nodes",
                "MB/round/gateway up (rounds 2..)",
                "MB/round/gateway down",
                "MB/gateway up, whole job",
                "s",
                "accuracy",
                "macro-F1",
            ],
            rows,
        )
    )
    print("\nPer-round bytes are the mean over rounds 2..n (round 1 also carries the job's opening).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
