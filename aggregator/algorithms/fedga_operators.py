"""FedGA-Tree's genetic operators on integer-string structures (paper §III-A, C, D).

Small pure functions of a ``numpy.random.Generator`` and ``(n, L)`` int64 populations
(``shared.tree_encoding``): every operator maps valid strings (values in ``-1 .. n_features-1``)
to valid strings, so no repair step is needed -- decoding drops whatever subtree an operator
detaches. Fitness is always "higher is better" here (F1, or minus the MSE).

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> population = initial_population(rng, 4, n_features=3, depth=2, leaf_ratio=0.0)
>>> population.shape, int(population.min()) >= 0
((4, 3), True)
>>> a, b = one_point_crossover(rng, population[:2], population[2:])
>>> a.shape
(2, 3)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shared.tree_encoding import NIL, string_length

__all__ = [
    "MUTATIONS",
    "Survivors",
    "initial_population",
    "mutate",
    "node_flip",
    "node_swap",
    "one_point_crossover",
    "reproduce",
    "substring_swap",
    "survivors",
    "tournament",
]

#: The three mutations of §III-D; one of them is drawn per generation.
MUTATIONS = ("node_flip", "node_swap", "substring_swap")


def initial_population(
    rng: np.random.Generator, size: int, *, n_features: int, depth: int, leaf_ratio: float
) -> np.ndarray:
    """``Initializer``: ``size`` strings of uniformly drawn features, each slot then set to
    ``NIL`` with probability ``leaf_ratio`` (the paper's r_l), so that the population holds
    leaves at varying distances from the root instead of only full trees."""
    shape = (size, string_length(depth))
    strings = rng.integers(0, n_features, shape)
    return np.where(rng.random(shape) < leaf_ratio, NIL, strings).astype(np.int64)


def tournament(rng: np.random.Generator, fitness: np.ndarray, n_winners: int, size: int) -> np.ndarray:
    """Tournament selection with pressure ``size`` (the paper's s): for each of ``n_winners``
    draws, ``size`` distinct individuals are picked at random and the fittest one wins (the
    lowest index on ties). Returns the winners' indices."""
    n = fitness.shape[0]
    size = min(size, n)
    entrants = np.argsort(rng.random((n_winners, n)), axis=1)[:, :size]
    best = np.argmax(fitness[entrants], axis=1)
    return entrants[np.arange(n_winners), best]


def one_point_crossover(
    rng: np.random.Generator, first: np.ndarray, second: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per pair of rows, one cut point ``k`` in ``1 .. L-1``: the children are ``first[:k] +
    second[k:]`` and ``second[:k] + first[k:]`` (identity when ``L == 1``)."""
    n, length = first.shape
    cut = rng.integers(1, max(length, 2), n)[:, None]
    head = np.arange(length)[None, :] < cut
    return np.where(head, first, second), np.where(head, second, first)


def node_flip(rng: np.random.Generator, strings: np.ndarray, n_flips: int, n_features: int) -> np.ndarray:
    """Per string, ``n_flips`` distinct slots get a *different* value drawn uniformly from the
    features and ``NIL`` (multi-point mutation)."""
    out = strings.copy()
    n, length = out.shape
    n_flips = min(n_flips, length)
    slots = np.argsort(rng.random((n, length)), axis=1)[:, :n_flips]
    rows = np.repeat(np.arange(n), n_flips)
    current = out[rows, slots.ravel()]
    # n_features + 1 values (NIL, 0..F-1); drawing among the n_features others, shifted past the current
    draw = rng.integers(0, n_features, rows.size) - 1
    out[rows, slots.ravel()] = np.where(draw >= current, draw + 1, draw)
    return out


def node_swap(rng: np.random.Generator, strings: np.ndarray, n_swaps: int) -> np.ndarray:
    """Per string, ``n_swaps`` times: exchange the values of two random slots."""
    out = strings.copy()
    n, length = out.shape
    rows = np.arange(n)
    for _ in range(n_swaps):
        i, j = rng.integers(0, length, n), rng.integers(0, length, n)
        out[rows, i], out[rows, j] = out[rows, j], out[rows, i]
    return out


def substring_swap(rng: np.random.Generator, strings: np.ndarray) -> np.ndarray:
    """Per string: cut into three non-empty substrings at two random points (strings of
    fewer than 3 slots are left alone) and put them back in a random order."""
    out = strings.copy()
    n, length = out.shape
    if length < 3:
        return out
    cuts = np.sort(np.argsort(rng.random((n, length - 1)), axis=1)[:, :2] + 1, axis=1)
    orders = np.array([[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]])
    order = orders[rng.integers(0, orders.shape[0], n)]
    for r in range(n):
        a, b = cuts[r]
        parts = (strings[r, :a], strings[r, a:b], strings[r, b:])
        out[r] = np.concatenate([parts[k] for k in order[r]])
    return out


def mutate(
    rng: np.random.Generator, strings: np.ndarray, *, flip_rate: float, swap_rate: float, n_features: int
) -> tuple[np.ndarray, str]:
    """``Mutation``: one of :data:`MUTATIONS` drawn for this generation and applied to every
    string; ``flip_rate``/``swap_rate`` (m_1, m_2) are shares of the string length, at least one
    slot. Returns the strings and the mutation's name."""
    length = strings.shape[1]
    kind = MUTATIONS[int(rng.integers(0, len(MUTATIONS)))]
    if kind == "node_flip":
        return node_flip(rng, strings, max(1, round(flip_rate * length)), n_features), kind
    if kind == "node_swap":
        return node_swap(rng, strings, max(1, round(swap_rate * length))), kind
    return substring_swap(rng, strings), kind


def reproduce(
    rng: np.random.Generator,
    population: np.ndarray,
    fitness: np.ndarray,
    *,
    size: int,
    tournament_size: int,
    flip_rate: float,
    swap_rate: float,
    n_features: int,
) -> np.ndarray:
    """``Crossover`` then ``Mutation`` (Alg. 1 steps 41-42): ``size`` offspring from parents
    chosen by tournament, paired in draw order for one-point crossover, then mutated."""
    pairs = (size + 1) // 2
    winners = tournament(rng, fitness, 2 * pairs, tournament_size)
    first, second = one_point_crossover(rng, population[winners[:pairs]], population[winners[pairs:]])
    children = np.concatenate([first, second])[:size]
    return mutate(rng, children, flip_rate=flip_rate, swap_rate=swap_rate, n_features=n_features)[0]


@dataclass(frozen=True)
class Survivors:
    """The population after ``Update``: ``strings`` and their ``fitness``, best first, and
    ``local`` marking the clients' own structures (kept under elitism)."""

    strings: np.ndarray
    fitness: np.ndarray
    local: np.ndarray


def survivors(
    parents: Survivors,
    offspring: np.ndarray,
    offspring_fitness: np.ndarray,
    offspring_local: np.ndarray,
    *,
    size: int,
    elitism: bool,
) -> Survivors:
    """``Update`` (§III-C): parents and offspring compete, the ``size`` fittest survive
    (offspring first on ties, then in order -- a stable sort). ``elitism`` keeps, besides them,
    every client's local structure (each distinct one once) that did not make the cut, so the
    population then holds up to ``size`` plus the number of local structures, and offspring
    still compete for the ``size`` places however many clients there are."""
    strings = np.concatenate([offspring, parents.strings])
    fitness = np.concatenate([offspring_fitness, parents.fitness])
    local = np.concatenate([offspring_local, parents.local])
    keep = np.argsort(-fitness, kind="stable")[:size]
    if elitism:
        local_rows = {strings[i].tobytes(): i for i in np.flatnonzero(local)[::-1]}  # the first of each
        kept_rows = {strings[i].tobytes() for i in keep}
        missing = np.array([i for row, i in local_rows.items() if row not in kept_rows], np.int64)
        keep = np.concatenate([keep, missing])
        keep = keep[np.argsort(-fitness[keep], kind="stable")]
        local = np.array([row.tobytes() in local_rows for row in strings])
    return Survivors(strings[keep], fitness[keep], local[keep])
