"""The server's rules on their numbers: cron times, schedule triggers, the promotion rule and
the canary share."""

from __future__ import annotations

import calendar

import pytest

from aggregator.server.policy import CronSpec, canary_of, is_due, judge, judge_live, metric_for


def utc(text: str) -> float:
    return float(calendar.timegm(__import__("time").strptime(text, "%Y-%m-%d %H:%M")))


def test_cron_fields_ranges_steps_and_the_day_or_weekday_rule() -> None:
    nightly = CronSpec.parse("30 2 * * *")
    assert nightly.matches(utc("2026-11-26 02:30")) and not nightly.matches(utc("2026-11-26 02:31"))
    quarter = CronSpec.parse("*/15 8-10 * * 1-5")  # weekdays 8:00-10:45 every 15 min
    assert quarter.matches(utc("2026-11-26 09:45"))  # a Thursday
    assert not quarter.matches(utc("2026-11-29 09:45"))  # a Sunday
    assert not quarter.matches(utc("2026-11-26 11:00"))
    either = CronSpec.parse("0 0 1 * 0")  # the 1st of the month OR a Sunday, as in cron
    assert either.matches(utc("2026-11-29 00:00")) and either.matches(utc("2026-12-01 00:00"))
    assert not either.matches(utc("2026-11-26 00:00"))
    for bad, why in (
        ("* * *", "5 fields"),
        ("61 * * * *", "0-59"),
        ("x * * * *", "not a number"),
        ("*/0 * * * *", "0-59"),
    ):
        with pytest.raises(ValueError, match=why):
            CronSpec.parse(bad)


def test_a_schedule_is_due_by_interval_by_cron_or_by_new_labelled_windows() -> None:
    t = utc("2026-11-26 02:00")
    assert is_due(t + 3600, t, every_s=3600) and not is_due(t + 3599, t, every_s=3600)
    assert is_due(t + 31 * 60, t, cron="30 2 * * *")  # 02:30 fell in (02:00, 02:31]
    assert not is_due(t + 29 * 60, t, cron="30 2 * * *")
    assert not is_due(t + 40 * 60, t + 31 * 60, cron="30 2 * * *")  # already ran at 02:31
    assert is_due(t, t, min_new_windows=50, labelled_now=150, labelled_then=100)
    assert not is_due(t, t, min_new_windows=50, labelled_now=149, labelled_then=100)
    assert not is_due(t + 10**6, t)  # no trigger set: never


def test_a_last_run_ahead_of_the_clock_is_due_at_once() -> None:
    """Ran with the clock a year ahead, then NTP set it back: before, both said "not due" for a year."""
    t, year = utc("2026-11-26 02:10"), 365 * 86_400
    assert is_due(t + 2 * 86_400, t + year, every_s=3600)
    assert is_due(t + 2 * 86_400, t + year, cron="0 * * * *")
    assert not is_due(t, t + year, min_new_windows=50, labelled_now=120, labelled_then=100)  # no time trigger


def test_promotion_rule_records_its_numbers() -> None:
    metric, higher = metric_for(classifier=True)
    assert (metric, higher) == ("accuracy", True) and metric_for(False) == ("rmse", False)
    within = judge("accuracy", True, 0.80, 0.81, 0.02)
    assert within.promote and within.regression == pytest.approx(0.01)
    beyond = judge("accuracy", True, 0.70, 0.81, 0.02)
    assert not beyond.promote and beyond.regression == pytest.approx(0.11) and "regressed" in beyond.reason
    rmse = judge("rmse", False, 1.5, 1.0, 0.2)  # lower is better: +0.5 is a regression
    assert not rmse.promote and rmse.regression == pytest.approx(0.5)
    assert judge("accuracy", True, 0.5, None, 0.0).promote  # the first version
    assert not judge("accuracy", True, None, 0.9, 0.5).promote  # not scored: nothing shows it holds


def test_canary_is_the_first_share_of_gateways_in_id_order() -> None:
    fleet = [f"gw-{i}" for i in (3, 1, 4, 2)]
    assert canary_of(fleet, 0.25) == ["gw-1"]
    assert canary_of(fleet, 0.3) == ["gw-1", "gw-2"]  # ceil: never fewer than the share
    assert canary_of(fleet, 1.0) == sorted(fleet)
    with pytest.raises(ValueError, match="canary_share"):
        canary_of(fleet, 0.0)


def test_the_live_check_compares_as_many_windows_before_and_after() -> None:
    before = [0.2] * 10 + [0.9] * 4  # only the newest 4 of the version before count
    after = [0.8, 0.8, 0.9, 0.9, 0.1]  # only the first 4 of the candidate count
    check = judge_live("gw-1", before, after, min_windows=4, max_drop=0.06)
    assert not check.halt and check.windows == 4
    assert check.before == pytest.approx(0.9) and check.after == pytest.approx(0.85)
    assert check.drop == pytest.approx(0.05) and "dropped by 0.05 <= 0.06" in check.reason
    assert judge_live("gw-1", before, after, min_windows=4, max_drop=0.04).halt
    risen = judge_live("gw-1", [0.5] * 4, [0.7] * 4, min_windows=4, max_drop=0.0)
    assert not risen.halt and "rose by 0.2, limit 0" in risen.reason
    fresh = judge_live("gw-2", [0.9] * 3, [0.3] * 4, min_windows=4, max_drop=0.0)  # no baseline: the count decides
    assert not fresh.halt and fresh.before is None and "no live baseline (3 predictions" in fresh.reason
    short = judge_live("gw-3", [0.9] * 4, [0.9] * 3, min_windows=4, max_drop=0.5)
    assert short.halt and short.before == pytest.approx(0.9) and short.after is None
    with pytest.raises(ValueError, match="min_windows must be >= 1"):
        judge_live("gw-1", [], [], min_windows=0, max_drop=0.1)
