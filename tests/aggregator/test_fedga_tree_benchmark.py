"""The FedGA-Tree benchmark's protocol (``benchmarks/bench_fedga_tree.py``): the paper's data
preparation and client counts, on the data sets the installed wheels ship (nothing downloaded)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench_fedga_tree as bench  # noqa: E402


def test_classification_features_go_into_5_quantile_bins_fitted_on_the_training_part_only() -> None:
    rng = np.random.default_rng(0)
    train = np.column_stack([rng.normal(size=1000), np.r_[np.zeros(990), np.ones(10)], np.zeros(1000)])
    test = np.column_stack([rng.normal(loc=3.0, size=200), np.ones(200), np.ones(200)])
    binned_train, binned_test = bench.discretise(train, test)
    codes, counts = np.unique(binned_train[:, 0], return_counts=True)
    assert codes.tolist() == [0, 1, 2, 3, 4] and (counts == 200).all()  # quantile: equal counts
    edges = np.quantile(train[:, 0], [0.2, 0.4, 0.6, 0.8])
    np.testing.assert_array_equal(binned_test[:, 0], np.searchsorted(edges, test[:, 0], side="right"))
    assert binned_test[:, 0].mean() > 3.5  # the shifted test rows fall in the training part's top bins
    # one quantile bin only (99 % zeros): 2 uniform bins instead (Appendix A)
    assert np.unique(binned_train[:, 1]).tolist() == [0, 1] and (binned_test[:, 1] == 1).all()
    assert (binned_train[:, 2] == 0).all()  # a constant feature stays one bin


def test_every_data_set_loads_from_the_installed_wheels_with_the_paper_s_client_count() -> None:
    expected = {
        "fair": (6366, 8, 20),
        "digits": (1797, 64, 5),
        "breast_cancer": (569, 30, 5),
        "randhie": (20190, 9, 20),
        "diabetes": (442, 10, 5),
    }
    for name in bench.CLASSIFICATION + bench.REGRESSION:
        data = bench.load(name)
        n, width, clients = expected[name]
        assert data.X.shape == (n, width) and data.y.shape == (n,) and np.isfinite(data.X).all()
        assert data.regression == (name in bench.REGRESSION)
        assert bench.n_clients(n) == clients
    assert bench.n_clients(4444) == 20 and bench.n_clients(4443) == 15  # 4,000 / 20 = 200; 3,999 / 20 < 200


def test_a_split_keeps_a_common_test_tenth_and_deals_the_rest_to_disjoint_clients() -> None:
    parts, test = bench.deal(1000, 20, split=3)
    rows = np.concatenate([*parts, test])
    assert test.size == 100 and sorted(rows.tolist()) == list(range(1000))
    assert {p.size for p in parts} == {45}


def test_eq_3_and_the_share_of_clients_gaining() -> None:
    federated, local = np.array([0.6, 0.4, 0.5]), np.array([0.5, 0.5, 0.5])
    np.testing.assert_allclose(bench.relative_change(federated, local), [20.0, -20.0, 0.0])
    assert bench.gains(federated, local, regression=False).tolist() == [True, False, False]
    assert bench.gains(federated, local, regression=True).tolist() == [False, True, False]
    assert bench.wilcoxon_p(np.zeros(5)) == 1.0
    assert bench.wilcoxon_p(np.arange(1.0, 11.0)) == pytest.approx(0.001953125)  # all 10 positive: 2 / 2^10


def test_the_ibm_tree_s_candidates_lie_between_the_bins_and_a_split_s_record_round_trips() -> None:
    edges = bench.bin_edges(np.array([[0.0, 2.0], [1.0, 2.0], [4.0, 2.0], [1.0, 2.0]]))
    assert edges[0].tolist() == [0.5, 2.5] and edges[1].size == 0
    outcome = bench.SplitOutcome(
        "fair", 3, False, np.array([0.5, 0.4]), np.array([[0.6, 0.4], [0.5, 0.5]]), 0.45, 5.0, 7.0, 1.5
    )
    again = bench.SplitOutcome.from_json(outcome.to_json())
    assert again.split == 3 and again.federated.tolist() == outcome.federated.tolist()
    assert again.delta == pytest.approx(((0.6 / 0.5 + 0.4 / 0.4 + 0.5 / 0.5 + 0.5 / 0.4) / 4 - 1) * 100)
    assert again.gain == pytest.approx(0.5) and again.ibm_delta == pytest.approx(((0.9 + 1.125) / 2 - 1) * 100)


def test_the_sweeps_client_counts_and_ibm_shares() -> None:
    """fair (6,366 rows) at N = 30 leaves 191 training rows per client, below the paper's 200; the
    IBM tree at c = 10 % of 20 clients grows from 2 distinct clients, at c = 1 from all of them,
    the same share for the same split."""
    assert bench.per_client(6366, 30) == 191 and bench.per_client(6366, 20) == 286
    tenth = bench.ibm_share(20, 0.1, split=3)
    assert tenth.size == 2 and np.unique(tenth).size == 2 and set(tenth.tolist()) <= set(range(20))
    assert np.array_equal(bench.ibm_share(20, 1.0, split=3), np.arange(20))
    assert np.array_equal(bench.ibm_share(20, 0.1, split=3), tenth)


def test_a_record_from_before_the_sweeps_loads_as_full_participation_of_its_clients() -> None:
    outcome = bench.SplitOutcome(
        "fair", 0, False, np.array([0.5, 0.6, 0.7]), np.array([[0.6, 0.6, 0.7]]), 0.4, 9.0, 20.0, 1.0, 20, 0.1
    )
    written = json.loads(outcome.to_json())
    assert bench.SplitOutcome.from_json(json.dumps(written)).setting == ("fair", 20, 0.1)
    before = {k: v for k, v in written.items() if k not in ("clients", "participation")}
    old = bench.SplitOutcome.from_json(json.dumps(before))
    assert old.setting == ("fair", 3, 1.0)
