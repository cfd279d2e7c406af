"""Training over mosquitto with one real ``wheelfed gateway`` process per subject vs the in-memory
simulation: per-round (FedSCS-XGB) and per-level (FedForest) wall time, bytes, and model equality.

    .venv/bin/python benchmarks/bench_fleet_mqtt.py [--quick]

Data: the seglearn watch set through the gateway path (``bench_seglearn_accuracy.load_subjects``),
subject-tail split; each subject's *training* windows are written into its own gateway store
(features + annotations, as the pipeline would have stored them). Ten gateway processes behind a
mosquitto started here; the aggregator runs in this process (``aggregator.fleet.train_on_fleet``).
The same stores feed ``aggregator.simulate`` (``StoreTrainingData``, read exactly as a gateway
reads them), so the two models must be bit-identical: exit status 1 otherwise.

Settings: FedSCS-XGB 10 rounds, depth 4, B = 256 (``--quick``: 3 rounds, B = 64); FedForest
50 trees, depth 8, B = 32, min_samples_leaf 5 (``--quick``: 10 trees, depth 5).
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import bench_seglearn_accuracy as seglearn
from _common import description, markdown_table, median, print_machine


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def write_stores(subjects, out: Path, feature_set: str, classes: list[str]) -> dict[str, Path]:
    from edge_client.store import WindowRecord, WindowStore

    stores = {}
    for i, s in enumerate(subjects):
        split = seglearn.subject_tail(s)
        path = out / f"gw-{i:02d}.db"
        with WindowStore(path) as store:
            for k in split.train.tolist():
                store.add(WindowRecord(s.name, int(s.start_us[k]), int(s.end_us[k]), s.X[k], feature_set))
                store.label_range(s.name, int(s.start_us[k]), int(s.end_us[k]), classes[int(s.y[k])])
        stores[f"gw-{i:02d}"] = path
    return stores


def client_data(stores: dict[str, Path], feature_set: str):
    from edge_client.store import WindowStore
    from edge_client.training_data import ClientData, StoreTrainingData

    out = []
    for client, path in stores.items():
        with WindowStore(path) as store:
            data = StoreTrainingData(store).labelled(feature_set)
        out.append(ClientData(client, data.X, data.y))
    return out


def timed_run(run, label: str):
    steps: list[float] = []
    started = time.perf_counter()
    model, stats = run(lambda p: (steps.append(p.elapsed_s), log(f"  {label} {p.line()}")))
    return model, stats, time.perf_counter() - started, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    from aggregator.algorithms import FedForest, FedSCSXGB
    from aggregator.broker import BrokerUser, MosquittoBroker
    from aggregator.fleet import GatewayProcesses, Presence, train_on_fleet
    from aggregator.jobs import JobSettings
    from aggregator.simulate import Simulation
    from firmware_bridge.importers import seglearn_watch
    from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
    from shared.transport.mqtt import MqttConfig, MqttTransport

    classes = [str(c) for c in seglearn_watch.load_dataset()["y_labels"]]
    print_machine(
        "Training over mosquitto with gateway processes vs simulation",
        "benchmarks/bench_fleet_mqtt.py" + (" --quick" if args.quick else ""),
    )
    xgb = FedSCSXGB(protocol="atoms", n_rounds=3 if args.quick else 10, max_depth=4, n_bins=64 if args.quick else 256)
    forest = FedForest(
        protocol="sketches",
        n_trees=10 if args.quick else 50,
        max_depth=5 if args.quick else 8,
        n_bins=32,
        min_samples_leaf=5,
    )
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-fleet-") as tmp:
        tmp_path = Path(tmp)
        log("importing and extracting the seglearn recordings ...")
        subjects, info = seglearn.load_subjects(tmp_path / "recordings", classes)
        feature_set = str(info["feature_set_version"])
        stores = write_stores(subjects, tmp_path, feature_set, classes)
        clients = client_data(stores, feature_set)
        n_windows = sum(len(c.y) for c in clients)
        from dataclasses import replace

        xgb, forest = (replace(a, feature_set_version=feature_set) for a in (xgb, forest))
        passwords = {"aggregator": secrets.token_hex(8), **{c: secrets.token_hex(8) for c in stores}}
        rows = []
        with MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in passwords.items()]) as broker:
            processes = GatewayProcesses(broker.port, 5, passwords, tmp_path)
            agg = MqttTransport(
                AGGREGATOR_ID,
                MqttConfig(port=broker.port, username="aggregator", password=passwords["aggregator"]),
                presence=False,
            )
            agg.connect()
            presence = Presence(agg, TopicLayout())
            try:
                for client, path in stores.items():
                    processes.start(client, "--store", str(path))
                presence.wait(list(stores), online=True, timeout_s=120)
                log(f"{len(stores)} gateway processes online; {n_windows} training windows")
                for algorithm, unit in ((xgb, "round"), (forest, "level")):
                    sent0, recv0 = agg.stats.sent_bytes, agg.stats.received_bytes
                    mqtt_model, _job, mqtt_total, mqtt_steps = timed_run(
                        lambda progress: train_on_fleet(
                            algorithm,
                            agg,
                            clients=list(stores),
                            seed=0,
                            settings=JobSettings(deadline_s=600),
                            progress=progress,
                        ),
                        f"mqtt {algorithm.name}",
                    )
                    sent, recv = agg.stats.sent_bytes - sent0, agg.stats.received_bytes - recv0
                    sim = Simulation(clients)
                    sim_model, _, sim_total, sim_steps = timed_run(
                        lambda progress: (sim.run(algorithm, seed=0, progress=progress), None),
                        f"simulation {algorithm.name}",
                    )
                    equal = mqtt_model == sim_model
                    if not equal:
                        failures.append(f"{algorithm.name}: the MQTT model differs from the simulation's")
                    rows.append(
                        [
                            algorithm.name,
                            unit,
                            str(len(mqtt_steps)),
                            f"{median(mqtt_steps):.3f}",
                            f"{median(sim_steps):.3f}",
                            f"{median(mqtt_steps) / median(sim_steps):.2f}",
                            f"{mqtt_total:.1f}",
                            f"{sim_total:.1f}",
                            f"{sent / 1e6:.2f}",
                            f"{recv / 1e6:.2f}",
                            "yes" if equal else "NO",
                        ]
                    )
            finally:
                processes.stop_all()
                agg.close()
        print(
            f"\n{len(stores)} gateway processes, {n_windows} training windows x {clients[0].X.shape[1]} features "
            f"({n_windows * clients[0].X.shape[1] * 4 / 1e6:.2f} MB as float32)\n"
        )
        print(
            markdown_table(
                [
                    "algorithm",
                    "step",
                    "steps",
                    "MQTT s/step (median)",
                    "simulation s/step (median)",
                    "MQTT / sim",
                    "MQTT total s",
                    "simulation total s",
                    "aggregator sent MB",
                    "aggregator received MB",
                    "model == simulation",
                ],
                rows,
            )
        )
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
