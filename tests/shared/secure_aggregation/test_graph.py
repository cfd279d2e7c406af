"""Neighbourhoods: complete or SecAgg+ ring graphs, symmetric, deterministic; default degree and threshold."""

from __future__ import annotations

import pytest

from shared.secure_aggregation import SecureAggregationError, default_degree, default_threshold, neighbourhoods

CLIENTS = [f"gw-{i:02d}" for i in range(30)]


@pytest.mark.parametrize("degree", [None, 29, 40])
def test_complete_graph(degree: int | None) -> None:
    graph = neighbourhoods(CLIENTS, degree, seed=1)
    for client, linked in graph.items():
        assert linked == tuple(c for c in sorted(CLIENTS) if c != client)


@pytest.mark.parametrize(("degree", "expected"), [(2, 2), (3, 4), (6, 6), (11, 12)])
def test_sparse_graph_is_regular_symmetric_and_connected(degree: int, expected: int) -> None:
    graph = neighbourhoods(CLIENTS, degree, seed=b"job-7")
    assert set(graph) == set(CLIENTS)
    for client, linked in graph.items():
        assert len(linked) == expected and client not in linked and list(linked) == sorted(linked)
        assert all(client in graph[other] for other in linked)
    reached, frontier = {CLIENTS[0]}, [CLIENTS[0]]
    while frontier:
        for other in graph[frontier.pop()]:
            if other not in reached:
                reached.add(other)
                frontier.append(other)
    assert reached == set(CLIENTS)


def test_graph_depends_only_on_clients_degree_and_seed() -> None:
    graph = neighbourhoods(CLIENTS, 4, seed=3)
    assert graph == neighbourhoods(list(reversed(CLIENTS)), 4, seed=3)
    assert graph != neighbourhoods(CLIENTS, 4, seed=4)
    assert neighbourhoods(CLIENTS, 4, seed=b"3") != graph  # bytes and int seeds are distinct


def test_degree_rounding_to_complete() -> None:
    clients = ["a", "b", "c", "d", "e"]  # n - 1 = 4
    assert len(neighbourhoods(clients, 3, seed=0)["a"]) == 4  # 3 -> 4 = n - 1: complete


def test_invalid_arguments() -> None:
    with pytest.raises(SecureAggregationError, match="unique"):
        neighbourhoods(["a", "a", "b"], None, 0)
    with pytest.raises(SecureAggregationError, match="non-empty"):
        neighbourhoods(["a", ""], None, 0)
    with pytest.raises(SecureAggregationError, match="degree"):
        neighbourhoods(CLIENTS, 0, 0)
    with pytest.raises(SecureAggregationError, match="seed"):
        neighbourhoods(CLIENTS, 4, 1.5)  # type: ignore[arg-type]


def test_default_degree_and_threshold() -> None:
    assert [default_degree(n) for n in (1, 2, 3, 10, 11, 100, 1000)] == [0, 1, 2, 9, 10, 16, 22]
    assert [default_threshold(k) for k in (2, 3, 4, 9, 16, 22)] == [2, 2, 3, 5, 9, 12]
    for k in range(2, 50):
        t = default_threshold(k)
        assert 2 <= t <= k and 2 * t > k  # reachable by the k holders, and a strict majority of them
    with pytest.raises(SecureAggregationError, match="at least 2"):
        default_threshold(1)
    with pytest.raises(SecureAggregationError, match="positive"):
        default_degree(0)
