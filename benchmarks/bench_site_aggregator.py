"""Bytes into the cloud per round, flat fleet vs site aggregators, over real mosquitto.

Six in-process gateways (``tests.aggregator.test_site_aggregator.fleet_data``: 3 classes, 20
features, 300-365 windows each), FedSCS-XGB and FedForest in their private defaults (secure
aggregation on), layouts: flat; 3 sites of 2; 2 sites of 3; 1 site of 6. The count is every
payload the cloud aggregator's connection received during the job (``stats.received_bytes``:
replies, site messages, relayed presence), divided by the job's rounds; the models are checked
equal to the flat fleet's.

    .venv/bin/python benchmarks/bench_site_aggregator.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aggregator.algorithms import FedForest, FedSCSXGB  # noqa: E402
from tests.aggregator.test_site_aggregator import GATEWAYS, assert_same_ensemble, fleet_data  # noqa: E402
from tests.e2e.test_site_aggregator import mqtt_fleet  # noqa: E402

LAYOUTS = {
    "flat (6 gateways)": None,
    "3 sites of 2": {f"site-{i}": GATEWAYS[2 * i : 2 * i + 2] for i in range(3)},
    "2 sites of 3": {f"site-{i}": GATEWAYS[3 * i : 3 * i + 3] for i in range(2)},
    "1 site of 6": {"site-0": GATEWAYS},
}
ALGORITHMS = [FedSCSXGB(n_rounds=4, max_depth=4, n_bins=32), FedForest(n_trees=10, max_depth=6, n_bins=32)]


def main() -> None:
    data = fleet_data(n=300, d=20)
    flat_models = {}
    print("| algorithm | layout | rounds | bytes into the cloud per round | vs flat | job time (s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        flat_bytes = {}
        for name, sites in LAYOUTS.items():
            with mqtt_fleet(
                Path(tmp) / name.replace(" ", "-").replace("(", "").replace(")", ""), sites, data=data
            ) as fleet:
                for algorithm in ALGORITHMS:
                    before = fleet.cloud.stats.received_bytes
                    started = time.monotonic()
                    model, job = fleet.train(algorithm, deadline_s=60)
                    elapsed = time.monotonic() - started
                    per_round = (fleet.cloud.stats.received_bytes - before) / job.rounds
                    if sites is None:
                        flat_models[algorithm.name], flat_bytes[algorithm.name] = model, per_round
                    else:
                        assert_same_ensemble(model, flat_models[algorithm.name])
                    print(
                        f"| {algorithm.name} | {name} | {job.rounds} | {per_round:,.0f} | "
                        f"{per_round / flat_bytes[algorithm.name]:.2f} | {elapsed:.1f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
