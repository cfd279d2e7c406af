"""Run mosquitto as a child process with WheelFed's config from ``deploy/mosquitto/``.

The config templates there are the production configs; only the listener, file locations and
process user are filled in here. Used by ``wheelfed broker``, the demo and the test fixtures.
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import ipaddress
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from shared.protocol.envelope import validate_client_id

log = logging.getLogger(__name__)

#: ``deploy/`` of this checkout; override with WHEELFED_DEPLOY_DIR for installed copies.
DEPLOY_DIR = Path(os.environ.get("WHEELFED_DEPLOY_DIR", Path(__file__).resolve().parents[2] / "deploy"))


def _set_parent_death_signal() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def die_with_parent():
    """``preexec_fn`` for child processes: SIGTERM them when the launcher dies, even by SIGKILL,
    so no broker or gateway outlives the demo or a test run (Linux only).

    The kernel ties this to the launching *thread*, so it is only set when launching from the
    main thread: a broker restarted from a helper thread would otherwise die with that thread.
    """
    return _set_parent_death_signal if threading.current_thread() is threading.main_thread() else None


def mosquitto_available() -> bool:
    return shutil.which("mosquitto") is not None


#: mosquitto_passwd's PBKDF2 iterations; the broker reads the count from each hash.
PASSWORD_HASH_ITERATIONS = 101


def mosquitto_password_hash(password: str) -> str:
    """A password-file hash as ``mosquitto_passwd`` (2.0+) writes it: ``$7$`` = PBKDF2-SHA512 with a
    12-byte random salt."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, PASSWORD_HASH_ITERATIONS, 64)
    return f"$7${PASSWORD_HASH_ITERATIONS}${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def find_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def port_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (as mosquitto does, with SO_REUSEADDR)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def is_loopback(address: str) -> bool:
    """Whether a listener on ``address`` is reachable from this machine only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def require_loopback(bind_address: str) -> None:
    """Plain TCP carries passwords and model pushes in clear: only where nothing else can listen."""
    if not is_loopback(bind_address):
        raise ValueError(
            f"plain TCP (no TLS) is served on loopback only, not on {bind_address}: give "
            "--tls-cert-dir DIR (deploy/certs makes one) or bind 127.0.0.1"
        )


@dataclass(frozen=True)
class BrokerUser:
    name: str
    password: str = field(repr=False)  # never in a log line or traceback

    @classmethod
    def parse(cls, spec: str) -> "BrokerUser":
        """``NAME:PASSWORD`` (the first colon separates them)."""
        name, sep, password = spec.partition(":")
        if not sep or not password:
            raise ValueError("not NAME:PASSWORD")
        return cls(validate_client_id(name), password)


def read_password_file(path: str | Path) -> list[BrokerUser]:
    """The users of a ``NAME:PASSWORD`` file (``#`` comments and blank lines allowed).

    The file must be readable by its owner only: it holds every broker password in clear.
    Every problem is a ``ValueError`` whose message names the file, the line and the fix.
    """
    path = Path(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ValueError(f"{path} is readable by others (mode {mode:04o}): chmod 600 {path}")
    users: list[BrokerUser] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            user = BrokerUser.parse(line)
        except ValueError as exc:
            raise ValueError(f"{path} line {number}: {exc}") from None  # (never the password itself)
        if any(u.name == user.name for u in users):
            raise ValueError(f"{path} line {number}: user {user.name} appears twice")
        users.append(user)
    if not users:
        raise ValueError(f"{path} has no users (lines NAME:PASSWORD)")
    return users


#: The prefix of the temporary run folder ``wheelfed broker`` makes when it is given no ``--run-dir``.
TEMPORARY_RUN_DIR_PREFIX = "wheelfed-broker-"


def temporary_run_dir() -> Path:
    """A new temporary run folder (mode 0700) that a broker given it removes on a clean stop."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=TEMPORARY_RUN_DIR_PREFIX))


def is_temporary_run_dir(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` is a run folder made for one broker's life (``temporary_run_dir``, or
    ``wheelfed broker`` without ``--run-dir``): an empty ``wheelfed-broker-*`` folder directly in
    the system's temporary folder. A broker given one removes it -- its config, password hashes and
    persistence -- when it stops cleanly; any other folder is kept."""
    import tempfile

    path = Path(run_dir).resolve()
    try:
        return (
            path.parent == Path(tempfile.gettempdir()).resolve()
            and path.name.startswith(TEMPORARY_RUN_DIR_PREFIX)
            and path.is_dir()
            and not any(path.iterdir())
        )
    except OSError:
        return False


def remove_run_dir(run_dir: Path) -> None:
    """Remove a temporary run folder (``is_temporary_run_dir``) after a clean stop, logging it."""
    shutil.rmtree(run_dir, ignore_errors=True)
    log.info("removed the broker's temporary run folder %s", run_dir)


def revocation_on(config: str, crl_file: Path) -> str:
    """The TLS config with its commented ``#crlfile`` line switched on for ``crl_file``: mosquitto
    then refuses the revoked certificates (deploy/cloud/crl.sh keeps the list). Edited here rather
    than by the operator, so that the production template stays the one file to review."""
    lines = config.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.startswith("#crlfile ")]
    if len(found) != 1:
        raise ValueError(f"the TLS template has {len(found)} '#crlfile' lines, not one: cannot switch revocation on")
    lines[found[0]] = f"crlfile {crl_file}\n"
    return "".join(lines)


class MosquittoBroker:
    """A mosquitto child process; a context manager. ``restart()`` keeps port and sessions."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        users: Sequence[BrokerUser] = (),
        port: int = 0,
        bind_address: str = "127.0.0.1",
        tls_cert_dir: str | Path | None = None,
        crl_file: str | Path | None = None,
        deploy_dir: str | Path = DEPLOY_DIR,
        remove_on_stop: bool | None = None,
    ) -> None:
        """``remove_on_stop``: remove ``run_dir`` when the broker stops cleanly (not when it is
        killed or restarted); by default only a temporary run folder (``is_temporary_run_dir``)."""
        if not mosquitto_available():
            raise FileNotFoundError(
                "mosquitto is not installed: `apt-get install -y mosquitto` (or use the embedded broker)"
            )
        if tls_cert_dir and users:
            raise ValueError(
                "users (passwords) are for the plain loopback listener; under TLS the client "
                "certificate's CN is the identity"
            )
        if crl_file and not tls_cert_dir:
            raise ValueError("a certificate revocation list needs TLS (tls_cert_dir)")
        if not tls_cert_dir:
            require_loopback(bind_address)
        self.run_dir = Path(run_dir).resolve()
        self.remove_on_stop = is_temporary_run_dir(self.run_dir) if remove_on_stop is None else remove_on_stop
        self.users = list(users)
        self.bind_address = bind_address
        self.port = port or find_free_port(bind_address)
        self.tls_cert_dir = Path(tls_cert_dir).resolve() if tls_cert_dir else None
        self.crl_file = Path(crl_file).resolve() if crl_file else None
        self.deploy_dir = Path(deploy_dir).resolve()
        self.process: subprocess.Popen | None = None
        self.config_path = self.run_dir / "mosquitto.conf"
        self.log_path = self.run_dir / "mosquitto.log"

    @property
    def host(self) -> str:
        return "127.0.0.1" if self.bind_address in ("0.0.0.0", "") else self.bind_address

    def _render(self) -> None:
        # 0700: the persistence file holds the queued messages (model pushes) of every gateway.
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.run_dir.chmod(0o700)
        name = "wheelfed-tls.conf.in" if self.tls_cert_dir else "wheelfed.conf.in"
        template = Template((self.deploy_dir / "mosquitto" / name).read_text())
        config = template.substitute(
            port=self.port,
            bind_address=self.bind_address,
            run_dir=self.run_dir,
            deploy_dir=self.deploy_dir,
            cert_dir=self.tls_cert_dir or "",
            user=getpass.getuser(),
        )
        if self.crl_file:
            config = revocation_on(config, self.crl_file)
        self.config_path.write_text(config)
        if not self.tls_cert_dir:
            self._write_password_file(self.run_dir / "passwd")

    def _write_password_file(self, passwd: Path) -> None:
        """mosquitto's password file, hashes only, 0600. Hashed here rather than by
        ``mosquitto_passwd``: ``-b`` shows each password in ``ps``, ``-U`` cuts it at a colon."""
        fd = os.open(passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.writelines(f"{user.name}:{mosquitto_password_hash(user.password)}\n" for user in self.users)

    def start(self, timeout_s: float = 10.0) -> "MosquittoBroker":
        if not port_free(self.bind_address, self.port):
            # Checked first: otherwise the other program's listener looks like ours starting.
            raise OSError(
                errno.EADDRINUSE,
                f"port {self.port} on {self.bind_address} is already in use "
                "(another broker?); choose another with --port",
            )
        if self.process is None:
            self._render()
        log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            ["mosquitto", "-c", str(self.config_path)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        log_file.close()
        deadline = time.monotonic() + timeout_s
        while not _port_open(self.host, self.port):
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self._halt(kill=False)  # the run folder stays: its log says why
                raise TimeoutError(
                    f"mosquitto did not listen on port {self.port} within {timeout_s}s: {self.log_tail()}"
                )
            time.sleep(0.01)
        log.info("mosquitto started", extra={"port": self.port, "pid": self.process.pid})
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        """The mosquitto process's id (it has none before :meth:`start`)."""
        if self.process is None:
            raise RuntimeError("mosquitto has not been started")
        return self.process.pid

    def stop(self, *, kill: bool = False, timeout_s: float = 10.0) -> None:
        """Stop the broker (SIGTERM lets it save sessions; ``kill`` simulates a crash). A clean
        stop removes the run folder when ``remove_on_stop``."""
        self._halt(kill=kill, timeout_s=timeout_s)
        if self.remove_on_stop and not kill and self.run_dir.exists():
            remove_run_dir(self.run_dir)

    def _halt(self, *, kill: bool, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self, *, kill: bool = False) -> None:
        self._halt(kill=kill)
        self.start()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> "MosquittoBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
