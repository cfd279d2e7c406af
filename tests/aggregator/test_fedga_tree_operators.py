"""FedGA-Tree's genetic operators (paper §III-A, C, D): every operator keeps strings valid, and
each does what the paper says, checked against direct definitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregator.algorithms.fedga_operators import (
    Survivors,
    initial_population,
    mutate,
    node_flip,
    node_swap,
    one_point_crossover,
    reproduce,
    substring_swap,
    survivors,
    tournament,
)
from shared.tree_encoding import NIL, check_strings, string_length

cases = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 12), st.integers(1, 9))


def population(seed: int, depth: int, n_features: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(NIL, n_features, (size, string_length(depth)))


@settings(max_examples=150, deadline=None)
@given(cases)
def test_every_operator_keeps_strings_valid_and_the_multiset_rules(case) -> None:
    seed, depth, n_features, size = case
    rng = np.random.default_rng(seed + 1)
    pop = population(seed, depth, n_features, size)
    length = string_length(depth)
    init = initial_population(rng, size, n_features=n_features, depth=depth, leaf_ratio=0.3)
    check_strings(init, depth, n_features)
    a, b = one_point_crossover(rng, pop, pop[::-1])
    for out in (
        a,
        b,
        node_flip(rng, pop, 2, n_features),
        node_swap(rng, pop, 3),
        substring_swap(rng, pop),
        mutate(rng, pop, flip_rate=0.05, swap_rate=0.05, n_features=n_features)[0],
        reproduce(
            rng,
            pop,
            rng.random(size),
            size=size,
            tournament_size=3,
            flip_rate=0.05,
            swap_rate=0.05,
            n_features=n_features,
        ),
    ):
        assert out.shape == (size, length)
        check_strings(out, depth, n_features)
    # crossover: each column of the two children is the parents' column pair, possibly swapped
    assert (np.sort(np.stack([a, b]), axis=0) == np.sort(np.stack([pop, pop[::-1]]), axis=0)).all()
    # swaps and substring swaps permute each string
    for out in (node_swap(rng, pop, 3), substring_swap(rng, pop)):
        assert (np.sort(out, axis=1) == np.sort(pop, axis=1)).all()


@settings(max_examples=100, deadline=None)
@given(cases)
def test_crossover_is_one_point(case) -> None:
    seed, depth, n_features, size = case
    rng = np.random.default_rng(seed)
    first, second = population(seed, depth, n_features, size), population(seed + 7, depth, n_features, size)
    a, b = one_point_crossover(rng, first, second)
    length = first.shape[1]
    for i in range(size):
        # some cut k in 1..L-1 explains both children (any k when L == 1)
        cuts = [
            k
            for k in range(1, max(length, 2))
            if (a[i] == np.r_[first[i, :k], second[i, k:]]).all() and (b[i] == np.r_[second[i, :k], first[i, k:]]).all()
        ]
        assert cuts or length == 1


def test_node_flip_changes_exactly_m1_slots_to_other_values_over_the_whole_alphabet() -> None:
    rng = np.random.default_rng(0)
    pop = np.zeros((4000, 15), np.int64)
    flipped = node_flip(rng, pop, 2, n_features=3)
    changed = flipped != pop
    assert (changed.sum(axis=1) == 2).all()
    values, counts = np.unique(flipped[changed], return_counts=True)
    assert values.tolist() == [NIL, 1, 2]  # never the current value 0
    assert counts.min() > 0.3 * counts.max()  # uniform over the others


def test_substring_swap_reorders_three_contiguous_pieces() -> None:
    rng = np.random.default_rng(3)
    s = np.arange(7)[None, :].repeat(200, axis=0)
    out = substring_swap(rng, s)
    for row in out:
        # three increasing runs of consecutive integers
        breaks = np.flatnonzero(np.diff(row) != 1)
        assert breaks.size <= 2
    assert len({tuple(r) for r in out.tolist()}) > 3


def test_tournament_picks_the_fittest_of_s_distinct_entrants() -> None:
    fitness = np.arange(10.0)
    rng = np.random.default_rng(1)
    assert (tournament(rng, fitness, 500, 10) == 9).all()  # s = P: always the best
    winners = tournament(rng, fitness, 5000, 3)
    assert winners.min() >= 2  # the two worst can never win a 3-tournament of distinct entrants
    # P(winner = k) = C(k, 2) / C(10, 3): the order statistic
    expected = np.array([k * (k - 1) / 2 for k in range(10)]) / 120
    observed = np.bincount(winners, minlength=10) / winners.size
    assert np.abs(observed - expected).max() < 0.03


def test_survivors_keep_the_fittest_and_under_elitism_the_local_structures() -> None:
    parents = Survivors(np.array([[1], [2]]), np.array([0.9, 0.1]), np.array([False, True]))
    offspring = np.array([[3], [4], [5]])
    out = survivors(parents, offspring, np.array([0.5, 0.95, 0.2]), np.zeros(3, bool), size=2, elitism=False)
    assert out.strings.ravel().tolist() == [4, 1] and out.fitness.tolist() == [0.95, 0.9]
    out = survivors(parents, offspring, np.array([0.5, 0.95, 0.2]), np.zeros(3, bool), size=2, elitism=True)
    assert out.strings.ravel().tolist() == [4, 1, 2]  # the 2 fittest, and the local structure 2 besides
    assert out.local.tolist() == [False, False, True]


def test_elitism_still_lets_offspring_in_when_the_clients_structures_outnumber_the_population() -> None:
    # as many distinct local structures as places (a regression fleet of >= P clients)
    parents = Survivors(np.array([[1], [2], [3]]), np.array([0.3, 0.2, 0.1]), np.ones(3, bool))
    offspring = np.array([[7], [8]])
    out = survivors(parents, offspring, np.array([0.9, 0.05]), np.zeros(2, bool), size=3, elitism=True)
    assert out.strings.ravel().tolist() == [7, 1, 2, 3]  # the fitter offspring 7 survives
    assert out.local.tolist() == [False, True, True, True]
    again = survivors(out, np.array([[2], [9]]), np.array([0.95, 0.8]), np.zeros(2, bool), size=3, elitism=True)
    assert again.strings.ravel().tolist() == [2, 7, 9, 1, 3]  # an offspring equal to a local one counts as local
    assert again.local.tolist() == [True, False, False, True, True]
