"""The write-ahead record of a training's releases: a budget made under a log records each release
there before ``mu`` hands out its noise (a record that cannot be written stops the release), at
its planned cost, replaced by its actual cost once decoded; the log's total never falls below
what was decoded plus what is in flight; with or without a log the budget's noise and spending
are the same bit for bit."""

from __future__ import annotations

import doctest

import pytest

from aggregator.privacy import PrivacyBudget, Released, ReleaseLog, recording_releases, skellam_release
from aggregator.privacy import spending as spending_module
from aggregator.privacy.spending import current_log

SHARES = {"opening": 0.1, "splits": 0.7, "leaves": 0.2}
COUNTS = {"opening": 2, "splits": 4, "leaves": 2}
#: A training's releases: (kind, l2, l1, answered of 4 gateways), a ``mu`` asked twice for one
#: release (the private boosting's noise-scale look-up) and releases with gateways dropping out.
PLAN = [
    ("opening", 2.0, 4.0, 4),
    ("opening", 2.0, 4.0, 4),
    ("splits", 3.0, 9.0, 4),
    ("splits", 3.0, 9.0, 3),
    ("leaves", 1.5, 2.0, 4),
    ("splits", 3.0, 9.0, 2),
    ("splits", 3.0, 9.0, 4),
    ("leaves", 1.5, 2.0, 4),
]


def budget() -> PrivacyBudget:
    return PrivacyBudget(2.0, 1e-6, shares=dict(SHARES), releases=dict(COUNTS))


def train(b: PrivacyBudget, on_send=None) -> list[float]:
    """Run ``PLAN`` on ``b`` as a strategy does; ``on_send(i)`` where the i-th request goes out."""
    noise = []
    for i, (kind, l2, l1, answered) in enumerate(PLAN):
        b.mu(kind, l2, l1)  # a look-up before the release: the same noise, not a second release
        mu = b.mu(kind, l2, l1)
        if on_send is not None:
            on_send(i)
        b.spend(skellam_release(kind, l2, l1, mu, answered=answered, asked=4))
        noise.append(mu)
    return noise


def test_the_docstring_examples_hold() -> None:
    assert doctest.testmod(spending_module).failed == 0


def test_a_log_changes_neither_the_noise_nor_the_spending() -> None:
    plain = budget()
    noise = train(plain)
    with recording_releases(ReleaseLog(lambda r: None)):
        logged = budget()
    assert logged.log is not None and plain.log is None
    assert train(logged) == noise
    assert logged.spent_releases == plain.spent_releases and logged.spent() == plain.spent()


def test_every_release_is_recorded_before_it_goes_out_and_never_under_counted() -> None:
    written: list[Released] = []
    with recording_releases(ReleaseLog(written.append)) as log:
        b = budget()

    def on_send(i: int) -> None:
        kind, l2, l1, _ = PLAN[i]
        in_flight = skellam_release(kind, l2, l1, b.mu(kind, l2, l1))
        decoded = b.spent_releases
        assert written[-1] == log.total()  # the record is written, not only held
        assert written[-1].releases == len(decoded) + 1 == i + 1
        assert written[-1].rho == sum(r.rho for r in [*decoded, in_flight])
        assert written[-1].xi == sum(r.xi for r in [*decoded, in_flight])

    train(b, on_send)
    spent = b.spent()
    assert written[-1] == Released(spent.rho, spent.xi, spent.releases)
    # a release decoded from fewer gateways costs more than its record ahead of it: the total
    # only grows (the in-flight record is replaced by the actual cost)
    assert all(a.rho <= b_.rho and a.xi <= b_.xi for a, b_ in zip(written, written[1:]))
    assert len(written) < 2 * len(PLAN) + 1  # one write ahead, one more only if the cost grew


def test_a_record_that_cannot_be_written_stops_the_release() -> None:
    def full_disk(released: Released) -> None:
        raise OSError("the registry cannot be written")

    with recording_releases(ReleaseLog(full_disk)):
        b = budget()
    with pytest.raises(OSError, match="cannot be written"):
        b.mu("opening", 2.0, 4.0)
    assert b.spent_releases == []


def test_the_log_is_installed_only_inside_its_block() -> None:
    log = ReleaseLog(lambda r: None)
    assert current_log() is None
    with recording_releases(log):
        assert current_log() is log and budget().log is log
    assert current_log() is None and budget().log is None


def test_a_release_in_flight_is_recorded_at_the_cost_of_the_fewest_answers_a_round_accepts() -> None:
    """A crash between the decoding and ``spend`` must not under-count: with half the gateways
    enough for a round (``answered_fraction=0.5``), the record of a release in flight covers its
    cost decoded from any half of them (PLAN decodes from 4, 3 and 2 of 4)."""
    written: list[Released] = []
    with recording_releases(ReleaseLog(written.append, answered_fraction=0.5)):
        b = budget()

    def on_send(i: int) -> None:
        kind, l2, l1, answered = PLAN[i]
        mu = b.mu(kind, l2, l1)
        decoded = [*b.spent_releases, skellam_release(kind, l2, l1, mu, answered=answered, asked=4)]
        assert written[-1].rho >= sum(r.rho for r in decoded) * (1 - 1e-12)
        assert written[-1].xi >= sum(r.xi for r in decoded) * (1 - 1e-12)
        worst = skellam_release(kind, l2, l1, mu, answered=2, asked=4)
        assert written[-1].rho == pytest.approx(sum(r.rho for r in b.spent_releases) + worst.rho, rel=1e-12)

    train(b, on_send)
    spent = b.spent()
    assert written[-1] == Released(spent.rho, spent.xi, spent.releases)  # decoded: the actual cost


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_an_answered_fraction_outside_0_1_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="answered_fraction must lie in"):
        ReleaseLog(lambda r: None, answered_fraction=fraction)
