"""``wheelfed server``'s settings: file < environment < command line, and one clear line for a
misspelt or mistyped setting; ``--check`` against a real broker; SIGTERM ends the server
gracefully."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aggregator.server.config import ServerConfig
from tests.conftest import PASSWORDS
from tests.server.server_support import REPO


def test_file_then_environment_then_options(tmp_path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(
        'registry = "file.db"\nhttp_port = 9000\nmqtt_host = "broker.lan"\n'
        'operator_tokens = ["a", "b"]\ndeadline_s = 30\n'
    )
    env = {"WHEELFED_HTTP_PORT": "9100", "WHEELFED_READ_TOKENS": "r1, r2", "WHEELFED_MQTT_PASSWORD": "pw"}
    config = ServerConfig.load(path, environ=env, registry="option.db", mqtt_host=None)
    assert (config.registry, config.http_port, config.mqtt_host, config.deadline_s) == (
        "option.db",
        9100,
        "broker.lan",
        30.0,
    )
    assert config.operator_tokens == ("a", "b") and config.read_tokens == ("r1", "r2")
    assert config.mqtt_password == "pw" and "mqtt_password" not in config.public()
    assert ServerConfig.load(environ={}) == ServerConfig()
    assert ServerConfig().local_baseline
    path.write_text("local_baseline = false\n")
    assert not ServerConfig.load(path, environ={}).local_baseline
    assert ServerConfig.load(path, environ={"WHEELFED_LOCAL_BASELINE": "yes"}).local_baseline


@pytest.mark.parametrize(
    "text, env, message",
    [
        ("http_prot = 1\n", {}, "http_prot: unknown setting"),
        ('http_port = "80"\n', {}, "http_port: expected int"),
        ("http_port = 70000\n", {}, "http_port must be a TCP port"),
        ("operator_tokens = [1]\n", {}, "operator_tokens: expected a list of strings"),
        ("registry = \n", {}, "not valid TOML"),
        ("", {"WHEELFED_MIN_FRACTION": "2"}, "min_fraction must lie in (0, 1]"),
        ("", {"WHEELFED_DEADLINE_S": "soon"}, "$WHEELFED_DEADLINE_S"),
        ('local_baseline = "no"\n', {}, "local_baseline: expected true or false"),
        ("", {"WHEELFED_LOCAL_BASELINE": "maybe"}, "$WHEELFED_LOCAL_BASELINE: expected true or false"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(tmp_path, text, env, message) -> None:
    path = tmp_path / "server.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        ServerConfig.load(path, environ=env)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def wheelfed(*argv: str, env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edge_client.cli", *argv],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **env},
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.mosquitto
def test_check_opens_the_registry_and_the_broker_then_exits(tmp_path, mosquitto) -> None:
    env = {"WHEELFED_MQTT_PORT": str(mosquitto.port), "WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]}
    done = wheelfed("server", "--registry", "s.db", "--http-port", "0", "--check", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        "registry s.db: 0 model versions" in done.stdout
        and f"broker 127.0.0.1:{mosquitto.port}: connected" in done.stdout
        and (tmp_path / "s.db").is_file()
    )
    wrong = wheelfed("server", "--check", env={**env, "WHEELFED_MQTT_PASSWORD": "nope"}, cwd=tmp_path)
    last = wrong.stderr.strip().splitlines()[-1]  # after the transport's log lines: one line, no traceback
    assert wrong.returncode == 1 and last.startswith("wheelfed server: ") and "Not authorized" in last
    assert "Traceback" not in wrong.stderr


@pytest.mark.slow
@pytest.mark.mosquitto
def test_sigterm_stops_the_server_gracefully(tmp_path, mosquitto) -> None:
    from tests.server.server_support import ServerProcess

    server = ServerProcess(str(tmp_path / "s.db"), mosquitto.port, PASSWORDS["aggregator"], tmp_path / "log")
    assert server.get("/api/health")["broker_connected"] is True
    code = server.terminate()
    assert code == 143, code  # 128 + SIGTERM, after the graceful shutdown
    output = "".join(server.lines)
    assert "server stopped" in output and "wheelfed server: stopped" in output and "Traceback" not in output
