"""The demo's aggregator: ``wheelfed server`` as a child process, and the demo's REST client.

The demo starts the same server a clinic runs (``aggregator.server``): registry (SQLite in the
run directory), the aggregator's signing key, an operator token (the API and the dashboard ask
for it), a free HTTP port that the server prints with its dashboard URL. Everything the demo
trains, scores, deploys and schedules then goes through the REST API (:meth:`DemoServer.call`),
with the standard library's HTTP client.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from aggregator.broker.mosquitto import die_with_parent

from .epsilon import DEMO_EPSILON, lifetime_epsilon, private_trainings

#: The demo server's lifetime privacy cap per window: what the demo's private trainings on its
#: first labelled windows compose to at the demo's epsilon (``epsilon.DEMO_EPSILON``): FedSCS-XGB
#: and FedForest in the first training, then the retraining (``epsilon.private_trainings``),
#: rounded up to a whole epsilon. No room is left for a fourth private training on those windows.
DEMO_EPSILON_CAP = float(math.ceil(lifetime_epsilon(DEMO_EPSILON, private_trainings(2))))

__all__ = ["ApiError", "DemoServer"]

_URL = re.compile(r"dashboard (http://\S+?)/ ")


class ApiError(RuntimeError):
    """A 4xx/5xx answer of the server: the method, path, status and the server's ``detail``."""


class DemoServer:
    """``wheelfed server`` on a free port of this machine, for the demo's run directory.

    ``schedule_tick_s``: how often the server looks at its schedules (short in the demo, so that
    the retraining starts within seconds of its trigger)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        broker_port: int,
        protocol: int,
        password: str,
        token: str,
        deadline_s: float,
        min_fraction: float,
        schedule_tick_s: float = 1.0,
    ) -> None:
        self.token = token
        env = dict(
            os.environ,
            WHEELFED_MQTT_PASSWORD=password,
            WHEELFED_OPERATOR_TOKENS=token,
            WHEELFED_PRIVACY_EPSILON_CAP=str(DEMO_EPSILON_CAP),
            # the demo replays its sessions faster than real time: credit their windows as fast
            WHEELFED_MAX_WINDOWS_PER_S="1000000",
        )
        self.log_path = run_dir / "server.log"
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_client.cli",
                "server",
                "--registry",
                str(run_dir / "registry.db"),
                "--key",
                str(run_dir / "aggregator.key"),
                "--http-port",
                "0",
                "--port",
                str(broker_port),
                "--protocol",
                str(protocol),
                "--deadline",
                str(deadline_s),
                "--min-fraction",
                str(min_fraction),
                "--schedule-tick",
                str(schedule_tick_s),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        log.close()
        self.url = self._wait_for_url(60.0)

    def _wait_for_url(self, timeout_s: float) -> str:
        """The base URL from the server's first line (printed once its socket listens)."""
        found: list[str] = []
        done = threading.Event()
        stdout = self.process.stdout
        if stdout is None:
            raise RuntimeError("the server's output is not piped to the demo")

        def read() -> None:
            for line in stdout:
                if not found and (match := _URL.search(line)):
                    found.append(match.group(1))
                    done.set()
            done.set()

        threading.Thread(target=read, daemon=True, name="server-stdout").start()
        if not done.wait(timeout_s) or not found:
            self.stop()
            raise RuntimeError(f"wheelfed server did not start: see {self.log_path}")
        return found[0]

    @property
    def dashboard_url(self) -> str:
        """The dashboard with the token in the fragment (the page keeps it; the fragment never
        reaches the server's log)."""
        return f"{self.url}/#token={self.token}"

    def call(self, method: str, path: str, body: Any = None, *, timeout_s: float = 300.0) -> Any:
        """One API call as the operator; the decoded JSON answer (raises :class:`ApiError`)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
                return json.loads(raw) if "json" in response.headers.get("Content-Type", "") else raw
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ApiError(f"{method} {path}: HTTP {exc.code} {detail}") from None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, body)

    def stop(self) -> None:
        """SIGTERM (graceful: the server closes its broker connection and registry), then kill."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
