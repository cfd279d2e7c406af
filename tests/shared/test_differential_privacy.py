"""The DP maths: noise shares add up to the target variance, the zCDP accounting, post-processing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.differential_privacy import ZCDPAccountant, consistent_children, epsilon_from_rho, noise_share


def test_shares_of_m_gateways_sum_to_at_least_the_target_standard_deviation() -> None:
    rng = np.random.default_rng(0)
    m, sigma, cells = 8, 3.0, 200_000
    total = sum(noise_share(np.ones(cells), sigma, m, rng) for _ in range(m))
    # stochastic rounding adds at most m/4 of variance, never less than none
    assert sigma * 0.99 < total.std() < math.sqrt(sigma ** 2 + m / 4) * 1.01
    assert abs(total.mean()) < 0.05


def test_small_shares_are_not_rounded_away() -> None:
    rng = np.random.default_rng(2)
    share = noise_share(np.ones(200_000), 0.1, 1, rng)  # a tenth of a count per gateway
    assert share.std() >= 0.1 and abs(share.mean()) < 0.01


def test_fixed_point_scale_multiplies_the_noise() -> None:
    rng = np.random.default_rng(1)
    noise = noise_share(np.full(100_000, 2.0 ** 20), 0.5, 1, rng)
    assert abs(noise.std() / 2.0 ** 20 - 0.5) < 0.01


def test_accountant_adds_rho_and_converts_to_epsilon() -> None:
    acc = ZCDPAccountant(delta=1e-5)
    acc.spend("a", sensitivity=2.0, sigma=4.0, answered=10, asked=10)  # rho = 4 / 32 = 0.125
    acc.spend("b", sensitivity=1.0, sigma=1.0, answered=5, asked=10)  # sigma_eff^2 = 0.5 -> rho = 1
    assert acc.rho == pytest.approx(1.125) and acc.releases == 2
    assert acc.epsilon == pytest.approx(1.125 + 2 * math.sqrt(1.125 * math.log(1e5)))
    assert epsilon_from_rho(0.0, 1e-5) == 0.0
    with pytest.raises(ValueError):
        acc.spend("c", 1.0, 0.0, 1, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(-50, 200), min_size=1, max_size=8), st.integers(0, 500)),
                min_size=1, max_size=6))
def test_consistent_children_are_non_negative_and_add_up(buckets) -> None:
    noisy = np.concatenate([np.array(c) for c, _ in buckets])
    parents = np.array([p for _, p in buckets])
    offsets = np.concatenate([[0], np.cumsum([len(c) for c, _ in buckets])])
    out = consistent_children(noisy, parents, offsets)
    assert (out >= 0).all()
    np.testing.assert_array_equal(np.add.reduceat(out, offsets[:-1]), parents)
