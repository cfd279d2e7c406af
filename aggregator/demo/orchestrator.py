"""``wheelfed demo``: a wheelchair fleet on real recorded sessions, end to end, in one command.

What runs (all real, nothing mocked): an MQTT broker (mosquitto, else the embedded one); one
``wheelfed gateway`` process per subject, each fed its recorded session through a pty (serial
framing, filtering, resampling, windows, features, labelled store); the aggregator process
(``aggregator.demo.aggregator_role``), which trains, evaluates, registers and deploys.

The timeline:

1. The sessions stream (fast) up to the end of their labelled start and are held there.
2. The aggregator trains FedSCS-XGB and FedForest over the fleet (under secure aggregation from
   3 gateways on; below that in the clear, and the demo says so), a local-only baseline, scores
   them federatedly on every gateway's held-out windows (the tail of its labelled part), and
   deploys the better federated model if it beats the local-only baseline and chance
   (``decisions``); every gateway then switches to live recognition. Otherwise nothing is
   deployed and the gateways keep recording without a model.
3. The streams go on (``--speed``); one gateway is killed and restarted midway: it loads its
   stored model (if any) and comes back; the carers' later labels arrive in the stream.
4. Periodic retraining with those labels (FedSCS-XGB continues boosting from the deployed model;
   with none deployed, both train afresh); the new version is deployed only if it beats the
   retrained local-only baseline and chance and does not score below the deployed model
   re-scored on the same, later held-out windows -- the summary says how those differ from
   the first ones (this process reads the stores to count them).
5. The summary: federated vs local-only vs centralized (pooled data, computed here for the
   report only), each decision and why, who sat out which step and why, bytes exchanged by
   step vs the raw samples, live predictions vs offline ones.

Everything started is stopped at the end, on Ctrl-C and on errors.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from firmware_bridge.replay import Pace, open_pty, replay
from shared.protocol.topics import AGGREGATOR_ID
from shared.signing import SigningKey

from ..broker import BrokerUser
from ..broker.mosquitto import die_with_parent
from ..fleet import PASSWORD_ENV
from ..smoke import start_broker
from .aggregator_role import FIRST_TRAINING, RETRAINING, RoleConfig
from .decisions import rescoring_note, secure_aggregation_plan
from .report import DemoReport, build_report, held_out_keys, store_snapshot
from .sessions import Session, prepare_sessions
from .view import LiveView

__all__ = ["DemoConfig", "run_demo"]


@dataclass(frozen=True)
class DemoConfig:
    subjects: int = 10
    speed: float = 20.0  # live part of the replay, x real time
    labelled_speed: float = 0.0  # the labelled start: as fast as possible
    rounds: int = 10
    retrain_rounds: int = 5
    trees: int = 30
    algorithm: Literal["both", "fedscs-xgb", "fedforest"] = "both"
    labelled_fraction: float = 0.4
    later_fraction: float = 0.2
    holdout_fraction: float = 0.25
    kill_gateway: bool = True
    keep_running: bool = False
    broker: Literal["auto", "mosquitto", "embedded"] = "auto"
    run_dir: Path | None = None
    report_path: Path | None = None


@dataclass
class _Gateway:
    session: Session
    pace: Pace
    master_fd: int
    slave: str
    process: subprocess.Popen | None = None
    replay_thread: threading.Thread | None = None
    replay_done: bool = False
    restarts: int = 0


class Demo:
    def __init__(self, config: DemoConfig, out: TextIO) -> None:
        self.config = config
        self.out = out
        self.stack = ExitStack()
        self.stop_event = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.events_lock = threading.Condition()
        self.gateways: dict[str, _Gateway] = {}
        self.gateway_status: dict[str, dict[str, Any]] = {}  # latest retained status per gateway
        self.sat_out: dict[str, str] = {}  # gateway -> why it sat out the latest step it missed (live view)
        # per training step: each gateway's held-out windows as (session, end) when the step started
        self.held_out: dict[str, dict[str, frozenset[tuple[str, int]]]] = {}
        self.started = time.monotonic()

    # -- setup -----------------------------------------------------------------------------------

    def prepare(self) -> None:
        cfg = self.config
        self.run_dir = Path(cfg.run_dir or self.stack.enter_context(tempfile.TemporaryDirectory(prefix="wheelfed-demo-")))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.say("importing the bundled recordings (seglearn smartwatch: 10 subjects, 7 shoulder exercises)")
        self.sessions = prepare_sessions(self.run_dir / "recordings", cfg.subjects, cfg.labelled_fraction,
                                         cfg.later_fraction)
        key = SigningKey.generate()
        key.save(self.run_dir / "aggregator.key")
        key.verify_key.save(self.run_dir / "aggregator.pub")
        self.passwords = {c: secrets.token_urlsafe(12) for c in [AGGREGATOR_ID, *(s.client_id for s in self.sessions)]}
        broker, self.protocol, self.broker_name = start_broker(cfg.broker, self.run_dir,
                                                               [BrokerUser(n, p) for n, p in self.passwords.items()])
        self.stack.callback(broker.stop)
        self.port = broker.port
        self.say(f"broker: {self.broker_name} on port {self.port}")

    def _gateway_command(self, gw: _Gateway) -> list[str]:
        s = gw.session
        return [sys.executable, "-m", "edge_client.cli", "gateway", "--client-id", s.client_id, "--serial", gw.slave,
                "--store", str(self.run_dir / f"{s.client_id}.db"), "--session", s.recording.metadata.session_id,
                "--port", str(self.port), "--protocol", str(self.protocol),
                "--holdout-fraction", str(self.config.holdout_fraction), "--trust", str(self.run_dir / "aggregator.pub"),
                "--model-dir", str(self.run_dir / f"{s.client_id}-models"), "--publish-every", "1",
                "--stats-every", "0"]

    def start_gateway(self, gw: _Gateway) -> None:
        log = open(self.run_dir / f"{gw.session.client_id}.log", "ab")
        env = dict(os.environ, **{PASSWORD_ENV: self.passwords[gw.session.client_id]})
        gw.process = subprocess.Popen(self._gateway_command(gw), env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, preexec_fn=die_with_parent())
        log.close()

    def start_fleet(self) -> None:
        cfg = self.config
        for s in self.sessions:
            master, slave = open_pty()
            gw = _Gateway(s, Pace(cfg.labelled_speed, s.first_labels_end_s), master, slave)
            self.gateways[s.client_id] = gw
            self.start_gateway(gw)
            gw.replay_thread = threading.Thread(target=self._replay, args=(gw,), daemon=True,
                                                name=f"replay-{s.client_id}")
            gw.replay_thread.start()
        self.stack.callback(self._stop_fleet)
        self.say(f"{len(self.gateways)} gateway processes started, their sessions replaying through ptys")

    def _replay(self, gw: _Gateway) -> None:
        try:
            replay(gw.session.recording, gw.master_fd, gw.pace, wait_for_reader_s=60, stop_event=self.stop_event,
                   stall_timeout_s=60, progress_every_s=3600, descriptors_every_s=5.0)
        except Exception as exc:  # noqa: BLE001 - shown in the view; the demo goes on with the others
            self.record({"event": "replay_error", "client": gw.session.client_id, "message": str(exc)})
        gw.replay_done = True

    def start_aggregator(self) -> None:
        cfg = self.config
        self.algorithms = ["fedscs-xgb", "fedforest"] if cfg.algorithm == "both" else [cfg.algorithm]
        self.secure_plan = secure_aggregation_plan(len(self.gateways))
        if not self.secure_plan.on:
            self.say(f"NOTE: {self.secure_plan.reason}")
        role = RoleConfig(host="127.0.0.1", port=self.port, protocol=self.protocol,
                          password=self.passwords[AGGREGATOR_ID], clients=sorted(self.gateways),
                          registry=str(self.run_dir / "registry.db"), signing_key=str(self.run_dir / "aggregator.key"),
                          feature_set_version=self.feature_set_version, classes=self.classes,
                          algorithms=self.algorithms, rounds=cfg.rounds,
                          retrain_rounds=cfg.retrain_rounds, trees=cfg.trees,
                          secure_aggregation=self.secure_plan.on)
        path = self.run_dir / "aggregator.json"
        path.write_text(json.dumps(asdict(role)))
        path.chmod(0o600)
        log = open(self.run_dir / "aggregator.log", "ab")
        self.aggregator = subprocess.Popen([sys.executable, "-m", "aggregator.demo.aggregator_role", str(path)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                           start_new_session=True, preexec_fn=die_with_parent())
        log.close()
        self.stack.callback(self._stop_aggregator)
        threading.Thread(target=self._read_events, daemon=True, name="aggregator-events").start()
        self.wait_event(lambda e: e["event"] in ("ready", "error"), 60, "the aggregator process to start")

    def _read_events(self) -> None:
        for line in self.aggregator.stdout:
            try:
                self.record(json.loads(line))
            except json.JSONDecodeError:
                continue

    # -- events ----------------------------------------------------------------------------------

    def record(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "evaluation" and event.get("rescored"):
            event["note"] = self._rescoring_note(event)
        with self.events_lock:
            self.events.append(event)
            if kind == "gateway":
                self.gateway_status[event["client"]] = event
            elif kind == "sat_out":
                self.sat_out.update(event["gateways"])
            self.events_lock.notify_all()
        if event.get("event") == "error":
            self.say(f"aggregator error: {event.get('message')}")

    def wait_event(self, predicate, timeout_s: float, what: str, start: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self.events_lock:
            while True:
                for event in self.events[start:]:
                    if predicate(event):
                        if event["event"] == "error":
                            raise RuntimeError(f"waiting for {what}: {event['message']}")
                        return event
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.stop_event.is_set():
                    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
                self.events_lock.wait(min(remaining, 0.5))

    def command(self, cmd: str) -> int:
        """Send a command to the aggregator process; returns the event index it starts after."""
        with self.events_lock:
            start = len(self.events)
        self.aggregator.stdin.write(json.dumps({"cmd": cmd}) + "\n")
        self.aggregator.stdin.flush()
        return start

    def say(self, text: str) -> None:
        self.record({"event": "note", "text": text, "t": time.time()})

    def _rescoring_note(self, event: dict[str, Any]) -> str:
        """Why the deployed model's new score differs: on which windows. How many of the first
        held-out windows are still held out is counted in the stores only when those counts
        match the windows the gateways actually scored (else it is left unsaid)."""
        first = {c: int(n) for c, n in event["first_windows"].items()}
        now = {c: int(m.get("n", 0)) for c, m in event["per_client"].items()}
        before, after = self.held_out.get(FIRST_TRAINING, {}), self.held_out.get(RETRAINING, {})
        measured = (all(len(before.get(c, ())) == n for c, n in first.items())
                    and all(len(after.get(c, ())) == n for c, n in now.items()))
        still = sum(len(before[c] & after.get(c, frozenset())) for c in first) if measured else None
        return rescoring_note(first, now, still_held_out=still, holdout_fraction=self.config.holdout_fraction)

    def _measure_held_out(self, step: str) -> None:
        self.held_out[step] = {c: held_out_keys(self.run_dir / f"{c}.db", self.feature_set_version,
                                                self.config.holdout_fraction) for c in self.gateways}

    def _train_step(self, step: str, command: str) -> None:
        """One training step: the held-out windows counted, the aggregator told, its decision
        told (the view prints why)."""
        self._measure_held_out(step)
        self.sat_out.clear()
        start = self.command(command)
        self.wait_event(lambda e: e["event"] in ("idle", "error"), 1800, step, start)
        decision = next(e for e in self.events[start:] if e.get("event") == "decision")
        if decision["deploy"] is not None:
            self.say(f"live recognition with {self.deployed_label()} on every gateway that accepted it")
        elif decision["kept"]:
            self.say(f"the gateways keep {decision['kept']}")
        else:
            self.say("no model deployed: the gateways keep recording their streams, without live recognition")

    # -- the timeline ----------------------------------------------------------------------------

    def wait_until(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            if self.stop_event.wait(0.25):
                raise KeyboardInterrupt
        return None

    def run(self) -> DemoReport:
        cfg = self.config
        self.prepare()
        self.feature_set_version = self._feature_set_version()
        self.start_fleet()
        self.view = LiveView(self, self.out)
        self.stack.callback(self.view.stop)
        self.view.start()
        self.start_aggregator()
        self.say("streaming the labelled start of every session")
        self.wait_until(lambda: all(g.pace.held or g.replay_done for g in self.gateways.values()), 600,
                        "the labelled part of the sessions")
        self.wait_until(self._stores_settled, 120, "the gateways to store their windows")
        self._train_step(FIRST_TRAINING, "train")
        for gw in self.gateways.values():
            gw.pace.set(speed=cfg.speed, limit_s=gw.session.later_labels_end_s)
        if cfg.kill_gateway:
            self._kill_and_restart(sorted(self.gateways)[len(self.gateways) // 2])
        self.wait_until(lambda: all(g.pace.held or g.replay_done for g in self.gateways.values()), 900,
                        "the carers' later labels")
        self.wait_until(self._stores_settled, 120, "the gateways to store their windows")
        self._train_step(RETRAINING, "retrain")
        for gw in self.gateways.values():
            gw.pace.set(limit_s=float("inf"))
        self.say("live recognition of the rest of the sessions")
        self.wait_until(lambda: all(g.replay_done for g in self.gateways.values()), 900, "the end of the sessions")
        time.sleep(3.0)  # the last windows' predictions and batches
        report = build_report(self)
        if cfg.keep_running:
            self.say("--keep-running: the fleet keeps running; Ctrl-C stops everything")
            self.stop_event.wait()
        return report

    def _feature_set_version(self) -> str:
        from edge_client.features import feature_names
        from edge_client.processing import layout_version

        descriptors = [d for _, d in sorted(self.sessions[0].recording.descriptors.items())]
        self.n_features = len(feature_names(descriptors))
        self.classes = sorted({r.annotation.label for s in self.sessions for r in s.recording.label_records} |
                              {a.label for s in self.sessions for a in s.recording.annotations})
        return layout_version(descriptors)

    def deployed_label(self) -> str:
        """The model the aggregator deployed last ("" before the first deployment)."""
        deployed = [e for e in self.events if e.get("event") == "deployed"]
        return deployed[-1]["model"] if deployed else ""

    def _position_s(self, gw: _Gateway) -> float:
        """How far a gateway's session has been stored (its newest window's end, seconds)."""
        return store_snapshot(self.run_dir / f"{gw.session.client_id}.db").newest_end_s

    def _stores_settled(self) -> bool:
        counts = tuple(self._position_s(g) for g in self.gateways.values())
        time.sleep(1.5)
        return counts == tuple(self._position_s(g) for g in self.gateways.values())

    def _kill_and_restart(self, client: str) -> None:
        gw = self.gateways[client]
        position = self._position_s(gw)
        gw.pace.set(limit_s=position + 1.0)  # hold its stream while it is down (a real chair buffers too)
        time.sleep(1.0)
        self.say(f"killing {client} (SIGKILL) to show a gateway that crashes mid-run")
        gw.process.send_signal(signal.SIGKILL)
        gw.process.wait()
        time.sleep(2.0)
        self.start_gateway(gw)
        gw.restarts += 1
        stored = f"it loads its stored model ({self.deployed_label()})" if self.deployed_label() else \
            "no model to load (none deployed)"
        self.say(f"restarted {client}: {stored} and rejoins")
        gw.pace.set(limit_s=gw.session.later_labels_end_s)

    # -- teardown --------------------------------------------------------------------------------

    def _stop_fleet(self) -> None:
        self.stop_event.set()
        for gw in self.gateways.values():
            if gw.process is not None and gw.process.poll() is None:
                gw.process.send_signal(signal.SIGTERM)
        for gw in self.gateways.values():
            if gw.process is not None:
                try:
                    gw.process.wait(15)
                except subprocess.TimeoutExpired:
                    gw.process.kill()
                    gw.process.wait()
            if gw.replay_thread is not None:
                gw.replay_thread.join(5)
            os.close(gw.master_fd)

    def _stop_aggregator(self) -> None:
        try:
            if self.aggregator.poll() is None:
                self.aggregator.stdin.write(json.dumps({"cmd": "stop"}) + "\n")
                self.aggregator.stdin.flush()
                self.aggregator.wait(15)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            self.aggregator.kill()
            self.aggregator.wait()

    def close(self) -> None:
        self.stop_event.set()
        self.stack.close()


def run_demo(config: DemoConfig, out: TextIO = sys.stdout) -> DemoReport:
    demo = Demo(config, out)
    try:
        report = demo.run()
    finally:
        demo.close()
    report.print(out)
    if config.report_path:
        Path(config.report_path).write_text(json.dumps(report.to_dict(), indent=1, default=str))
    return report

