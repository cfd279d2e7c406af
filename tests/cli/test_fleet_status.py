"""``aggregator.fleet_status``: status messages folded into one row per gateway (no broker)."""

from __future__ import annotations

from shared.protocol.envelope import Envelope, Message
from shared.protocol.messages import Ping, Status
from shared.protocol.topics import TopicLayout

from aggregator.fleet_status import GatewayRow, fold_statuses, format_age

LAYOUT = TopicLayout()


def status(sender: str, body: object, ts: float) -> Message:
    return Message(Envelope(type="status" if isinstance(body, Status) else "ping", sender=sender, ts=ts), body)


ONLINE = Status(
    online=True,
    active_model="activity:v2",
    n_windows=161,
    n_labelled=160,
    detail={
        "link": "up",
        "engine": "numpy",
        "predicted": "42",
        "last_prediction": "push",
        "alerts": "1",
        "labels": "push=100,sit=60",
        "feature_set": "wheelfed-tifex-2+ab12",
    },
)


def test_the_newest_status_of_each_gateway_is_its_row() -> None:
    received = [
        (LAYOUT.status("gw-2"), status("gw-2", ONLINE, 100.0)),
        (LAYOUT.status("gw-1"), status("gw-1", Status(online=True), 90.0)),
        (LAYOUT.status("gw-1"), status("gw-1", ONLINE, 95.0)),
        (LAYOUT.status("gw-2"), status("gw-2", Status(online=False), 120.0)),  # its last will, or a clean stop
    ]
    rows = fold_statuses(received, LAYOUT)
    assert [r.gateway for r in rows] == ["gw-1", "gw-2"]
    assert rows[0] == GatewayRow(
        "gw-1",
        True,
        95.0,
        "activity:v2",
        161,
        160,
        "up",
        "numpy",
        42,
        1,
        "push",
        "",
        {"push": 100, "sit": 60},
        "wheelfed-tifex-2+ab12",
    )
    # an offline status carries no model or counters: unknown, not zero
    assert rows[1] == GatewayRow("gw-2", False, 120.0, None, None, None, None, None, None, None, None, "")


def test_the_topic_names_the_gateway_not_the_sender_field() -> None:
    """The broker's ACL confines a gateway to its own status topic; the envelope's sender is
    whatever the gateway wrote."""
    rows = fold_statuses([(LAYOUT.status("gw-1"), status("gw-9", ONLINE, 1.0))], LAYOUT)
    assert [r.gateway for r in rows] == ["gw-1"]


def test_other_topics_bodies_and_the_aggregator_are_left_out() -> None:
    received = [
        (LAYOUT.outbox("gw-1"), status("gw-1", ONLINE, 1.0)),
        (LAYOUT.status("gw-2"), status("gw-2", Ping(), 1.0)),
        (LAYOUT.status("aggregator"), status("aggregator", Status(online=True), 1.0)),
        (LAYOUT.fleet("models"), status("aggregator", ONLINE, 1.0)),
    ]
    assert fold_statuses(received, LAYOUT) == []


def test_no_model_odd_counters_and_a_model_error() -> None:
    body = Status(
        online=True,
        detail={
            "engine": "-",
            "predicted": "many",
            "last_prediction": "-",
            "model_error": "active.bundle: Bad signature",
        },
    )
    (row,) = fold_statuses([(LAYOUT.status("gw-1"), status("gw-1", body, 5.0))], LAYOUT)
    assert row.model == "" and row.engine is None and row.predicted is None and row.alerts is None
    assert row.link is None  # a gateway without a sensor link says nothing about one
    assert row.last_prediction is None and row.model_error == "active.bundle: Bad signature"


def test_gateways_sort_by_number_not_by_text() -> None:
    received = [(LAYOUT.status(g), status(g, ONLINE, 1.0)) for g in ("gw-10", "gw-2", "gw-1", "lab")]
    assert [r.gateway for r in fold_statuses(received, LAYOUT)] == ["gw-1", "gw-2", "gw-10", "lab"]


def test_json_and_age() -> None:
    (row,) = fold_statuses([(LAYOUT.status("gw-1"), status("gw-1", ONLINE, 100.0))], LAYOUT)
    data = row.to_json(now=112.5)
    assert data["gateway"] == "gw-1" and data["online"] is True and data["age_s"] == 12.5
    assert data["last_seen"] == 100.0 and data["labelled"] == 160 and data["model"] == "activity:v2"
    assert row.age_s(now=50.0) == 0.0  # the gateway's clock runs ahead: not "in the future"
    assert [format_age(s) for s in (0.2, 12.4, 300, 7300, 3 * 86400)] == ["now", "12 s", "5 min", "2 h", "3 d"]


def test_garbled_label_counts_are_unknown_not_wrong() -> None:
    garbled = Status(online=True, detail={"labels": "push=1,sit"})
    empty = Status(online=True, detail={"labels": ""})
    rows = fold_statuses(
        [(LAYOUT.status("gw-1"), status("gw-1", garbled, 1.0)), (LAYOUT.status("gw-2"), status("gw-2", empty, 1.0))],
        LAYOUT,
    )
    assert rows[0].labels is None and rows[1].labels == {}
