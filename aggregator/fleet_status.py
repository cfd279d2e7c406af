"""The fleet as the broker sees it: one row per gateway, folded from the retained status messages.

Every gateway publishes a retained ``Status`` on ``{prefix}/c/{id}/status`` when it connects,
after every model change and at every live-publish tick (``wheelfed gateway --publish-every``)
while it stays connected; it publishes ``online=False`` when it stops cleanly, and the broker
publishes the same as its last will when the connection drops. So whoever subscribes to
``c/+/status`` is handed, at once, the newest word of every gateway that ever connected --
that is all ``wheelfed fleet`` needs; it asks the gateways nothing.

What a row can say is what the status carries: online, the active model's label, windows
stored and labelled, and in ``detail`` the labelled windows per label, the feature set the
gateway produces, the serial link's state (gateways with a sensor link), the inference engine,
predictions and alerts so far, the last predicted label and the last model error. An offline
status carries none of that (the last will is composed when the gateway connects), so an
offline row has its time and nothing else -- unknown, not zero. A count in ``detail`` that is
not a decimal number up to ``MAX_WINDOW_COUNT`` is unknown too. ``seen`` is the envelope time
of the newest status, on the gateway's clock; for a last will that is when the gateway
connected, not when it vanished.

The gateway's id comes from the topic, not from the envelope's sender: the broker's ACL lets a
gateway publish on its own status topic only, while the sender field is whatever it wrote.

With a server, ``wheelfed fleet`` adds each gateway's privacy budget from ``/api/privacy``
(:class:`PrivacyCell`, :func:`privacy_cells`): the lifetime epsilon of its most-used window and
the most a new private job may still spend there, under the server's cap.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from shared.protocol.envelope import Message
from shared.protocol.messages import Status
from shared.protocol.messages.generic import MAX_WINDOW_COUNT
from shared.protocol.topics import TopicLayout

__all__ = ["GatewayRow", "PrivacyCell", "fold_statuses", "format_age", "privacy_cells"]


@dataclass(frozen=True)
class GatewayRow:
    """One gateway's newest status. ``None``: the status did not say (always so when offline)."""

    gateway: str
    online: bool
    seen: float  # envelope time of the newest status (the gateway's clock, seconds since the epoch)
    model: str | None  # "activity:v2"; "" when it runs no model
    windows: int | None  # windows in its store
    labelled: int | None  # of which labelled
    link: str | None  # the sensor link: "up", "down", "gone", "busy", ...; None without one
    engine: str | None
    predicted: int | None  # windows predicted live since it started
    alerts: int | None  # alerts raised since it started
    last_prediction: str | None
    model_error: str  # why the last pushed or stored model was refused; "" if none
    labels: dict[str, int] | None = None  # labelled windows per label
    feature_set: str | None = None  # the feature set its pipeline produces (what ``train`` negotiates)

    def age_s(self, now: float) -> float:
        """Seconds since ``seen``; 0 when the gateway's clock runs ahead of ours."""
        return max(0.0, now - self.seen)

    def to_json(self, now: float) -> dict[str, object]:
        """The row for ``--json``: ``seen`` as ``last_seen`` plus its ``age_s``, nulls for unknowns."""
        data: dict[str, object] = asdict(self)
        seen = data.pop("seen")
        return {
            "gateway": data.pop("gateway"),
            "online": data.pop("online"),
            "last_seen": seen,
            "age_s": round(self.age_s(now), 3),
            **data,
        }


def fold_statuses(received: Iterable[tuple[str, Message]], layout: TopicLayout) -> list[GatewayRow]:
    """``(topic, message)`` pairs in arrival order -> the newest row per gateway, sorted by id
    (``gw-2`` before ``gw-10``). Other topics, other bodies and the aggregator are left out."""
    rows: dict[str, GatewayRow] = {}
    for topic, message in received:
        gateway = layout.client_of(topic)
        if (
            gateway is None
            or gateway == layout.aggregator_id
            or topic != layout.status(gateway)
            or not isinstance(message.body, Status)
        ):
            continue
        rows[gateway] = _row(gateway, message.body, message.envelope.ts)
    return [rows[g] for g in sorted(rows, key=_natural)]


def _row(gateway: str, status: Status, seen: float) -> GatewayRow:
    detail = status.detail
    if not status.online:
        return GatewayRow(gateway, False, seen, None, None, None, None, None, None, None, None, "")
    return GatewayRow(
        gateway,
        True,
        seen,
        status.active_model,
        status.n_windows,
        status.n_labelled,
        _text(detail.get("link")),
        _text(detail.get("engine")),
        _count(detail.get("predicted")),
        _count(detail.get("alerts")),
        _text(detail.get("last_prediction")),
        detail.get("model_error", ""),
        _label_counts(detail.get("labels")),
        _text(detail.get("feature_set")),
    )


def _label_counts(value: str | None) -> dict[str, int] | None:
    """``"PEN=40,ROW=33"`` (the gateway's ``detail["labels"]``) as a dict; None if absent or garbled."""
    if value is None:
        return None
    counts = {}
    for item in filter(None, value.split(",")):
        label, _, n = item.rpartition("=")
        count = _count(n)
        if not label or count is None:
            return None
        counts[label] = count
    return counts


def _text(value: str | None) -> str | None:
    """The gateway writes "-" for "none yet"."""
    return None if value in (None, "", "-") else value


def _count(value: str | None) -> int | None:
    """A count the gateway wrote as decimal digits (at most :data:`MAX_WINDOW_COUNT`); None if
    absent, garbled or absurd -- never an exception, whatever the text's length."""
    if value is None or not value.isdecimal() or len(value) > _COUNT_DIGITS:
        return None
    count = int(value)
    return count if count <= MAX_WINDOW_COUNT else None


_COUNT_DIGITS = len(str(MAX_WINDOW_COUNT))


def _natural(gateway: str) -> list[object]:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", gateway)]


@dataclass(frozen=True)
class PrivacyCell:
    """One gateway's privacy budget as the server's ``/api/privacy`` gives it."""

    spent_epsilon: float  # lifetime epsilon of its most-used window
    remaining_epsilon: float  # the most a new private job may still spend there
    running: tuple[str, ...]  # private jobs running on it (they hold every window to come)

    def text(self) -> str:
        """``5.91/7.39`` (spent/left), ``+running`` while a private job runs there.

        Examples
        --------
        >>> PrivacyCell(5.912, 7.391, ()).text()
        '5.91/7.39'
        """
        return f"{self.spent_epsilon:.2f}/{self.remaining_epsilon:.2f}" + ("+running" if self.running else "")


def privacy_cells(privacy: dict) -> tuple[str, dict[str, PrivacyCell]]:
    """``/api/privacy``'s answer as the line that states the cap and one cell per gateway.

    Examples
    --------
    >>> line, cells = privacy_cells({"epsilon_cap": 10.0, "delta": 1e-6, "gateways": [
    ...     {"gateway": "gw-1", "spent_epsilon": 4.0, "remaining_epsilon": 8.75, "running": []}]})
    >>> cells["gw-1"].text()
    '4.00/8.75'
    """
    line = (
        f"privacy: cap epsilon {privacy['epsilon_cap']:g} per window over its lifetime (delta "
        f"{privacy['delta']:g}); EPSILON is the most-used window's lifetime epsilon / the most a new private "
        "job may still spend there"
    )
    return line, {
        g["gateway"]: PrivacyCell(float(g["spent_epsilon"]), float(g["remaining_epsilon"]), tuple(g["running"]))
        for g in privacy["gateways"]
    }


def format_age(seconds: float) -> str:
    """``12 s``, ``5 min``, ``2 h``, ``3 d``: how long ago, as an operator reads it."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s" if seconds >= 1 else "now"
