"""Ed25519 signatures (RFC 8032) for model bundles and rollbacks, on ``cryptography`` (OpenSSL).

Why: the aggregator signs every model (and every rollback) it sends over MQTT and gateways verify
the signature before they act on it. ``cryptography`` is already a runtime dependency (secure
aggregation) with wheels for x86-64 and the Pi's aarch64, and OpenSSL's Ed25519 is constant-time
and reviewed -- a hand-written curve in Python was neither. This module adds only what OpenSSL
leaves open, plus WheelFed's key files and error messages; the test-suite keeps RFC 8032's
vectors so a change of backend cannot change a signature.

Strictness (everything below raises, nothing is "repaired"):

* public keys and signatures of the wrong length;
* public keys whose encoding is not canonical (``y >= 2^255 - 19``) or that are one of the 8
  points of small order, under either sign bit (libsodium's blocklist): with such a key
  ``[k]A`` takes at most 8 values, and OpenSSL alone accepts ``(R, S = 0)`` forgeries for it;
* ``S >= L`` (malleable signatures), checked here too so the message says why and the rule does
  not depend on the OpenSSL version;
* everything else is OpenSSL's: a non-canonical or off-curve ``R`` never matches its canonical
  re-encoding, and a key that is not a point on the curve makes every verification fail (it is
  refused at first use rather than when loaded: telling it apart needs curve arithmetic).

The group equation is checked cofactorless (``[S]B == R + [k]A``), as OpenSSL and libsodium do.

Key files are one line of text (``#`` comment lines allowed), not PEM:
``wheelfed-ed25519-seed <64 hex>`` (secret, written with mode 0600) and
``wheelfed-ed25519-public <64 hex>`` (public, for gateways).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import Union

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "KEY_ID_BYTES",
    "PUBLIC_KEY_BYTES",
    "SEED_BYTES",
    "SIGNATURE_BYTES",
    "BadSignature",
    "InvalidKey",
    "SigningKey",
    "VerifyKey",
    "key_id",
    "load_signing_key",
    "load_verify_key",
    "save_signing_key",
    "save_verify_key",
]

SEED_BYTES = 32
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
KEY_ID_BYTES = 8

PathLike = Union[str, "os.PathLike[str]"]

_FIELD_PRIME = 2**255 - 19  # a point's y must be below it (canonical encoding)
_GROUP_ORDER = 2**252 + 27742317777372353535851937790883648493  # S must be below it (L)
#: y of the points of small order: 0 (order 4), 1 (identity), p - 1 (order 2) and the two y of
#: order 8 -- libsodium's ``ge25519_has_small_order`` list, compared with the sign bit cleared.
_SMALL_ORDER_Y = frozenset(
    {
        0,
        1,
        _FIELD_PRIME - 1,
        2707385501144840649318225287225658788936804267575313519463743609750303402022,
        55188659117513257062467267217118295137698188065244968500265048394206261417927,
    }
)


class BadSignature(ValueError):
    """A signature does not verify (or is malformed): the signed data must not be used."""


class InvalidKey(ValueError):
    """Bytes (or a key file) that are not a valid Ed25519 key."""


def _as_bytes(value: object, what: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}")
    return bytes(value)


def key_id(public_key: bytes) -> str:
    """Short, stable name of a public key: the first 8 bytes of its SHA-256, as 16 hex digits."""
    return hashlib.sha256(_as_bytes(public_key, "public key")).digest()[:KEY_ID_BYTES].hex()


# --- keys --------------------------------------------------------------------------------------
class VerifyKey:
    """An Ed25519 public key; all a gateway needs to check the aggregator's signatures."""

    __slots__ = ("_bytes", "_key")

    def __init__(self, public_key: bytes) -> None:
        data = _as_bytes(public_key, "public key")
        if len(data) != PUBLIC_KEY_BYTES:
            raise InvalidKey(f"an Ed25519 public key is {PUBLIC_KEY_BYTES} bytes, got {len(data)}")
        y = int.from_bytes(data, "little") & ((1 << 255) - 1)
        if y >= _FIELD_PRIME:
            raise InvalidKey("public key is not canonical (y >= 2^255 - 19)")
        if y in _SMALL_ORDER_Y:
            raise InvalidKey(
                "public key is a point of small order (a torsion point): it would accept forged signatures, refused"
            )
        self._bytes = data
        self._key = Ed25519PublicKey.from_public_bytes(data)

    def __bytes__(self) -> bytes:
        return self._bytes

    @property
    def key_id(self) -> str:
        return key_id(self._bytes)

    def verify(self, message: bytes, signature: bytes) -> None:
        """Return if ``signature`` is this key's signature of ``message``; else raise BadSignature."""
        message = _as_bytes(message, "message")
        signature = _as_bytes(signature, "signature")
        if len(signature) != SIGNATURE_BYTES:
            raise BadSignature(
                f"an Ed25519 signature is {SIGNATURE_BYTES} bytes, got {len(signature)} (truncated or not a signature)"
            )
        if int.from_bytes(signature[32:], "little") >= _GROUP_ORDER:
            raise BadSignature("signature is not canonical (S >= L): refused as malleable")
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            raise BadSignature(
                f"signature does not verify with key {self.key_id}: the data was altered after signing, "
                "or it was signed with a different key"
            ) from None

    def save(self, path: PathLike, *, overwrite: bool = False) -> None:
        save_verify_key(self, path, overwrite=overwrite)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifyKey) and hmac.compare_digest(self._bytes, other._bytes)

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __repr__(self) -> str:
        return f"VerifyKey(key_id={self.key_id!r})"


class SigningKey:
    """An Ed25519 secret key (the 32-byte RFC 8032 seed); lives on the aggregator only."""

    __slots__ = ("_seed", "_key", "verify_key")

    def __init__(self, seed: bytes) -> None:
        seed = _as_bytes(seed, "seed")
        if len(seed) != SEED_BYTES:
            raise InvalidKey(f"an Ed25519 seed is {SEED_BYTES} bytes, got {len(seed)}")
        self._seed = seed
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.verify_key = VerifyKey(self._key.public_key().public_bytes_raw())

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        return cls(seed)

    @property
    def seed(self) -> bytes:
        return self._seed

    @property
    def key_id(self) -> str:
        return self.verify_key.key_id

    def sign(self, message: bytes) -> bytes:
        """The 64-byte signature ``R || S`` of ``message`` (deterministic, RFC 8032 §5.1.6)."""
        return self._key.sign(_as_bytes(message, "message"))

    def save(self, path: PathLike, *, overwrite: bool = False) -> None:
        save_signing_key(self, path, overwrite=overwrite)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SigningKey) and hmac.compare_digest(self._seed, other._seed)

    def __hash__(self) -> int:
        return hash(bytes(self.verify_key))

    def __repr__(self) -> str:  # never shows the secret
        return f"SigningKey(key_id={self.key_id!r})"

    def __reduce__(self) -> tuple:
        raise TypeError("SigningKey is not picklable (it would copy the secret); pass the key file path")


# --- key files ---------------------------------------------------------------------------------
_SEED_LABEL = "wheelfed-ed25519-seed"
_PUBLIC_LABEL = "wheelfed-ed25519-public"


def _write_key_file(path: PathLike, text: str, mode: int, overwrite: bool) -> None:
    target = Path(path)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; refusing to overwrite a key (pass overwrite=True to replace it)")
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            os.fchmod(handle.fileno(), mode)  # whatever the umask
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(temp, target)
        else:
            os.link(temp, target)  # fails if someone created the file meanwhile
            os.unlink(temp)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def _read_key_file(path: PathLike, label: str) -> bytes:
    target = Path(path)
    try:
        text = target.read_text(encoding="ascii")
    except UnicodeDecodeError:
        raise InvalidKey(f"{target}: not a WheelFed key file (not ASCII text)") from None
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if len(lines) != 1 or len(lines[0].split()) != 2:
        raise InvalidKey(f"{target}: expected one line '<label> <64 hex digits>', got {len(lines)} data lines")
    found, hex_key = lines[0].split()
    if found != label:
        hint = ""
        if found == _SEED_LABEL and label == _PUBLIC_LABEL:
            hint = (
                ": this is the aggregator's SECRET signing key; gateways need only the public key "
                "(export it with save_verify_key) and the secret should never leave the aggregator"
            )
        elif found == _PUBLIC_LABEL and label == _SEED_LABEL:
            hint = ": this is a public key; signing needs the secret key file"
        raise InvalidKey(f"{target}: expected a {label!r} line, found {found!r}{hint}")
    try:
        data = bytes.fromhex(hex_key)
    except ValueError:
        raise InvalidKey(f"{target}: the key is not valid hex") from None
    if len(data) != 32:
        raise InvalidKey(f"{target}: the key must be 32 bytes (64 hex digits), got {len(data)} bytes")
    return data


def save_signing_key(key: SigningKey, path: PathLike, *, overwrite: bool = False) -> None:
    """Write the secret seed to ``path`` with mode 0600; refuses to replace an existing file
    unless ``overwrite`` (a lost signing key means re-provisioning every gateway)."""
    text = (
        f"# WheelFed aggregator model-signing key (SECRET; keep mode 0600). key id {key.key_id}\n"
        f"{_SEED_LABEL} {key.seed.hex()}\n"
    )
    _write_key_file(path, text, 0o600, overwrite)


def load_signing_key(path: PathLike, *, check_permissions: bool = True) -> SigningKey:
    """Read a key written by ``save_signing_key``. Like ssh, refuses a file that group or others
    can read or write (``chmod 600 FILE`` fixes it) unless ``check_permissions=False``."""
    if check_permissions and os.name == "posix":
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & 0o077:
            raise PermissionError(
                f"{path}: signing key file has mode {mode:04o}; it must not be accessible to group/others "
                f"(run: chmod 600 {path})"
            )
    return SigningKey(_read_key_file(path, _SEED_LABEL))


def save_verify_key(key: VerifyKey | SigningKey, path: PathLike, *, overwrite: bool = False) -> None:
    """Write the public key (what gateways are provisioned with) to ``path``, mode 0644."""
    public = key.verify_key if isinstance(key, SigningKey) else key
    text = (
        f"# WheelFed aggregator model-verification key. key id {public.key_id}\n{_PUBLIC_LABEL} {bytes(public).hex()}\n"
    )
    _write_key_file(path, text, 0o644, overwrite)


def load_verify_key(path: PathLike) -> VerifyKey:
    """Read a public key written by ``save_verify_key`` (validated: canonical, not of small order)."""
    data = _read_key_file(path, _PUBLIC_LABEL)
    try:
        return VerifyKey(data)
    except InvalidKey as exc:
        raise InvalidKey(f"{path}: {exc}") from None
