"""The gateway's config file (``edge_client/gateway_config.py``): every ``wheelfed gateway`` option
has a key, the file accepts exactly what the command line accepts, every problem is one line
naming the key, and the command line > environment > file > default precedence holds for
every combination of sources."""

from __future__ import annotations

import argparse
import itertools
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_client.cli import build_parser
from edge_client.cli.arguments import holdout_share, port_number, positive_int
from edge_client.cli.connection import settle_broker_port
from edge_client.cli.gateway import NOT_GIVEN, settings_of
from edge_client.gateway_config import SCHEMA, ConfigError, GatewaySettings, load_config, parse_config, store_problem
from shared.signing import SigningKey

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "deploy" / "gateway" / "gateway.toml"


def problems_of(text: str | bytes, base: Path = Path(".")) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as info:
        parse_config(text.encode() if isinstance(text, str) else text, base=base)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def gateway_parser() -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices["gateway"]  # type: ignore[union-attr]


def test_every_gateway_option_has_a_key_and_every_key_an_option() -> None:
    """Oracle: the command line's destinations. A new option without a key (or a key for an
    option that went away) fails here."""
    options = {a.dest for a in gateway_parser()._actions if a.option_strings} - {"help", "config", "check"}
    options = (options - {"no_broker"}) | {"broker"}
    keys = {spec.field for table in SCHEMA.values() for spec in table.values()}
    fields = set(GatewaySettings.__dataclass_fields__) - {"password_file"}  # the file's own: no password on a CLI
    assert keys - {"password_file"} == options == fields


def test_the_shipped_template_names_every_key_in_its_table() -> None:
    """An operator learns the keys from the template: each appears, set or commented out, under
    its own table (party_key_file, session and username were missing)."""
    tables = re.split(r"^\[(\w+)\]$", TEMPLATE.read_text(), flags=re.M)
    text = {"": tables[0], **dict(zip(tables[1::2], tables[2::2]))}
    for table, keys in SCHEMA.items():
        for key in keys:
            assert re.search(rf"^(# )?{key} = ", text[table], re.M), f"{table}.{key}"


def test_the_shipped_template_is_valid_and_says_what_it_means(tmp_path: Path) -> None:
    """deploy/gateway/gateway.toml as install.sh renders it, with the certificates in place."""
    config_dir, state = tmp_path / "etc" / "wheelfed", tmp_path / "var" / "lib" / "wheelfed"
    (config_dir / "certs").mkdir(parents=True)
    for name in ("ca.crt", "gw-1.crt", "gw-1.key"):
        (config_dir / "certs" / name).write_text("x")
    text = (
        TEMPLATE.read_text()
        .replace("@STATE@", str(state))
        .replace("@CONFIG@", str(config_dir))
        .replace("@CLIENT_ID@", "gw-1")
    )
    assert "@" not in text.replace("# ", "")
    (config_dir / "gateway.toml").write_text(text)
    got = GatewaySettings.resolve(load_config(config_dir / "gateway.toml"))
    assert got == GatewaySettings(
        client_id="gw-1",
        serial="/dev/wheelfed-sensor",
        baud=115200,
        store=state / "windows.db",
        model_dir=state / "models",
        trust=(),
        engine="auto",
        publish_every=10.0,
        stats_every=60.0,
        broker=True,
        host="broker.example.org",
        tls_ca=config_dir / "certs" / "ca.crt",
        tls_cert=config_dir / "certs" / "gw-1.crt",
        tls_key=config_dir / "certs" / "gw-1.key",
    )


def test_all_keys_read_with_relative_paths_from_the_files_folder(tmp_path: Path) -> None:
    key = SigningKey.generate().verify_key
    key.save(tmp_path / "a.pub")
    key.save(tmp_path / "b.pub")
    (tmp_path / "rules.json").write_text('[{"name": "x", "kind": "absent", "labels": ["PEN"], "minutes": 5}]')
    (tmp_path / "pw").write_text("secret\n")
    for name in ("ca.crt", "gw.crt", "gw.key"):
        (tmp_path / name).write_text("x")
    (tmp_path / "gw.toml").write_text("""
client_id = "gw-9"
session = "s1"
store = "data/w.db"
model_dir = "data/models"
trust = ["a.pub", "b.pub"]
engine = "numpy"
alerts = "rules.json"
holdout_fraction = 0.25
publish_every = 2
stats_every = 0
[serial]
device = "socket://127.0.0.1:5000"
baud = 57600
[retention]
max_windows = 1000
max_age_days = 1.5
[broker]
enabled = false
host = "b.example"
port = 18883
protocol = 4
username = "u"
password_file = "pw"
tls_ca = "ca.crt"
tls_cert = "gw.crt"
tls_key = "gw.key"
""")
    got = GatewaySettings.resolve(load_config(tmp_path / "gw.toml"))
    assert got == GatewaySettings(
        client_id="gw-9",
        session="s1",
        store=tmp_path / "data/w.db",
        model_dir=tmp_path / "data/models",
        trust=(tmp_path / "a.pub", tmp_path / "b.pub"),
        engine="numpy",
        alerts=tmp_path / "rules.json",
        holdout_fraction=0.25,
        publish_every=2,
        stats_every=0,
        serial="socket://127.0.0.1:5000",
        baud=57600,
        max_windows=1000,
        max_age_days=1.5,
        broker=False,
        host="b.example",
        port=18883,
        protocol=4,
        username="u",
        password_file=tmp_path / "pw",
        tls_ca=tmp_path / "ca.crt",
        tls_cert=tmp_path / "gw.crt",
        tls_key=tmp_path / "gw.key",
    )
    # a device path is relative to the file too (its presence is --check's business, not loading's)
    assert parse_config(b'[serial]\ndevice = "ttyX"\n', base=tmp_path).serial == str(tmp_path / "ttyX")
    assert parse_config(b"trust = []\n") == GatewaySettings()


@pytest.mark.parametrize(
    "text, line",
    [
        ("[serial]\nbuad = 9600", "serial.buad: unknown key (did you mean serial.baud?)"),
        ("max_windows = 5", "max_windows: unknown key (did you mean retention.max_windows?)"),
        ("[broker]\nmax-windows = 5", "broker.max-windows: unknown key (did you mean retention.max_windows?)"),
        ("client-id = 'gw-1'", "client-id: unknown key (did you mean client_id?)"),
        ("baud = 9600", "baud: unknown key (did you mean serial.baud?)"),
        ("[broker]\nhots = 'x'", "broker.hots: unknown key (did you mean broker.host?)"),
        ("[network]\nhost = 'x'", "network: unknown key"),
        ("colour = 'red'", "colour: unknown key"),
        ("serial = '/dev/ttyUSB0'", "serial: expected a table [serial] with device, baud, got a string"),
        ("[serial]\nbaud = 'fast'", "serial.baud: expected an integer, got a string ('fast')"),
        ("[serial]\nbaud = true", "serial.baud: expected an integer, got a boolean (True)"),
        ("[serial]\nbaud = 9600.0", "serial.baud: expected an integer, got a float (9600.0)"),
        ("[serial]\nbaud = 0", "serial.baud: must be at least 1, got 0"),
        ("[serial]\ndevice = ''", "serial.device: expected a non-empty string without NUL characters"),
        ("[serial]\ndevice = \"a\\u0000b\"", "serial.device: expected a non-empty string without NUL characters"),
        ("publish_every = '10'", "publish_every: expected an integer or a float, got a string ('10')"),
        ("publish_every = 0", "publish_every: must be in (0, inf), got 0"),
        ("stats_every = -1", "stats_every: must be in [0, inf), got -1"),
        ("stats_every = nan", "stats_every: must be in [0, inf), got nan"),
        ("holdout_fraction = 1.0", "holdout_fraction: must be in [0, 1), got 1.0"),
        ("[retention]\nmax_windows = 0", "retention.max_windows: must be at least 1, got 0"),
        ("[retention]\nmax_age_days = inf", "retention.max_age_days: must be in (0, inf), got inf"),
        ("[broker]\nport = 70000", "broker.port: must be a TCP port 1-65535, got 70000"),
        ("[broker]\nprotocol = 3", "broker.protocol: expected one of 5, 4, got 3"),
        ("[broker]\nenabled = 'no'", "broker.enabled: expected a boolean, got a string ('no')"),
        ("engine = 'gpu'", "engine: expected one of 'auto', 'numpy', 'tflite', got 'gpu'"),
        ("client_id = 'gw/1'", "client_id: invalid client id 'gw/1'"),
        ("client_id = 'aggregator'", "client_id: 'aggregator' is the aggregator's id, not a gateway's"),
        ("client_id = 7", "client_id: expected a string, got an integer (7)"),
        ("trust = 5", "trust: expected a string, got an integer (5)"),
        ("trust = ['nope.pub']", "trust: no such file: nope.pub"),
        ("alerts = 'nope.json'", "alerts: no such file: nope.json"),
        ("[broker]\ntls_ca = '.'", "broker.tls_ca: . is a directory, not a file"),
        ("alerts = '/dev/zero'", "alerts: /dev/zero is not a regular file"),
        ("client_id = 1979-05-27", "client_id: expected a string, got a date/time (datetime.date(1979, 5, 27))"),
    ],
)
def test_each_mistake_is_one_line_naming_the_key(text: str, line: str) -> None:
    problems = problems_of(text)
    assert len(problems) == 1 and problems[0].startswith(line), problems


def test_every_problem_is_reported_at_once_prefixed_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text("client_id = 'gw 1'\n[serial]\nbuad = 1\nbaud = -5\n[broker]\nport = 'x'\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert [p.split(": ", 2)[:2] for p in info.value.problems] == [
        [str(path), "client_id"],
        [str(path), "serial.buad"],
        [str(path), "serial.baud"],
        [str(path), "broker.port"],
    ]


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"client_id = \n", "not valid TOML: Invalid value (at line 1, column 13)"),
        (b"\xff\xfe", "not UTF-8 text (byte 0)"),
        (b"x = " + b"[" * 5000 + b"]" * 5000, "not a gateway config: values nested too deeply"),
        (b"# " + b"x" * 70_000, "70002 bytes is too big for a gateway config"),
    ],
)
def test_a_file_that_is_not_a_config_is_one_line(data: bytes, fragment: str) -> None:
    problems = problems_of(data)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_unreadable_config_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^.*nope.toml: cannot read the config file \(no such file"):
        load_config(tmp_path / "nope.toml")


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6)))
def test_the_file_accepts_exactly_what_the_command_line_accepts(value: float) -> None:
    """Oracle: the command line's validators, on the same numbers."""
    text = "nan" if isinstance(value, float) and math.isnan(value) else repr(value)
    for key, field, check, kinds in (
        ("holdout_fraction", "holdout_fraction", holdout_share, (int, float)),
        ("[serial]\nbaud", "baud", positive_int, (int,)),
        ("[broker]\nport", "port", port_number, (int,)),
    ):
        try:
            expected = check(repr(value)) if isinstance(value, kinds) else None
        except argparse.ArgumentTypeError:
            expected = None
        try:
            got = getattr(parse_config(f"{key} = {text}".encode()), field)
        except ConfigError:
            got = None
        assert got == expected, (key, value)


SOURCES = ("file", "env", "cli")


@pytest.mark.parametrize(
    "present", [c for n in range(4) for c in itertools.combinations(SOURCES, n)], ids=lambda c: "+".join(c) or "default"
)
def test_command_line_beats_environment_beats_file_beats_default(tmp_path: Path, present: tuple[str, ...]) -> None:
    """host and port from every combination of sources: the highest present one wins; a key
    with no environment variable (baud) goes file < command line the same way."""
    path = tmp_path / "gw.toml"
    path.write_text(
        "client_id = 'gw-1'\n"
        + ("[serial]\nbaud = 1200\n[broker]\nhost = 'file.example'\nport = 1111\n" if "file" in present else "")
    )
    env = {"WHEELFED_MQTT_HOST": "env.example", "WHEELFED_MQTT_PORT": "2222"} if "env" in present else {}
    argv = ["gateway", "--config", str(path)] + (
        ["--host", "cli.example", "--port", "3333", "--baud", "4800"] if "cli" in present else []
    )
    got = settings_of(build_parser().parse_args(argv), env)
    winner = next((s for s in reversed(SOURCES) if s in present), None)
    assert (got.host, got.port) == {
        "file": ("file.example", 1111),
        "env": ("env.example", 2222),
        "cli": ("cli.example", 3333),
        None: ("127.0.0.1", None),
    }[winner]
    assert got.baud == (4800 if "cli" in present else 1200 if "file" in present else 115200)
    assert got.client_id == "gw-1"


def test_command_line_overrides_of_every_kind(tmp_path: Path) -> None:
    key = SigningKey.generate().verify_key
    key.save(tmp_path / "k.pub")
    path = tmp_path / "gw.toml"
    path.write_text("client_id = 'gw-1'\ntrust = []\nstats_every = 5\n[broker]\nenabled = true\n")
    args = build_parser().parse_args(
        [
            "gateway",
            "--config",
            str(path),
            "--client-id",
            "gw-2",
            "--no-broker",
            "--trust",
            str(tmp_path / "k.pub"),
            "--stats-every",
            "0",
        ]
    )
    settle_broker_port(args)  # as wheelfed's main does before any command runs
    assert args.port is NOT_GIVEN  # left for the file: settle_broker_port must not pick 1883 first
    got = settings_of(args, {})
    assert (got.client_id, got.broker, got.trust, got.stats_every) == ("gw-2", False, (tmp_path / "k.pub",), 0.0)
    with pytest.raises(ConfigError, match=r"^\$WHEELFED_MQTT_PORT: must be at least 1, got 0$"):
        settings_of(build_parser().parse_args(["gateway", "--config", str(path)]), {"WHEELFED_MQTT_PORT": "0"})


def test_combinations_the_sources_cannot_check_alone() -> None:
    assert GatewaySettings().problems() == ["client id: not set (--client-id, or client_id in the config file)"]
    assert GatewaySettings("gw-1", tls_cert=Path("c")).problems() == [
        "broker: tls_cert/tls_key need tls_ca (--tls-ca)",
        "broker: tls_cert and tls_key go together",
    ]
    assert GatewaySettings("gw-1", broker=False, tls_cert=Path("c")).problems() == []


def test_store_problems(tmp_path: Path) -> None:
    (tmp_path / "table.csv").write_text("a,b\n")
    (tmp_path / "ok.db").write_bytes(b"SQLite format 3\x00" + bytes(100))
    assert store_problem(tmp_path / "new.db") is None and store_problem(tmp_path / "ok.db") is None
    assert (
        store_problem(tmp_path / "table.csv") == f"{tmp_path}/table.csv is not a window store (not an SQLite database)"
    )
    assert (
        store_problem(tmp_path / "nowhere" / "w.db")
        == f"the folder {tmp_path}/nowhere does not exist (create it first)"
    )
    assert store_problem(tmp_path) == f"{tmp_path} is a directory; give the store's file name (e.g. gw-1.db)"
