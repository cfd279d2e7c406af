"""The server's decisions as pure functions: when a schedule is due, whether a retrained version
is promoted, which gateways are the canary and whether the canary halts a rollout -- on its
held-out score (``judge``) and on its live predictions (``judge_live``).

Kept free of I/O so that each rule is tested on its numbers alone (tests/server/test_policy.py);
``aggregator.server.service`` feeds them what the fleet and the registry say.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "CanaryCheck",
    "CronSpec",
    "LiveCheck",
    "Verdict",
    "canary_of",
    "is_due",
    "judge",
    "judge_live",
    "metric_for",
]

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12), ("weekday", 0, 6))
#: How far back a cron schedule looks for a missed time (a server down for a week runs it once).
CRON_LOOKBACK_S = 86_400


@dataclass(frozen=True)
class CronSpec:
    """A five-field cron expression (minute hour day month weekday; ``*``, ``*/n``, ``a-b``,
    ``a-b/n`` and lists; weekday 0 = Sunday), in UTC. Day and weekday both restricted match
    when either does, as in cron.

    Examples
    --------
    >>> nightly = CronSpec.parse("30 2 * * *")
    >>> nightly.matches(1795660200.0)  # 2026-11-26 02:30 UTC
    True
    >>> nightly.matches(1795660260.0)  # 02:31
    False
    """

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> CronSpec:
        parts = text.split()
        if len(parts) != 5:
            raise ValueError(f"cron: expected 5 fields (minute hour day month weekday), got {text!r}")
        minutes, hours, days, months, weekdays = (
            _field(part, name, low, high) for part, (name, low, high) in zip(parts, _FIELDS)
        )
        return cls(minutes, hours, days, months, weekdays, any_day=parts[2] == "*", any_weekday=parts[4] == "*")

    def matches(self, t: float) -> bool:
        tm = time.gmtime(t)
        weekday = (tm.tm_wday + 1) % 7  # struct_time: Monday = 0; cron: Sunday = 0
        day_ok = tm.tm_mday in self.days
        weekday_ok = weekday in self.weekdays
        if self.any_day or self.any_weekday:
            calendar = day_ok and weekday_ok
        else:
            calendar = day_ok or weekday_ok
        return tm.tm_min in self.minutes and tm.tm_hour in self.hours and tm.tm_mon in self.months and calendar


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                first, last = low, high
            elif "-" in base:
                first, last = (int(x) for x in base.split("-", 1))
            else:
                first = last = int(base)
        except ValueError:
            raise ValueError(f"cron: {name} field {text!r} is not a number, range, list or */n") from None
        if step < 1 or not low <= first <= last <= high:
            raise ValueError(f"cron: {name} field {text!r} must lie in {low}-{high}")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def is_due(
    now: float,
    last_run: float,
    *,
    every_s: float | None = None,
    cron: str = "",
    min_new_windows: int | None = None,
    labelled_now: int = 0,
    labelled_then: int = 0,
) -> bool:
    """Whether a schedule runs now: ``every_s`` seconds have passed since ``last_run``, a cron
    time fell in (``last_run``, ``now``], or ``min_new_windows`` labelled windows were added
    fleet-wide since (``labelled_now - labelled_then``). Any trigger that is set suffices.

    A ``last_run`` later than ``now`` means the wall clock was set back since (NTP correcting a
    clock that ran ahead): how long ago the run was is unknown, so a time trigger is due at once
    -- waiting for the clock to reach ``last_run`` again would freeze the schedule for as long
    as the clock was ahead. The run stores the new ``now``, so this happens once.

    Examples
    --------
    >>> t = 1795658400.0  # 2026-11-26 02:00 UTC
    >>> is_due(t + 3600, t, every_s=3600), is_due(t + 60, t, every_s=3600)
    (True, False)
    >>> is_due(t, t + 365 * 86400, every_s=3600, cron="0 * * * *")  # ran with the clock a year ahead
    True
    """
    if (every_s is not None or cron) and last_run > now:
        return True
    if every_s is not None and now - last_run >= every_s:
        return True
    if min_new_windows is not None and labelled_now - labelled_then >= min_new_windows:
        return True
    if cron:
        spec = CronSpec.parse(cron)
        minute = math.floor(max(last_run, now - CRON_LOOKBACK_S) / 60) + 1
        return any(spec.matches(m * 60) for m in range(minute, math.floor(now / 60) + 1))
    return False


def metric_for(classifier: bool) -> tuple[str, bool]:
    """The validation metric a promotion compares, and whether higher is better."""
    return ("accuracy", True) if classifier else ("rmse", False)


@dataclass(frozen=True)
class Verdict:
    """A promotion (or canary) decision and its numbers: ``regression`` is how much worse the
    candidate is than the baseline (negative: better), ``promote`` whether it is within
    ``threshold``."""

    metric: str
    candidate: float | None
    baseline: float | None
    threshold: float
    regression: float | None
    promote: bool
    reason: str


def judge(
    metric: str, higher_is_better: bool, candidate: float | None, baseline: float | None, threshold: float
) -> Verdict:
    """Promote unless the candidate's validation ``metric`` is worse than the baseline's by more
    than ``threshold``. Without a baseline (the first version) it is promoted; without a score for
    the candidate (no held-out windows) it is not -- nothing shows that it does not regress.

    Examples
    --------
    >>> verdict = judge("accuracy", True, candidate=0.80, baseline=0.84, threshold=0.02)
    >>> verdict.promote, round(verdict.regression, 4)
    (False, 0.04)
    >>> verdict.reason
    'accuracy 0.8 vs baseline 0.84: regressed by 0.04 > 0.02'
    """
    if candidate is None or not math.isfinite(candidate):
        return Verdict(
            metric, candidate, baseline, threshold, None, False, f"the candidate has no federated validation {metric}"
        )
    if baseline is None or not math.isfinite(baseline):
        return Verdict(metric, candidate, baseline, threshold, None, True, "no baseline to compare with")
    regression = (baseline - candidate) if higher_is_better else (candidate - baseline)
    promote = regression <= threshold
    reason = (
        f"{metric} {candidate:.4g} vs baseline {baseline:.4g}: "
        f"{'regressed' if regression > 0 else 'improved'} by {abs(regression):.4g}"
        f"{' > ' if not promote else ' <= ' if regression > 0 else ', threshold '}{threshold:g}"
    )
    return Verdict(metric, candidate, baseline, threshold, regression, promote, reason)


def canary_of(gateways: list[str], share: float) -> list[str]:
    """The first ``ceil(share * n)`` gateways in id order (at least one; all when share >= 1).

    Examples
    --------
    >>> canary_of(["gw-3", "gw-1", "gw-2", "gw-4"], 0.25)
    ['gw-1']
    """
    if not 0 < share <= 1:
        raise ValueError(f"canary_share must lie in (0, 1], got {share}")
    ordered = sorted(gateways)
    return ordered[: max(1, math.ceil(share * len(ordered)))] if ordered else []


@dataclass(frozen=True)
class LiveCheck:
    """The live check of one canary gateway: ``windows`` live predictions of the candidate were
    judged, with mean confidence ``after``; ``before`` is the mean confidence of as many of the
    gateway's newest predictions with the version it ran before (``None``: it reported too few),
    ``drop = before - after``; ``halt`` whether this gateway halts the rollout, and why."""

    gateway: str
    windows: int
    before: float | None
    after: float | None
    drop: float | None
    halt: bool
    reason: str
    before_model: str | None = None  # the version it ran before (MODEL:vN), if any


@dataclass(frozen=True)
class CanaryCheck:
    """The canary's live check as its promotion records it: the rule (``windows`` live predictions
    per canary gateway within ``observe_s`` seconds, mean confidence at most ``max_drop`` below the
    version's before) and what came of it: per gateway its :class:`LiveCheck` after
    ``observed_s`` seconds; or ``skipped`` (why no check applies: a regressor passes without one)
    or ``halt`` (why the check could not run: that halts the rollout).

    Examples
    --------
    >>> ok = LiveCheck("gw-1", 2, 0.8, 0.79, 0.01, False, "gw-1: fine")
    >>> check = CanaryCheck(2, 60.0, 0.05, observed_s=3.0, gateways={"gw-1": ok})
    >>> check.halted(), check.passed()
    ('', '; gw-1: fine')
    >>> CanaryCheck(2, 60.0, 0.05, halt="interrupted").halted()
    'interrupted'
    """

    windows: int
    observe_s: float
    max_drop: float
    metric: str = "live mean confidence"
    observed_s: float | None = None
    gateways: dict[str, LiveCheck] = field(default_factory=dict)
    skipped: str = ""
    halt: str = ""

    def halted(self) -> str:
        """Why the rollout halts ("" if it goes on): the halting gateways' reasons, else ``halt``."""
        return "; ".join(c.reason for c in self.gateways.values() if c.halt) or self.halt

    def passed(self) -> str:
        """What the promotion's detail adds when the check passed: each gateway's reason, and why
        no check ran if it was skipped."""
        text = "".join(f"; {c.reason}" for c in self.gateways.values() if not c.halt)
        return text + (f"; no live check: {self.skipped}" if self.skipped else "")

    def to_json(self) -> dict[str, Any]:
        """The record's JSON: the rule's numbers, and only the outcome fields that apply."""
        data: dict[str, Any] = {
            "metric": self.metric,
            "windows": self.windows,
            "observe_s": self.observe_s,
            "max_drop": self.max_drop,
        }
        if self.observed_s is not None:
            data["observed_s"] = self.observed_s
        if self.gateways:
            data["gateways"] = {g: asdict(c) for g, c in self.gateways.items()}
        data.update({k: v for k, v in (("skipped", self.skipped), ("halt", self.halt)) if v})
        return data


def judge_live(gateway: str, before: ArrayLike, after: ArrayLike, *, min_windows: int, max_drop: float) -> LiveCheck:
    """Halt unless the canary ``gateway`` reported at least ``min_windows`` live predictions of
    the candidate (``after``: their confidences, the predicted class's probability, oldest
    first) and the mean confidence of the first ``min_windows`` of them is at most ``max_drop``
    below that of the newest ``min_windows`` predictions of the version it ran before
    (``before``, oldest first). With fewer than ``min_windows`` of those there is nothing to
    compare with, and the candidate passes on its count alone.

    Confidence needs no labels, so it is there minutes after the deployment; it falls when the
    live windows lie far from what the model was trained on, and an overconfident model that
    is wrong passes it -- which is why the canary is also judged on its held-out score.

    Examples
    --------
    >>> check = judge_live("gw-1", [0.9, 0.8, 0.9, 0.8], [0.6, 0.7, 0.9], min_windows=2, max_drop=0.1)
    >>> check.halt, round(check.drop, 4)
    (True, 0.2)
    >>> check.reason
    'gw-1: live mean confidence 0.65 over 2 windows vs 0.85 before: dropped by 0.2 > 0.1'
    >>> judge_live("gw-2", [], [0.6], min_windows=2, max_drop=0.1).reason
    'gw-2: 1 live prediction of the candidate, fewer than the 2 the check needs'
    """
    if min_windows < 1:
        raise ValueError(f"min_windows must be >= 1, got {min_windows}")
    before, after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    mean_before = float(before[-min_windows:].mean()) if before.size >= min_windows else None
    if after.size < min_windows:
        return LiveCheck(
            gateway,
            int(after.size),
            mean_before,
            None,
            None,
            True,
            f"{gateway}: {after.size} live prediction{'s' if after.size != 1 else ''} of the candidate, "
            f"fewer than the {min_windows} the check needs",
        )
    mean_after = float(after[:min_windows].mean())
    if mean_before is None:
        return LiveCheck(
            gateway,
            min_windows,
            None,
            mean_after,
            None,
            False,
            f"{gateway}: live mean confidence {mean_after:.3g} over {min_windows} windows; no live "
            f"baseline ({before.size} predictions of the version before)",
        )
    drop = mean_before - mean_after
    halt = drop > max_drop
    return LiveCheck(
        gateway,
        min_windows,
        mean_before,
        mean_after,
        drop,
        halt,
        f"{gateway}: live mean confidence {mean_after:.3g} over {min_windows} windows vs "
        f"{mean_before:.3g} before: {'dropped' if drop > 0 else 'rose'} by {abs(drop):.3g}"
        f"{' > ' if halt else ' <= ' if drop > 0 else ', limit '}{max_drop:g}",
    )
