"""Schedules across steps of the aggregator's wall clock.

The bug: a schedule that ran while the wall clock was a year ahead stored that time as its last
run; once NTP set the clock back, ``every_s=3600`` and an hourly cron both said "not due" until
the clock reached that time again -- the schedule froze for a year. Now a schedule this server
started is timed on the monotonic clock, and a stored last run ahead of the clock (a restart
after the step) makes the schedule due at once, once.
"""

from __future__ import annotations

import calendar
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aggregator.registry import Registry, ScheduleRecord
from aggregator.server.service import JobRequest, Scheduler

YEAR, DAY, HOUR = 365 * 86_400, 86_400, 3_600
T = float(calendar.timegm(time.strptime("2026-11-26 02:10", "%Y-%m-%d %H:%M")))  # 02:10 UTC


@dataclass
class Runner:
    """Records the jobs the scheduler submits (nothing runs them, so no schedule is busy)."""

    submitted: list[str] = field(default_factory=list)

    def submit(self, request: JobRequest, *, schedule_id: str = "") -> str:
        self.submitted.append(schedule_id)
        return schedule_id

    def baseline_version(self, _model_id: str, _gateways: list[str]) -> None:
        return None


class Tracker:
    def labelled_total(self) -> int:
        return 0

    def online(self) -> list[str]:
        return []


def schedule(schedule_id: str, *, every_s: float | None = None, cron: str = "", last_run: float = T) -> ScheduleRecord:
    return ScheduleRecord(
        schedule_id, "act", "fedforest", {"n_trees": 1}, every_s, cron, None, 0.0, 1.0, True, last_run, 0, last_run
    )


@pytest.fixture
def registry(tmp_path: Path):
    with Registry(tmp_path / "r.db") as registry:
        registry.add_schedule(schedule("hourly", every_s=HOUR))
        registry.add_schedule(schedule("cron", cron="0 * * * *"))
        yield registry


def ticks(scheduler: Scheduler, runner: Runner, *moments: tuple[float, float]) -> list[list[str]]:
    """The schedules started at each (wall, monotonic) tick."""
    out = []
    for wall, mono in moments:
        runner.submitted.clear()
        scheduler.tick(wall, mono)
        out.append(sorted(runner.submitted))
    return out


def test_a_clock_set_back_by_a_year_does_not_freeze_the_schedules(registry, caplog) -> None:
    runner = Runner()
    scheduler = Scheduler(registry, runner, Tracker(), tick_s=60)
    with caplog.at_level(logging.WARNING, logger="aggregator.server.service"):
        started = ticks(
            scheduler,
            runner,
            (T + YEAR, 0.0),  # the clock a year ahead: both run (once)
            (T + YEAR + 60, 60.0),  # a minute later: nothing
            (T + 2 * DAY, 120.0),  # NTP set it back: a minute later still nothing ...
            (T + 2 * DAY + 50 * 60, 3120.0),  # ... the cron at 03:00 on the corrected clock
            (T + 2 * DAY + 58 * 60, 3600.0),
        )  # ... an hour after the last run on the real clock
    assert started == [["cron", "hourly"], [], [], ["cron"], ["hourly"]]
    steps = [r.getMessage() for r in caplog.records if "stepped" in r.getMessage()]
    assert len(steps) == 1 and "by -31363320 s" in steps[0], steps  # logged once, by how much


def test_after_a_restart_a_last_run_ahead_of_the_clock_is_due_once(registry, caplog) -> None:
    first = Runner()
    assert ticks(Scheduler(registry, first, Tracker(), tick_s=60), first, (T + YEAR, 0.0)) == [["cron", "hourly"]]
    runner = Runner()
    restarted = Scheduler(registry, runner, Tracker(), tick_s=60)  # no memory of the runs
    with caplog.at_level(logging.WARNING, logger="aggregator.server.service"):
        started = ticks(restarted, runner, (T + 2 * DAY, 10.0), (T + 2 * DAY + 60, 70.0), (T + 2 * DAY + HOUR, 3610.0))
    assert started == [["cron", "hourly"], [], ["cron", "hourly"]]
    back = [r for r in caplog.records if "clock was set back" in r.getMessage()]
    assert len(back) == 2 and {r.schedule for r in back} == {"cron", "hourly"}


@pytest.mark.parametrize("restarted", [False, True], ids=["same-process", "restarted"])
def test_a_clock_stepped_a_year_ahead_runs_each_schedule_at_most_once(registry, restarted) -> None:
    runner = Runner()
    scheduler = Scheduler(registry, runner, Tracker(), tick_s=60)
    assert ticks(scheduler, runner, (T + HOUR, 0.0)) == [["cron", "hourly"]]  # 03:10: both ran
    if restarted:
        scheduler = Scheduler(registry, runner, Tracker(), tick_s=60)
    # the clock jumps a year ahead 60 s later; then it runs on for two hours, one tick a minute
    moments = [(T + YEAR + HOUR + 60 * k, 60.0 * k) for k in range(1, 121)]
    started = ticks(scheduler, runner, *moments)
    runs = {name: [k + 1 for k, names in enumerate(started) if name in names] for name in ("hourly", "cron")}
    if restarted:  # the stored last run is a year old: each runs once at the step, then on time
        assert runs == {"hourly": [1, 61], "cron": [1, 50, 110]}
    else:  # this process timed the interval: the step neither hastens nor delays it; cron at 04:00, 05:00
        assert runs == {"hourly": [60, 120], "cron": [50, 110]}
