"""End-to-end live-recognition latency on the gateway: from a window's last sample to its stored
prediction, on a real recording replayed through a pty into the gateway (serial framing, pipeline,
features, store, model), per engine.

    .venv/bin/python benchmarks/bench_live_latency.py [--speed S]

A seglearn subject is replayed at ``--speed`` (default 20x real time) into an in-process
``edge_client.gateway.Gateway`` (no broker) whose model directory holds a signed bundle; the
gateway loads it at start like after a reboot. Models: FedSCS-XGB 10 rounds x 7 classes depth 4
and FedForest 50 trees depth 8, trained in simulation on that subject's labelled windows. The
latency recorded per prediction (``PredictionRecord.latency_ms``) starts when the window's last
sample has arrived and ends when the prediction is computed (features + window insert + model),
before the prediction row is written. Goal: median < 5 ms here. Exit status 1 if a window was
not predicted or the live predictions differ from offline ones.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import numpy as np
from _common import description, markdown_table, median, percentile, print_machine


def main() -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--speed", type=float, default=20.0)
    args = parser.parse_args()
    import aggregator
    from aggregator.algorithms import FedForest, FedSCSXGB
    from edge_client.gateway import Gateway, GatewayConfig
    from edge_client.processing import extract_recording
    from edge_client.store import WindowStore
    from edge_client.training_data import ClientData
    from firmware_bridge.importers import seglearn_watch
    from firmware_bridge.recording import Recording
    from firmware_bridge.replay import open_pty, replay
    from shared.model import model_inputs
    from shared.model.bundle import ModelBundle
    from shared.model.tflite import tflite_available
    from shared.signing import SigningKey

    print_machine(
        "Live recognition latency: window complete -> prediction (replayed recording)",
        f"benchmarks/bench_live_latency.py --speed {args.speed:g}",
    )
    failures: list[str] = []
    rows = []
    with tempfile.TemporaryDirectory(prefix="wheelfed-bench-live-") as tmp:
        tmp_path = Path(tmp)
        path = seglearn_watch.import_all(tmp_path / "rec")[0]
        recording = Recording.load(path)
        table, _ = extract_recording(path)
        labelled = np.array([y is not None for y in table.labels])
        X, y = table.X[labelled], np.array([str(v) for v in table.labels[labelled]])
        clients = [ClientData("a", X[::2], y[::2]), ClientData("b", X[1::2], y[1::2])]
        fsv = table.feature_set_version
        models = {
            "FedSCS-XGB 10 rounds x 7 classes, depth 4": aggregator.simulate(
                FedSCSXGB(protocol="atoms", n_rounds=10, max_depth=4, feature_set_version=fsv), clients
            ),
            "FedForest 50 trees, depth 8": aggregator.simulate(
                FedForest(protocol="sketches", n_trees=50, max_depth=8, min_samples_leaf=2, feature_set_version=fsv),
                clients,
            ),
        }
        key = SigningKey.generate()
        key.verify_key.save(tmp_path / "agg.pub")
        engines = ["numpy"] + (["tflite"] if tflite_available() else [])
        for name, model in models.items():
            for engine in engines:
                run = tmp_path / f"{len(rows)}"
                (run / "models").mkdir(parents=True)
                (run / "models" / "active.bundle").write_bytes(
                    ModelBundle.create(model, model_id="bench", version=1, signing_key=key).to_bytes()
                )
                master, slave = open_pty()
                gateway = Gateway(
                    GatewayConfig(
                        client_id="gw-1",
                        store_path=run / "gw.db",
                        serial_port=slave,
                        session_id="replay",
                        model_dir=run / "models",
                        trusted_keys=(tmp_path / "agg.pub",),
                        engine=engine,
                    )
                )
                assert gateway.models.current is not None, gateway.models.last_error
                runner = threading.Thread(target=gateway.run, daemon=True)
                runner.start()
                started = time.perf_counter()
                replay(recording, master, speed=args.speed, wait_for_reader_s=20)
                time.sleep(1.0)
                gateway.stop()
                runner.join(30)
                wall = time.perf_counter() - started
                with WindowStore(run / "gw.db") as store:
                    live = store.predictions("replay")
                    windows = store.query(fsv, labelled_only=False)
                latencies = [p.latency_ms for p in live]
                if len(live) < len(table.X) - 2:
                    failures.append(f"{name}/{engine}: {len(live)} predictions for {len(table.X)} windows")
                index = {int(e): i for i, e in enumerate(windows.meta.end_us)}
                rows_idx = np.array([index[p.end_us] for p in live])
                offline = model.predict_proba(model_inputs(model, windows.X[rows_idx].astype(np.float32)))
                diff = float(np.abs(np.array([p.probabilities for p in live]) - offline).max())
                if diff > 1e-6:
                    failures.append(f"{name}/{engine}: live probabilities differ from offline by {diff:.2e}")
                rows.append(
                    [
                        name,
                        engine,
                        str(len(live)),
                        f"{median(latencies):.2f}",
                        f"{percentile(latencies, 99):.2f}",
                        f"{max(latencies):.2f}",
                        f"{diff:.1e}",
                        f"{wall:.1f}",
                        "yes" if median(latencies) < 5.0 else "no",
                    ]
                )
                print(f"{name} / {engine}: median {median(latencies):.2f} ms", file=sys.stderr, flush=True)
    print(
        f"\nRecording: {recording.metadata.session_id}, {len(table.X)} windows of 4 s (hop 2 s), "
        f"{X.shape[1]} features; replay speed {args.speed:g}x\n"
    )
    print(
        markdown_table(
            [
                "model",
                "engine",
                "predictions",
                "median ms",
                "p99 ms",
                "max ms",
                "max |live - offline|",
                "replay wall s",
                "median < 5 ms",
            ],
            rows,
        )
    )
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
