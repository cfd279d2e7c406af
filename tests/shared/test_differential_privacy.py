"""The gateway's DP maths: Skellam shares add up to the target variance, stochastic rounding is
unbiased, clipping bounds the norm, post-processing keeps counts consistent; the accountant's
Skellam releases and conversions (dp-accounting)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.privacy import PrivacyBudget, epsilon_of, rho_for_epsilon, skellam_release
from shared.differential_privacy import (
    clip_norm,
    consistent_children,
    lattice_norm_bound,
    skellam_share,
    stochastic_round,
)


def test_skellam_shares_of_m_gateways_sum_to_the_target_variance() -> None:
    rng = np.random.default_rng(0)
    m, mu, cells = 8, 900.0, 200_000
    total = sum(skellam_share(cells, mu, m, rng) for _ in range(m))
    assert total.dtype == np.int64
    assert abs(total.var() / mu - 1) < 0.02 and abs(total.mean()) < 0.5
    one = skellam_share(cells, mu, m, rng)
    assert abs(one.var() / (mu / m) - 1) < 0.02  # a single share is m times weaker


def test_stochastic_rounding_is_unbiased_and_moves_less_than_one_step() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(size=50_000)
    q = stochastic_round(np.broadcast_to(values, (20, values.size)), 8, rng)
    assert np.abs(q - values * 8).max() < 1
    assert abs((q.mean(axis=0) - values * 8).mean()) < 0.01
    with pytest.raises(ValueError):
        stochastic_round([np.nan], 8)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=8), st.floats(0.01, 10))
def test_clipped_rows_are_within_the_norm_and_rounded_within_the_lattice_bound(row, bound) -> None:
    v = clip_norm(np.array([row]), bound)
    assert np.sqrt((v * v).sum()) <= bound * (1 + 1e-12)
    q = stochastic_round(v, 64, np.random.default_rng(0)).astype(np.float64)
    l2, l1 = lattice_norm_bound(bound, 64, len(row))
    assert np.sqrt((q * q).sum()) <= l2 + 1e-9 and np.abs(q).sum() <= l1 + 1e-9


def test_skellam_release_cost_and_dropouts() -> None:
    full = skellam_release("leaves", l2=2.0, l1=4.0, mu=100.0)
    assert full.rho == pytest.approx(0.02) and full.xi == pytest.approx(0.03)
    half = skellam_release("leaves", l2=2.0, l1=4.0, mu=100.0, answered=5, asked=10)
    assert half.rho == pytest.approx(0.04)  # half the gateways' shares: half the noise variance
    with pytest.raises(ValueError):
        skellam_release("leaves", 1.0, 1.0, 0.0)


def test_conversions_invert_each_other_and_match_the_zcdp_bound() -> None:
    rho = rho_for_epsilon(1.0, 1e-6)
    assert epsilon_of(rho, 0.0, 1e-6) == pytest.approx(1.0, rel=1e-5)
    # dp-accounting's RDP conversion is at least as tight as rho + 2 sqrt(rho ln 1/delta)
    assert epsilon_of(0.1, 0.0, 1e-6) <= 0.1 + 2 * math.sqrt(0.1 * math.log(1e6))
    assert epsilon_of(0.1, 0.01, 1e-6) > epsilon_of(0.1, 0.0, 1e-6)


def test_budget_shares_rho_between_kinds_and_spends_at_most_the_target() -> None:
    budget = PrivacyBudget(2.0, 1e-6, shares={"a": 0.25, "b": 0.75}, releases={"a": 1, "b": 3})
    for kind, n, l2 in (("a", 1, 3.0), ("b", 3, 1.0)):
        mu = budget.mu(kind, l2, l2)
        for _ in range(n):
            budget.spend(skellam_release(kind, l2, l2, mu))
    spent = budget.spent()
    cost = {k: sum(r.rho + r.xi for r in budget.spent_releases if r.kind == k) for k in ("a", "b")}
    assert cost["a"] == pytest.approx(0.25 * budget.rho) and cost["b"] == pytest.approx(0.75 * budget.rho)
    assert 1.0 < spent.epsilon <= 2.0 and spent.releases == 4  # xi charged as rho: conservative
    with pytest.raises(ValueError):
        PrivacyBudget(1.0, 1e-6, shares={"a": 0.5}, releases={"a": 1})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(-50, 200), min_size=1, max_size=8), st.integers(0, 500)), min_size=1, max_size=6
    )
)
def test_consistent_children_are_non_negative_and_add_up(buckets) -> None:
    noisy = np.concatenate([np.array(c) for c, _ in buckets])
    parents = np.array([p for _, p in buckets])
    offsets = np.concatenate([[0], np.cumsum([len(c) for c, _ in buckets])])
    out = consistent_children(noisy, parents, offsets)
    assert (out >= 0).all()
    np.testing.assert_array_equal(np.add.reduceat(out, offsets[:-1]), parents)
