"""The scale harness in CI: 100 simulated gateways (own MQTT connections and broker accounts,
multiplexed two host processes) against one mosquitto and the aggregator, one job each of
FedSCS-XGB and FedForest on the secure histogram protocol (``benchmarks/bench_scale_load.py --gateways
1000 5000`` is the long run). The models equal ``aggregator.simulate`` on the same gateways'
data and seed, bit for bit; every round is in the report with its phase, time and bytes."""

from __future__ import annotations

import pytest

import aggregator
from aggregator.broker import mosquitto_available
from aggregator.loadtest import LOAD_ALGORITHMS, LoadConfig, client_data, gateway_ids, load_algorithm, run_load

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

GATEWAYS = 100


@pytest.fixture(scope="module")
def runs():
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    return run_load(LoadConfig(gateways=GATEWAYS, processes=2, deadline_s=60.0, seed=3), progress=lambda line: None)


def test_every_algorithm_trains_the_simulations_model_with_every_reply(runs) -> None:
    assert [r.algorithm for r in runs] == list(LOAD_ALGORITHMS)
    fleet = client_data(gateway_ids(GATEWAYS))
    for run in runs:
        assert run.timed_out == 0 and run.errors == 0, run.algorithm
        assert run.model == aggregator.simulate(load_algorithm(run.algorithm), fleet, seed=3), run.algorithm


def test_the_report_has_every_round_with_its_phase_time_and_bytes(runs) -> None:
    for run in runs:
        phases = {p.phase: p for p in run.phases}
        # secure aggregation set up once, every sum unmasked
        assert {"secagg.keys", "secagg.join", "secagg.confirm", "secagg.unmask"} <= set(phases), phases
        growth = "fedscs_xgb.histograms" if run.algorithm == "fedscs-xgb" else "fedforest.histograms"
        levels = 2 * 3 if run.algorithm == "fedscs-xgb" else 3  # (boosting rounds x) depth levels
        assert phases[growth].rounds == levels
        sums = sum(
            p.rounds
            for name, p in phases.items()
            if name not in ("data_shape", "secagg.keys", "secagg.join", "secagg.confirm", "secagg.unmask")
        )
        assert phases["secagg.unmask"].rounds == sums  # one unmask per secure sum
        assert all(t.clients == t.answered == GATEWAYS for t in run.timings)
        assert all(t.seconds > 0 and t.bytes_down > 0 and t.bytes_up > 0 for t in run.timings)
        assert 0 < run.rounds_s < run.job_s and run.between_rounds_s > 0
        assert run.bytes_up_per_gateway == pytest.approx(sum(p.bytes_up_per_gateway for p in run.phases))
        assert run.aggregator_cpu_s > 0 and run.broker_cpu_s > 0 and run.hosts_cpu_s > 0
        assert run.aggregator_peak_mb >= run.aggregator_start_mb > 0 and run.broker_peak_mb > 0
