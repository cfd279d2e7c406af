"""Local alert rules over the live predictions: they run on the gateway, so they work offline.

Time is *sensor* time (window end, microseconds), not the wall clock, so a replayed session
raises the same alerts as the live one did. Two kinds of rule:

* ``absent``: raised when none of ``labels`` has been predicted for ``minutes`` (e.g. no
  pressure relief for 30 minutes); cleared when one is.
* ``sustained``: raised when the prediction has stayed within ``labels`` for ``minutes`` (e.g. an
  unchanged lying posture for two hours); cleared when it leaves them.

Rules come from a JSON file (``wheelfed gateway --alerts FILE``): a list of objects with the
fields of :class:`AlertRule`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from shared.protocol.messages.deployment import AlertEvent

__all__ = ["AlertEngine", "AlertRule", "AlertRulesError", "DEFAULT_RULES", "load_rules"]

US_PER_MINUTE = 60_000_000


@dataclass(frozen=True)
class AlertRule:
    name: str
    kind: Literal["absent", "sustained"]
    labels: tuple[str, ...]
    minutes: float
    message: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("absent", "sustained"):
            raise ValueError(f"alert rule {self.name!r}: kind must be 'absent' or 'sustained', got {self.kind!r}")
        if not self.labels or not self.minutes > 0:
            raise ValueError(f"alert rule {self.name!r}: needs labels and minutes > 0")
        object.__setattr__(self, "labels", tuple(self.labels))


#: Pressure relief every 30 minutes and no 2-hour unchanged lying posture (SCI care guidance);
#: the labels must be classes the deployed model predicts.
DEFAULT_RULES = (
    AlertRule("pressure_relief", "absent", ("pressure_relief",), 30.0, "no pressure relief for 30 minutes"),
    AlertRule("prolonged_lying", "sustained", ("lying",), 120.0, "unchanged lying posture for 2 hours"),
)


class AlertRulesError(ValueError):
    """A rules file that cannot be used; the message names the file, the rule and the problem."""


_TYPES = {"name": (str,), "kind": (str,), "labels": (list,), "minutes": (int, float), "message": (str,)}


def load_rules(path: str | Path) -> tuple[AlertRule, ...]:
    """The rules of a JSON file, checked field by field so that a mistake is one clear line
    (a gateway that started with a broken rule would stay silent when it should alert)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise AlertRulesError(f"{path} is not a JSON text file of alert rules") from None
    except json.JSONDecodeError as exc:
        raise AlertRulesError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(data, list):
        raise AlertRulesError(f"{path}: expected a JSON list of alert rules, got a JSON {type(data).__name__}")
    return tuple(_rule(path, i, item) for i, item in enumerate(data, 1))


def _rule(path: str | Path, number: int, item: object) -> AlertRule:
    where = f"{path}: rule {number}"
    if not isinstance(item, dict):
        raise AlertRulesError(f"{where} is not an object with the fields {', '.join(_TYPES)}")
    known = {f.name for f in fields(AlertRule)}
    unknown, missing = sorted(set(item) - known), sorted(known - set(item) - {"message"})
    if unknown or missing:
        problem = f"unknown field(s) {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise AlertRulesError(f"{where}: {problem} (fields: {', '.join(_TYPES)})")
    for name, value in item.items():
        if not isinstance(value, _TYPES[name]) or isinstance(value, bool):
            raise AlertRulesError(f"{where}: {name} must be a {_TYPES[name][0].__name__}, got {value!r}")
    if not all(isinstance(label, str) for label in item["labels"]):
        raise AlertRulesError(f"{where}: labels must be strings, got {item['labels']!r}")
    try:
        return AlertRule(**{**item, "labels": tuple(item["labels"])})
    except ValueError as exc:
        raise AlertRulesError(f"{path}: {exc}") from None


@dataclass
class _RuleState:
    since_us: int | None = None  # start of the current stretch (absent: last match; sustained: entry)
    raised: bool = False


@dataclass
class AlertEngine:
    """Feeds predictions (in time order) through the rules; returns raised/cleared events."""

    rules: tuple[AlertRule, ...] = DEFAULT_RULES
    _state: dict[str, _RuleState] = field(default_factory=dict)

    def reset(self) -> None:
        """Forget every stretch: the next prediction starts them afresh (a new sensor stream,
        whose time says nothing about the last one's)."""
        self._state.clear()

    def observe(self, end_us: int, label: str) -> list[AlertEvent]:
        events: list[AlertEvent] = []
        for rule in self.rules:
            state = self._state.setdefault(rule.name, _RuleState())
            matches = label in rule.labels
            limit = int(rule.minutes * US_PER_MINUTE)
            if rule.kind == "absent":
                if state.since_us is None or matches:
                    if matches and state.raised:
                        events.append(self._event(rule, "cleared", state.since_us or end_us, end_us, label))
                        state.raised = False
                    state.since_us = end_us if matches or state.since_us is None else state.since_us
                    continue
                if not state.raised and end_us - state.since_us >= limit:
                    state.raised = True
                    events.append(self._event(rule, "raised", state.since_us, end_us, label))
            else:
                if not matches:
                    if state.raised:
                        events.append(self._event(rule, "cleared", state.since_us or end_us, end_us, label))
                    state.since_us, state.raised = None, False
                    continue
                if state.since_us is None:
                    state.since_us = end_us
                if not state.raised and end_us - state.since_us >= limit:
                    state.raised = True
                    events.append(self._event(rule, "raised", state.since_us, end_us, label))
        return events

    @staticmethod
    def _event(
        rule: AlertRule, state: Literal["raised", "cleared"], since_us: int, now_us: int, label: str
    ) -> AlertEvent:
        minutes = (now_us - since_us) / US_PER_MINUTE
        message = rule.message or rule.name
        text = message if state == "raised" else f"cleared: {message}"
        return AlertEvent(
            rule.name,
            state,
            int(since_us),
            int(now_us),
            text,
            {"minutes": f"{minutes:.1f}", "label": label},
        )
