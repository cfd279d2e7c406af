"""``wheelfed server`` as a real process for the server's end-to-end tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from aggregator.broker.mosquitto import find_free_port

REPO = Path(__file__).resolve().parents[2]


class ServerProcess:
    """``wheelfed server`` on a free HTTP port against a broker port, its output collected."""

    def __init__(self, registry: str, broker_port: int, password: str, log: Path, *extra: str) -> None:
        self.port = find_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "WHEELFED_MQTT_PASSWORD": password, "PYTHONPATH": str(REPO)}
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "edge_client.cli",
                "--log-level",
                "INFO",
                "server",
                "--registry",
                registry,
                "--http-port",
                str(self.port),
                "--port",
                str(broker_port),
                "--deadline",
                "30",
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._log = open(log, "a")
        threading.Thread(target=self._pump, daemon=True).start()
        self.wait_for(r"wheelfed server: dashboard http://")

    def _pump(self) -> None:
        for line in iter(self.process.stdout.readline, ""):
            self.lines.append(line)
            self._log.write(line)
            self._log.flush()

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := re.search(pattern, line):
                    return match
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}:\n{''.join(self.lines)}")
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} from the server within {timeout_s} s:\n{''.join(self.lines)}")

    def request(self, method: str, path: str, body: object | None = None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
                kind = response.headers.get("Content-Type", "")
                return response.status, json.loads(raw) if "json" in kind else raw
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def get(self, path: str) -> object:
        status, body = self.request("GET", path)
        assert status == 200, (path, status, body)
        return body

    def wait_job(self, job_id: str, condition, timeout_s: float = 240.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.get(f"/api/jobs/{job_id}")
            if condition(job):
                return job
            assert job["state"] not in ("failed", "cancelled"), job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} never got there: {job}\n{''.join(self.lines[-40:])}")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def terminate(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(60)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
            self._log.close()
