"""The demo's live terminal view: per-gateway status, training progress, what just happened.

On a terminal it redraws one screen twice a second (ANSI); otherwise (CI, a pipe) it prints each
event once as a line, so a log of the run reads as a story.
"""

from __future__ import annotations

import threading
import time
from functools import singledispatch
from typing import TYPE_CHECKING, TextIO

from .decisions import gateways_phrase
from .events import (
    LOCAL_ONLY,
    DemoEvent,
    Evaluation,
    FleetDeployed,
    GatewaysSatOut,
    Note,
    Phase,
    Progress,
    ReplayFailed,
    StepDecided,
    TrainingFailed,
    TreeDeployed,
)
from .report import store_snapshot

if TYPE_CHECKING:
    from .orchestrator import Demo

__all__ = ["LiveView"]

BAR = 24


def bar(fraction: float, width: int = BAR) -> str:
    filled = int(round(max(0.0, min(1.0, fraction)) * width))
    return "#" * filled + "." * (width - filled)


@singledispatch
def describe(event: DemoEvent) -> str | None:
    """The line(s) for an event worth telling (None: not on its own line)."""
    return None


@describe.register
def _note(event: Note) -> str:
    return event.text


@describe.register
def _phase(event: Phase) -> str:
    return f"aggregator: {event.name}"


@describe.register
def _progress(event: Progress) -> str:
    metrics = " ".join(f"{k}={v:.4g}" for k, v in event.metrics.items())
    return (
        f"  {event.job}: {event.algorithm} {event.step}/{event.total}, "
        f"{event.answered}/{event.selected} gateways {metrics} ({event.elapsed_s:.1f} s)"
    )


@describe.register
def _evaluation(event: Evaluation) -> str:
    if event.model == LOCAL_ONLY:
        return _local_only(event.per_client)
    m, counts = event.metrics, event.class_counts
    chance = f"; chance (majority-class rate) {max(counts) / sum(counts):.3f}" if sum(counts) else ""
    line = (
        f"  held-out evaluation of {event.model}: accuracy {m.get('accuracy', float('nan')):.3f}, "
        f"macro-F1 {m.get('macro_f1', float('nan')):.3f} on {m.get('n', 0):.0f} windows of "
        f"{gateways_phrase(len(event.per_client))}{chance}"
    )
    return line + (f"\n    {event.note}" if event.note else "")


def _local_only(per: dict[str, dict[str, float]]) -> str:
    """The local-only models' range and pooled accuracy, each on its gateway's held-out windows."""
    if not per:
        return "  local-only models: none could be trained"
    accs = [m.get("accuracy", float("nan")) for m in per.values()]
    n = sum(m.get("n", 0) for m in per.values())
    correct = sum(round(m.get("accuracy", 0) * m.get("n", 0)) for m in per.values())
    pooled = correct / n if n else float("nan")
    return (
        f"  local-only models: accuracy {min(accs):.3f} .. {max(accs):.3f} on their own held-out windows "
        f"({pooled:.3f} pooled over {n:.0f} windows of {gateways_phrase(len(per))})"
    )


@describe.register
def _training_failed(event: TrainingFailed) -> str:
    return f"  {event.model}: training failed -- {event.message}"


@describe.register
def _sat_out(event: GatewaysSatOut) -> str:
    return "\n".join(f"  {event.job}: {client} sat out -- {why}" for client, why in event.gateways.items())


@describe.register
def _decided(event: StepDecided) -> str:
    d = event.decision
    outcome = f"deploy {d.deploy}" if d.deploy else "nothing deployed"
    return f"aggregator decides ({d.step}): {outcome} -- {d.reason}"


@describe.register
def _deployed(event: FleetDeployed) -> str:
    return (
        f"aggregator: {event.model} active on {len(event.active)} gateways"
        f"{', rejected by ' + str(event.rejected) if event.rejected else ''}"
        f"{', no answer from ' + ', '.join(event.pending) if event.pending else ''}"
    )


@describe.register
def _tree_deployed(event: TreeDeployed) -> str:
    state = (
        "active"
        if event.gateway in event.active
        else f"NOT active (rejected: {event.rejected or '-'}, no answer: {', '.join(event.pending) or '-'})"
    )
    return f"aggregator: {event.model} {state} on {event.gateway} alone"


@describe.register
def _replay_failed(event: ReplayFailed) -> str:
    return f"ERROR {event.client}: {event.message}"


class LiveView:
    def __init__(self, demo: Demo, out: TextIO) -> None:
        self.demo = demo
        self.out = out
        self.tty = hasattr(out, "isatty") and out.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="live-view")
        self._printed = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._lines()  # whatever happened last

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            if self.tty:
                self._screen()
            else:
                self._lines()

    def _lines(self) -> None:
        events = self.demo.events
        while self._printed < len(events):
            line = describe(events[self._printed])
            self._printed += 1
            if line:
                elapsed = time.monotonic() - self.demo.started
                self.out.write(f"[{elapsed:6.1f} s] {line}\n".replace("\n", "\n" + " " * 11, line.count("\n")))
        self.out.flush()

    def _screen(self) -> None:
        demo = self.demo
        rows = [
            f"WheelFed fleet demo -- {len(demo.gateways)} gateways, broker {getattr(demo, 'broker_name', '?')}, "
            f"{time.monotonic() - demo.started:.0f} s (Ctrl-C stops everything)",
            "",
        ]
        rows.append(
            f"{'gateway':8} {'link':7} {'session':{BAR + 7}} {'windows':>7} {'labels':>6} "
            f"{'last step':9} {'model':14} {'predictions':>11}  last prediction"
        )
        for client, gw in sorted(demo.gateways.items()):
            snap = store_snapshot(demo.run_dir / f"{client}.db")
            status = demo.gateway_status.get(client, {})
            link = "online" if status.get("online") else "offline"
            fraction = snap.newest_end_s / gw.session.duration_s if gw.session.duration_s else 0.0
            step = "sat out" if client in demo.sat_out else "took part" if demo.held_out else "-"
            rows.append(
                f"{client:8} {link:7} {bar(fraction)} {fraction:4.0%}  {snap.windows:7d} {snap.labelled:6d} "
                f"{step:9} {status.get('model') or '-':14} {snap.predictions:11d}  {snap.last_prediction}"
            )
        sat_out = [f"{c} sat out the last step: {why}" for c, why in sorted(demo.sat_out.items())]
        rows += ["", *sat_out]
        lines = [part for line in (describe(e) for e in demo.events) if line for part in line.split("\n")]
        rows += lines[-14:]
        self.out.write("\x1b[H\x1b[2J" + "\n".join(rows) + "\n")
        self.out.flush()
