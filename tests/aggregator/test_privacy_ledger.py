"""The privacy ledger's arithmetic: a window's lifetime spending is the zCDP composition (sums of
rho and xi) of exactly the entries that cover it, converted by dp-accounting; windows outside a
job's gateways or range are untouched; a job over the cap is refused in one line that says what
is left and from when windows have the full budget."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from aggregator.privacy import epsilon_of, rho_for_epsilon
from aggregator.privacy import ledger as ledger_module
from aggregator.privacy.ledger import (
    BudgetExceeded,
    LedgerEntry,
    PlannedJob,
    budget_of,
    check_job,
    gateway_segments,
    iso_us,
    rho_room,
)

DELTA = 1e-6
DAY = 86_400_000_000
T0 = 1_795_000_000_000_000  # 2026-11-18T...


def entry(
    job: str, gateways: tuple[str, ...], since: int | None, until: int | None, rho: float, xi: float = 0.0
) -> LedgerEntry:
    return LedgerEntry(job, 1, gateways, since, until, rho, xi, DELTA, epsilon_of(rho, xi, DELTA), "spent")


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(ledger_module).failed == 0


def brute_force(entries: list[LedgerEntry], gateway: str, t: int) -> tuple[float, float]:
    """A window's spending by its definition: the sums over the entries that cover it."""
    covering = [
        e
        for e in entries
        if gateway in e.gateways and (e.since_us is None or e.since_us <= t) and (e.until_us is None or t < e.until_us)
    ]
    return sum(e.rho for e in covering), sum(e.xi for e in covering)


def test_overlapping_jobs_compose_to_epsilon_of_their_summed_rho_and_xi() -> None:
    rng = np.random.default_rng(3)
    entries = []
    for k in range(12):
        since = None if k % 5 == 0 else int(T0 + rng.integers(0, 20) * DAY)
        until = None if k == 11 else int((since or T0) + rng.integers(1, 10) * DAY)
        gateways = tuple(sorted(rng.choice(["gw-1", "gw-2", "gw-3"], size=rng.integers(1, 4), replace=False)))
        entries.append(
            entry(f"job-{k}", gateways, since, until, float(rng.uniform(0.01, 0.3)), float(rng.uniform(0, 0.01)))
        )
    budgets = {b.gateway: b for b in budget_of(entries, [], 10.0, DELTA)}
    for gateway in ("gw-1", "gw-2", "gw-3"):
        segments = gateway_segments(entries, gateway)
        assert segments, gateway
        epsilons = []
        for s in segments:
            probes = [
                t
                for t in (
                    (s.since_us if s.since_us is not None else T0 - 100 * DAY),
                    (s.until_us - 1 if s.until_us is not None else T0 + 400 * DAY),
                )
            ]
            for t in probes:
                rho, xi = brute_force(entries, gateway, t)
                assert s.rho == pytest.approx(rho, rel=1e-12) and s.xi == pytest.approx(xi, rel=1e-12)
                epsilons.append(epsilon_of(rho, xi, DELTA))
        # the most-used window's epsilon is dp-accounting's of its summed rho and xi
        assert budgets[gateway].spent_epsilon == pytest.approx(max(epsilons), rel=1e-9)
        # between the segments nothing covers a window (the gaps are untouched)
        for a, b in zip(segments, segments[1:]):
            if a.until_us != b.since_us:
                assert brute_force(entries, gateway, a.until_us) == (0, 0)


def test_the_fast_cap_test_gives_dp_accountings_answers_near_the_boundary() -> None:
    """``_over`` decides most pairs by the bound rho + xi <= rho_cap; near the cap it must still
    say exactly what ``epsilon_of`` says."""
    limit = rho_for_epsilon(10.0, DELTA)
    rng = np.random.default_rng(7)
    rho = limit * rng.uniform(0.97, 1.01, 300)
    xi = np.where(rng.random(300) < 0.5, 0.0, limit * rng.uniform(0, 0.03, 300))
    expected = np.array([epsilon_of(r, x, DELTA) > 10.0 for r, x in zip(rho, xi)])
    assert expected.any() and not expected.all()
    assert np.array_equal(ledger_module._over(rho, xi, 10.0, DELTA), expected)


def test_two_jobs_on_the_same_windows_spend_the_composition_not_the_sum_of_epsilons() -> None:
    rho = rho_for_epsilon(4.0, DELTA)
    entries = [entry("a", ("gw-1",), None, T0, rho), entry("b", ("gw-1",), None, T0, rho)]
    [budget] = budget_of(entries, [], 10.0, DELTA)
    assert budget.spent_epsilon == epsilon_of(2 * rho, 0.0, DELTA)
    assert 4.0 < budget.spent_epsilon < 8.0


def test_windows_outside_a_jobs_gateways_or_range_are_untouched() -> None:
    rho = rho_for_epsilon(3.0, DELTA)
    entries = [entry("a", ("gw-1", "gw-2"), T0, T0 + DAY, rho)]
    by = {b.gateway: b for b in budget_of(entries, ["gw-3"], 10.0, DELTA)}
    assert by["gw-3"].spent_epsilon == 0.0 and by["gw-3"].segments == ()
    assert by["gw-3"].remaining_epsilon == pytest.approx(10.0, rel=1e-5)
    [segment] = by["gw-1"].segments
    assert (segment.since_us, segment.until_us) == (T0, T0 + DAY)
    # a job on the windows before or after the range, or on another gateway, fits the whole budget
    big = PlannedJob(("gw-1", "gw-2"), None, T0, 10.0, DELTA)
    check_job(entries, big, [], 10.0, DELTA)
    check_job(entries, PlannedJob(("gw-1",), T0 + DAY, None, 10.0, DELTA), [], 10.0, DELTA)
    check_job(entries, PlannedJob(("gw-3",), None, None, 10.0, DELTA), [], 10.0, DELTA)
    with pytest.raises(BudgetExceeded):  # the first window of the range is covered
        check_job(entries, PlannedJob(("gw-1",), None, T0 + 1, 10.0, DELTA), [], 10.0, DELTA)


def test_remaining_is_the_most_a_job_can_still_spend() -> None:
    spent = rho_for_epsilon(5.0, DELTA)
    [budget] = budget_of([entry("a", ("gw-1",), None, T0, spent, 0.002)], [], 10.0, DELTA)
    room = rho_room(spent, 0.002, 10.0, DELTA)
    assert epsilon_of(spent + room, 0.002, DELTA) == pytest.approx(10.0, rel=1e-5)
    assert epsilon_of(spent + room, 0.002, DELTA) <= 10.0
    assert budget.remaining_epsilon == epsilon_of(room, 0.0, DELTA)
    # a job of exactly what is left passes; a bit more is refused
    ok = PlannedJob(("gw-1",), None, None, budget.remaining_epsilon * 0.999, DELTA)
    check_job([entry("a", ("gw-1",), None, T0, spent, 0.002)], ok, [], 10.0, DELTA)
    with pytest.raises(BudgetExceeded):
        check_job(
            [entry("a", ("gw-1",), None, T0, spent, 0.002)],
            PlannedJob(("gw-1",), None, None, budget.remaining_epsilon * 1.01, DELTA),
            [],
            10.0,
            DELTA,
        )


def test_the_refusal_is_one_line_with_what_is_left_and_when_windows_have_budget() -> None:
    rho = rho_for_epsilon(7.0, DELTA)
    entries = [entry("a", ("gw-1", "gw-2"), None, T0, rho), entry("b", ("gw-2",), T0, T0 + 2 * DAY, rho)]
    with pytest.raises(BudgetExceeded) as refused:
        check_job(entries, PlannedJob(None, None, None, 7.0, DELTA), ["gw-3"], 10.0, DELTA)
    line = str(refused.value)
    assert "\n" not in line
    least = min(b.remaining_epsilon for b in budget_of(entries, [], 10.0, DELTA))
    assert f"left there: epsilon {least:.4g} (gw-" in line
    assert f"since={iso_us(T0 + 2 * DAY)}" in line  # after gw-2's second job: the latest failing window's end
    assert "above the cap of 10 (delta 1e-06)" in line
    # the suggestion passes
    check_job(entries, PlannedJob(None, T0 + 2 * DAY, None, 7.0, DELTA), ["gw-3"], 10.0, DELTA)


def test_a_running_job_holds_every_window_to_come() -> None:
    rho = rho_for_epsilon(8.0, DELTA)
    running = LedgerEntry("job-r", 1, ("gw-1",), None, None, rho, 0.0, DELTA, 8.0, "running")
    with pytest.raises(BudgetExceeded, match="held by the running job job-r"):
        check_job([running], PlannedJob(("gw-1",), T0, None, 8.0, DELTA), [], 10.0, DELTA)
    [budget] = budget_of([running], [], 10.0, DELTA)
    assert budget.running == ("job-r",) and budget.segments[-1].until_us is None and budget.fresh_since_us is None


def test_a_job_over_the_cap_on_its_own_is_refused() -> None:
    with pytest.raises(BudgetExceeded, match="above the cap of 5 on its own: lower its dp_epsilon"):
        check_job([], PlannedJob(("gw-1",), None, None, 8.0, DELTA), [], 5.0, DELTA)
