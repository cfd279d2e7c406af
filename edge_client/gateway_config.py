"""The gateway's configuration file, and the checks behind ``wheelfed gateway --check``.

A gateway installed as a service (``deploy/gateway/``) reads its settings from a TOML file,
``/etc/wheelfed/gateway.toml``, instead of a command line in a unit file: every option of
``wheelfed gateway`` has a key, spelled like the option (``--max-windows`` ->
``max_windows`` in ``[retention]``)::

    client_id = "gw-1"
    store = "/var/lib/wheelfed/windows.db"
    model_dir = "/var/lib/wheelfed/models"
    trust = ["/etc/wheelfed/aggregator.pub"]

    [serial]
    device = "/dev/wheelfed-sensor"
    baud = 115200

    [broker]
    host = "broker.example.org"
    tls_ca = "/etc/wheelfed/certs/ca.crt"
    tls_cert = "/etc/wheelfed/certs/gw-1.crt"
    tls_key = "/etc/wheelfed/certs/gw-1.key"

Precedence, highest first: the command line, the environment (``$WHEELFED_MQTT_HOST``,
``$WHEELFED_MQTT_PORT``, ``$WHEELFED_MQTT_PASSWORD``), the file, the defaults of
:class:`GatewaySettings`. Relative paths in the file are relative to the file's folder (a
service's working directory is ``/``).

Loading checks what the file alone decides and reports *every* problem, one line each, in a
:class:`ConfigError`: unknown keys (with a did-you-mean), wrong types, values out of range,
files that do not exist. What depends on the machine at the moment -- is the sensor adapter
plugged in, is the broker up, has a certificate expired -- is :func:`check_environment`'s:
a gateway whose adapter is unplugged at boot still starts (``link=gone``, reopened when it
appears), but ``--check`` says so.

Examples
--------
>>> settings = parse_config(b'client_id = "gw-1"\\n[serial]\\nbaud = 57600\\n')
>>> settings.client_id, settings.baud, settings.broker
('gw-1', 57600, True)
>>> try:
...     parse_config(b'[serial]\\nbuad = 9600\\nbaud = "fast"\\n')
... except ConfigError as exc:
...     print(exc)
serial.buad: unknown key (did you mean serial.baud?)
serial.baud: expected an integer, got a string ('fast')
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import socket
import ssl
import tomllib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

from edge_client.cli.arguments import (
    existing_file,
    gateway_id,
    holdout_share,
    non_negative_float,
    port_number,
    positive_float,
    positive_int,
)

if TYPE_CHECKING:
    from edge_client.engines import EnginePreference

__all__ = [
    "ConfigError",
    "GatewaySettings",
    "CheckReport",
    "parse_config",
    "load_config",
    "check_environment",
    "broker_port",
    "store_problem",
    "MAX_CONFIG_BYTES",
    "MIN_FREE_BYTES",
]

#: A gateway config is a few hundred bytes; anything this big is not one (and is not parsed).
MAX_CONFIG_BYTES = 64 * 1024
#: ``--check`` wants this much free space where the store lives (a day of windows is ~1 MB; the
#: rest is headroom for SQLite's WAL and pushed models).
MIN_FREE_BYTES = 100 * 1024 * 1024
#: A certificate expiring sooner than this is mentioned in the ``--check`` summary.
EXPIRY_NOTICE = timedelta(days=30)

ENGINES: tuple[EnginePreference, ...] = ("auto", "numpy", "tflite")
_SQLITE_HEADER = b"SQLite format 3\x00"
_PLAIN_PORT, _TLS_PORT = 1883, 8883
#: How long ``--check`` waits for the broker's verdict on the client certificate.
_TLS_VERDICT_S = 0.5


class ConfigError(ValueError):
    """A config file that cannot be used; ``problems`` holds one line per problem.

    ``str()`` joins them with newlines, so a single problem is a single line.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class GatewaySettings:
    """Everything ``wheelfed gateway`` runs with; the field names are the command line's destinations.

    ``None`` means "not set": the gateway then computes it (the store is ``CLIENT_ID-windows.db``,
    the model directory sits beside the store, the port is 8883 with ``tls_ca`` else 1883).
    """

    client_id: str | None = None
    serial: str | None = None  # a device, a pty path or a pyserial URL; None: no sensors
    baud: int = 115200
    store: Path | None = None
    session: str | None = None
    max_windows: int | None = None
    max_age_days: float | None = None
    holdout_fraction: float = 0.0
    model_dir: Path | None = None
    trust: tuple[Path, ...] = ()
    party_key_file: Path | None = None  # the secret a person's gateways share for vertical jobs
    engine: EnginePreference = "auto"
    alerts: Path | None = None
    publish_every: float = 10.0
    stats_every: float = 10.0
    broker: bool = True  # False: collect only, no MQTT (--no-broker)
    host: str = "127.0.0.1"
    port: int | None = None
    protocol: int = 5
    username: str | None = None
    password_file: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @classmethod
    def resolve(cls, *layers: Mapping[str, object]) -> GatewaySettings:
        """The defaults overridden by each layer in turn (lowest precedence first); a layer maps
        field names to the values its source set (absent: not set there)."""
        merged: dict[str, Any] = {}  # each source's parser gave its values their field's type
        for layer in layers:
            merged.update(layer)
        return cls(**merged)

    def problems(self) -> list[str]:
        """What is wrong with the combination, whatever its sources (one line each)."""
        out = []
        if self.client_id is None:
            out.append("client id: not set (--client-id, or client_id in the config file)")
        if self.broker and (self.tls_cert or self.tls_key) and not self.tls_ca:
            out.append("broker: tls_cert/tls_key need tls_ca (--tls-ca)")
        if self.broker and bool(self.tls_cert) != bool(self.tls_key):
            out.append("broker: tls_cert and tls_key go together")
        return out


def broker_port(settings: GatewaySettings) -> int:
    """The port set, else the one the transport implies: 8883 with TLS, else 1883."""
    return settings.port or (_TLS_PORT if settings.tls_ca else _PLAIN_PORT)


# ---------------------------------------------------------------------------------------------
# The file's schema: (table, key) -> field, and a parser per key
# ---------------------------------------------------------------------------------------------
class _Bad(Exception):
    """One value's problem (the caller adds which key)."""


_T = TypeVar("_T")

_TOML_TYPES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)


def _type_name(value: object) -> str:
    return next((name for kind, name in _TOML_TYPES if isinstance(value, kind)), "a date/time")


def _matches(value: object, kinds: tuple[type, ...]) -> bool:
    # bool is an int in Python, never in TOML: `baud = true` is a mistake, not 1
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))


def _mismatch(value: object, kinds: tuple[type, ...]) -> _Bad:
    expected = " or ".join(name for kind, name in _TOML_TYPES if kind in kinds)
    return _Bad(f"expected {expected}, got {_type_name(value)} ({value!r})"[:200])


def _want(value: object, *kinds: type) -> None:
    if not _matches(value, kinds):
        raise _mismatch(value, kinds)


def _as(value: object, kind: type[_T]) -> _T:
    """``value`` when it is a TOML value of type ``kind``, else the one-line ``_Bad``."""
    if isinstance(value, kind) and _matches(value, (kind,)):
        return value
    raise _mismatch(value, (kind,))


def _checked(check: Callable[[str], object], *kinds: type) -> Callable[[object, Path], object]:
    """A command-line validator (``edge_client.cli.arguments``) applied to a TOML number of one of
    ``kinds``, so the file and the command line accept exactly the same values."""

    def parse(value: object, _base: Path) -> object:
        _want(value, *kinds)
        try:
            return check(repr(value))
        except argparse.ArgumentTypeError as exc:
            raise _Bad(str(exc)) from None

    return parse


def _text(value: object, _base: Path) -> str:
    text = _as(value, str)
    if not text or "\x00" in text:
        raise _Bad("expected a non-empty string without NUL characters")
    return text


def _path(value: object, base: Path) -> Path:
    return base / _text(value, base)


def _file(value: object, base: Path) -> Path:
    """An existing regular file (a device such as /dev/zero would never finish reading)."""
    try:
        path = existing_file(str(_path(value, base)))
    except argparse.ArgumentTypeError as exc:
        raise _Bad(str(exc)) from None
    if not path.is_file():
        raise _Bad(f"{path} is not a regular file")
    return path


def _files(value: object, base: Path) -> tuple[Path, ...]:
    """One path or an array of them (several trust keys during a key rotation)."""
    items = value if isinstance(value, list) else [value]
    return tuple(_file(item, base) for item in items)


def _client_id(value: object, base: Path) -> str:
    try:
        return gateway_id(_text(value, base))
    except argparse.ArgumentTypeError as exc:
        raise _Bad(str(exc)) from None


def _serial(value: object, base: Path) -> str:
    """A pyserial URL as written, else a device path; its presence is ``--check``'s to report."""
    text = _text(value, base)
    return text if "://" in text else str(base / text)


def _choice(*choices: object) -> Callable[[object, Path], object]:
    def parse(value: object, _base: Path) -> object:
        _want(value, type(choices[0]))
        if value not in choices:
            raise _Bad(f"expected one of {', '.join(map(repr, choices))}, got {value!r}"[:200])
        return value

    return parse


def _flag(value: object, _base: Path) -> bool:
    return _as(value, bool)


def _alerts(value: object, base: Path) -> Path:
    from edge_client.alerts import AlertRulesError, load_rules

    path = _file(value, base)
    try:
        load_rules(path)
    except AlertRulesError as exc:
        raise _Bad(str(exc)) from None
    return path


@dataclass(frozen=True)
class _Key:
    parse: Callable[[object, Path], object]
    field: str


#: Table ("" = top level) -> key -> how to read it. Keys are the command-line options' names.
SCHEMA: dict[str, dict[str, _Key]] = {
    "": {
        "client_id": _Key(_client_id, "client_id"),
        "session": _Key(_text, "session"),
        "store": _Key(_path, "store"),
        "model_dir": _Key(_path, "model_dir"),
        "trust": _Key(_files, "trust"),
        "party_key_file": _Key(_file, "party_key_file"),
        "engine": _Key(_choice(*ENGINES), "engine"),
        "alerts": _Key(_alerts, "alerts"),
        "holdout_fraction": _Key(_checked(holdout_share, int, float), "holdout_fraction"),
        "publish_every": _Key(_checked(positive_float, int, float), "publish_every"),
        "stats_every": _Key(_checked(non_negative_float, int, float), "stats_every"),
    },
    "serial": {"device": _Key(_serial, "serial"), "baud": _Key(_checked(positive_int, int), "baud")},
    "retention": {
        "max_windows": _Key(_checked(positive_int, int), "max_windows"),
        "max_age_days": _Key(_checked(positive_float, int, float), "max_age_days"),
    },
    "broker": {
        "enabled": _Key(_flag, "broker"),
        "host": _Key(_text, "host"),
        "port": _Key(_checked(port_number, int), "port"),
        "protocol": _Key(_choice(5, 4), "protocol"),
        "username": _Key(_text, "username"),
        "password_file": _Key(_file, "password_file"),
        "tls_ca": _Key(_file, "tls_ca"),
        "tls_cert": _Key(_file, "tls_cert"),
        "tls_key": _Key(_file, "tls_key"),
    },
}


def _qualified(table: str, key: str) -> str:
    return f"{table}.{key}" if table else key


def _unknown(table: str, key: str) -> str:
    """``retention.max_window: unknown key (did you mean retention.max_windows?)``; a key that
    exists in another table, or spelled like the option (``max-windows``), is pointed there."""
    everywhere = {_qualified(t, k): k for t, keys in SCHEMA.items() for k in keys}
    spelled = key.replace("-", "_").lower()
    moved = [q for q, k in everywhere.items() if k == spelled and q != _qualified(table, key)]
    close = moved or difflib.get_close_matches(_qualified(table, spelled), everywhere, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{_qualified(table, key)[:100]}: unknown key{hint}"


def parse_config(data: bytes, *, base: Path = Path("."), source: str = "") -> GatewaySettings:
    """The settings a config file sets (the rest at their defaults); every problem is one line
    of the ``ConfigError`` (prefixed with ``source``, the file's name, when given).

    ``base`` is the folder relative paths are taken from.
    """
    return GatewaySettings.resolve(_read(data, base, source))


def _read(data: bytes, base: Path, source: str) -> dict[str, object]:
    prefix = f"{source}: " if source else ""
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            [
                f"{prefix}{len(data)} bytes is too big for a gateway config "
                f"(at most {MAX_CONFIG_BYTES}): is this the right file?"
            ]
        )
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{prefix}not UTF-8 text (byte {exc.start}): is this the right file?"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{prefix}not valid TOML: {exc}"]) from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise ConfigError([f"{prefix}not a gateway config: values nested too deeply"]) from None
    values: dict[str, object] = {}
    problems: list[str] = []
    for name, value in document.items():
        table, key = ("", name) if name not in SCHEMA or name == "" else (name, None)
        items: Iterable[tuple[str, object]]
        if key is None:  # a table of ours
            if not isinstance(value, dict):
                problems.append(
                    f"{prefix}{name}: expected a table [{name}] with {', '.join(SCHEMA[name])}, got {_type_name(value)}"
                )
                continue
            items = value.items()
        else:
            items = [(key, value)]
        for k, v in items:
            spec = SCHEMA[table].get(k)
            if spec is None:
                problems.append(prefix + _unknown(table, k))
                continue
            try:
                values[spec.field] = spec.parse(v, base)
            except _Bad as exc:
                problems.append(f"{prefix}{_qualified(table, k)}: {exc}")
            except (OSError, ValueError) as exc:  # a path the OS will not even look at (too long, ...)
                problems.append(
                    f"{prefix}{_qualified(table, k)}: unusable path ({exc.__class__.__name__}: {str(exc)[:100]})"
                )
    if problems:
        raise ConfigError(problems)
    return values


def load_config(path: Path) -> dict[str, object]:
    """The fields a config file sets, validated (a ``ConfigError`` lists every problem), as one
    layer for :meth:`GatewaySettings.resolve`."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file ({(exc.strerror or str(exc)).lower()})"]) from None
    return _read(data, path.resolve().parent, str(path))


# ---------------------------------------------------------------------------------------------
# --check: the machine as the gateway will find it
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckReport:
    """``problems``: what stops the gateway working as configured (one line each);
    ``notes``: what the summary says when there are none."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]


def store_problem(path: Path) -> str | None:
    """Why ``path`` cannot be the window store (its folder is missing or read-only, it is a
    directory, or an existing file that is not an SQLite database), or None."""
    if path.is_dir():
        return f"{path} is a directory; give the store's file name (e.g. gw-1.db)"
    folder = path.parent
    if not folder.is_dir():
        return f"the folder {folder} does not exist (create it first)"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable by this user (the store and its WAL are created there)"
    if path.exists():
        try:
            with path.open("rb") as fh:
                head = fh.read(len(_SQLITE_HEADER))
        except OSError as exc:
            return f"cannot read {path} ({(exc.strerror or str(exc)).lower()})"
        if head and head != _SQLITE_HEADER:
            return f"{path} is not a window store (not an SQLite database)"
    return None


def _check_certificates(settings: GatewaySettings, problems: list[str], notes: list[str]) -> None:
    """Readable, in date, the key fits the certificate, the CA issued it, CN = client id."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    now = datetime.now(timezone.utc)
    certs: dict[str, x509.Certificate] = {}
    for name in ("tls_ca", "tls_cert"):
        path = getattr(settings, name)
        if path is None:
            continue
        try:
            cert = x509.load_pem_x509_certificate(path.read_bytes())
        except (OSError, ValueError) as exc:
            problems.append(f"{name} {path}: not a readable PEM certificate ({str(exc)[:120]})")
            continue
        certs[name] = cert
        if cert.not_valid_after_utc < now:
            problems.append(
                f"{name} {path}: expired on {cert.not_valid_after_utc:%Y-%m-%d} (issue a new one: deploy/certs)"
            )
        elif cert.not_valid_before_utc > now:
            problems.append(
                f"{name} {path}: not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC "
                "(is this machine's clock right?)"
            )
        elif cert.not_valid_after_utc - now < EXPIRY_NOTICE:
            notes.append(f"{name} expires on {cert.not_valid_after_utc:%Y-%m-%d}")
    if "tls_cert" in certs:
        cert = certs["tls_cert"]
        names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        cn = str(names[0].value) if names else None
        if cn != settings.client_id:
            problems.append(
                f"tls_cert {settings.tls_cert}: its CN is {cn!r}, not the client id "
                f"{settings.client_id!r} (the broker takes the CN as the gateway's identity)"
            )
        if "tls_ca" in certs:
            try:
                cert.verify_directly_issued_by(certs["tls_ca"])
            except InvalidSignature:  # the CA's name, another key
                problems.append(
                    f"tls_cert {settings.tls_cert}: not issued by tls_ca {settings.tls_ca} (its "
                    "signature does not verify with the CA's key)"
                )
            except (ValueError, TypeError):  # another issuer, or a key type that cannot have signed it
                problems.append(
                    f"tls_cert {settings.tls_cert}: not issued by tls_ca {settings.tls_ca} (its issuer "
                    f"is {cert.issuer.rfc4514_string()[:100]})"
                )
    if settings.tls_key is not None:
        try:
            key = load_pem_private_key(settings.tls_key.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            problems.append(
                f"tls_key {settings.tls_key}: not a readable unencrypted PEM private key ({str(exc)[:120]})"
            )
        else:
            if "tls_cert" in certs and key.public_key() != certs["tls_cert"].public_key():
                problems.append(f"tls_key {settings.tls_key}: does not belong to tls_cert {settings.tls_cert}")


def _check_broker(settings: GatewaySettings, timeout_s: float) -> str | None:
    """TCP (and the TLS handshake, with TLS) to the broker within ``timeout_s``. No MQTT
    session: connecting as the client id would disconnect a gateway already running as it."""
    address = f"{settings.host}:{broker_port(settings)}"
    try:
        with socket.create_connection((settings.host, broker_port(settings)), timeout=timeout_s) as sock:
            if settings.tls_ca is not None:
                context = ssl.create_default_context(cafile=str(settings.tls_ca))
                if settings.tls_cert and settings.tls_key:
                    context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))
                with context.wrap_socket(sock, server_hostname=settings.host) as tls:
                    # Under TLS 1.3 the broker judges the client's certificate after the handshake
                    # and answers a refusal with an alert: wait briefly for one. (A broker that
                    # accepts waits for MQTT's CONNECT: the read times out.)
                    tls.settimeout(_TLS_VERDICT_S)
                    try:
                        if tls.recv(1) == b"":
                            return f"broker {address}: closed the connection after the TLS handshake"
                    except (TimeoutError, socket.timeout):
                        pass
    except socket.gaierror as exc:
        return f"broker {address}: unknown host ({exc.strerror})"
    except ssl.SSLError as exc:
        return f"broker {address}: TLS refused ({exc.reason or exc})"
    except (TimeoutError, socket.timeout):
        return f"broker {address}: no answer within {timeout_s:g} s"
    except OSError as exc:
        return f"broker {address}: {(exc.strerror or str(exc)).lower()} (is the broker running, is the port open?)"
    return None


def _check_password(settings: GatewaySettings, environ: Mapping[str, str]) -> str | None:
    from edge_client.cli.connection import PASSWORD_VARIABLE

    if settings.tls_ca is not None or environ.get(PASSWORD_VARIABLE):
        return None
    if settings.password_file is None:
        return f"broker: no password (set broker.password_file, or ${PASSWORD_VARIABLE}), and no TLS client certificate"
    try:
        if not settings.password_file.read_text(encoding="utf-8").strip():
            return f"password_file {settings.password_file}: empty"
    except (OSError, UnicodeDecodeError) as exc:
        return f"password_file {settings.password_file}: cannot read it ({str(exc)[:120]})"
    return None


def _check_engine(settings: GatewaySettings, problems: list[str], notes: list[str]) -> None:
    from shared.model.tflite import load_interpreter

    try:
        load_interpreter()
        import flatbuffers  # noqa: F401  (the gateway compiles pushed models itself)
        import tflite  # noqa: F401
    except ImportError as exc:
        if settings.engine == "tflite":
            problems.append(f"engine tflite: {str(exc).splitlines()[0][:300]}")
        elif settings.engine == "auto":
            notes.append("engine numpy (no TFLite interpreter installed)")
    else:
        notes.append(f"engine {settings.engine} (TFLite available)")


def check_environment(
    settings: GatewaySettings,
    *,
    environ: Mapping[str, str] | None = None,
    broker_timeout_s: float = 3.0,
    min_free_bytes: int = MIN_FREE_BYTES,
) -> CheckReport:
    """Everything the gateway needs from this machine, checked without changing anything:
    the store's folder, free disk space, the model directory, the serial device, the
    certificates, the broker password, the trust keys, the TFLite engine, the broker."""
    from edge_client.models import ModelDirError, check_model_dir
    from shared.signing import InvalidKey, load_verify_key

    environ = os.environ if environ is None else environ
    problems, notes = settings.problems(), []
    client_id = settings.client_id or "CLIENT_ID"
    store = settings.store or Path(f"{client_id}-windows.db")
    problem = store_problem(store)
    if problem:
        problems.append(f"store: {problem}")
    elif (free := shutil.disk_usage(store.parent).free) < min_free_bytes:
        problems.append(
            f"store: only {free / 2**20:.0f} MiB free on {store.parent} (want {min_free_bytes / 2**20:.0f} MiB)"
        )
    else:
        notes.append(f"store {store} ({free / 2**30:.1f} GiB free)")
    try:
        check_model_dir(settings.model_dir or store.with_name(f"{client_id}-models"))
    except ModelDirError as exc:
        problems.append(f"model_dir: {exc}")
    if settings.serial is None:
        notes.append("no serial device (no sensors)")
    elif "://" not in settings.serial:
        device = Path(settings.serial)
        if not device.exists():
            problems.append(
                f"serial {device}: not present (is the sensor adapter plugged in? "
                "ls /dev/serial/by-id/ lists the connected ones)"
            )
        elif device.is_dir():
            problems.append(f"serial {device}: a directory, not a device")
        elif not os.access(device, os.R_OK | os.W_OK):
            problems.append(f"serial {device}: not readable and writable by this user (add it to the dialout group)")
        else:
            notes.append(f"serial {device}")
    for key in settings.trust:
        try:
            load_verify_key(key)
        except (InvalidKey, OSError) as exc:
            problems.append(f"trust {key}: {str(exc)[:200]} (wheelfed keygen writes the aggregator's .pub)")
    if not settings.trust:
        notes.append("no trust key: model pushes will be refused")
    if settings.party_key_file is not None:
        from shared.vertical_party_key import read_party_key

        try:
            read_party_key(settings.party_key_file)
        except ValueError as exc:
            problems.append(f"party_key_file: {exc}")
    _check_engine(settings, problems, notes)
    if settings.broker:
        _check_certificates(settings, problems, notes)
        found = [p for p in (_check_password(settings, environ), _check_broker(settings, broker_timeout_s)) if p]
        problems += found
        if not found:
            notes.append(
                f"broker {settings.host}:{broker_port(settings)} reachable{' (TLS)' if settings.tls_ca else ''}"
            )
    else:
        notes.append("no broker (collect only)")
    return CheckReport(tuple(problems), tuple(notes))
