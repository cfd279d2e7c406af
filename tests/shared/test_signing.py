"""shared.signing: RFC 8032 vectors, agreement with ``cryptography``, strict rejection, key files.

``shared.signing`` is a thin layer over ``cryptography`` (OpenSSL); these tests pin what that
layer adds -- the vectors still hold, keys OpenSSL would accept forgeries for are refused, the
key files are unchanged -- so a change of OpenSSL version cannot loosen it unnoticed."""

from __future__ import annotations

import hashlib
import inspect
import os
import pickle
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

import shared.signing
from shared.signing import (
    BadSignature,
    InvalidKey,
    SigningKey,
    VerifyKey,
    key_id,
    load_signing_key,
    load_verify_key,
    save_signing_key,
    save_verify_key,
)

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, -1, P) % P

# RFC 8032 §7.1: (secret key, public key, message, signature), hex. TEST 1, 2, 3, 1024, SHA(abc).
RFC8032_VECTORS = [
    pytest.param(
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
        id="TEST 1",
    ),
    pytest.param(
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
        id="TEST 2",
    ),
    pytest.param(
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
        id="TEST 3",
    ),
    pytest.param(
        "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
        "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
        "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1e355f6c5"
        "0544e23fb1433ddf73be84d879de7c0046dc4996d9e773f4bc9efe5738829adb26c81b37c93a1b270b20329d658675fc6ea534e0"
        "810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a7363c344fe6b199ee5d02e82"
        "d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e06203b33890cc9b832f79ef80560ccb9"
        "a39ce767967ed628c6ad573cb116dbefefd75499da96bd68a8a97b928a8bbc103b6621fcde2beca1231d206be6cd9ec7aff6f6c9"
        "4fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed185ce81bd84359d44254d95629e9855a94a7c1958d1f8ada5"
        "d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88"
        "425de6bde1a9187ebb6092cf67bf2b13fd65f27088d78b7e883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc"
        "2732e69485bbc9c90bfbd62481d9089beccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a569d80"
        "c3414a8d0859dc65a46128bab27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae078"
        "4504df543af8969be3ea7082ff7fc9888c144da2af58429ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9"
        "b47acdb751fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847dd988d"
        "cda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34dff7310fdc"
        "82aebfd904b01e1dc54b2927094b2db68d6f903b68401adebf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7984a74d371459867"
        "80fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e488acba6b965610b5480109c8"
        "b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac0943bf6686b64b2579376504ccc493d97e"
        "6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f256656168e6c496afc5fb93246f6b1116398a346f1a641f3b041e989f791"
        "4f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f1610e4eafe595f6d9d90d11faa933a15ef1369546868a7f3a45"
        "a96768d40fd9d03412c091c6315cf4fde7cb68606937380db2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac"
        "86aba41c0618983f8741c5ef68d3a101e8a3b8cac60c905c15fc910840b94c00a0b9d0",
        "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03",
        id="TEST 1024",
    ),
    pytest.param(
        "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
        "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
        "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
        "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704",
        id="TEST SHA(abc)",
    ),
]


def encode_point(y: int, sign: int = 0) -> bytes:
    return (y | sign << 255).to_bytes(32, "little")


def is_square(value: int) -> bool:
    return value % P == 0 or pow(value, (P - 1) // 2, P) == 1


# --- RFC 8032 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("secret", "public", "message", "signature"), RFC8032_VECTORS)
def test_rfc8032_vectors(secret: str, public: str, message: str, signature: str) -> None:
    key = SigningKey.from_seed(bytes.fromhex(secret))
    assert bytes(key.verify_key).hex() == public
    assert key.sign(bytes.fromhex(message)).hex() == signature
    VerifyKey(bytes.fromhex(public)).verify(bytes.fromhex(message), bytes.fromhex(signature))


def test_rfc8032_message_lengths() -> None:
    """The long vectors were typed correctly: TEST 1024 is 1023 bytes, SHA(abc) is SHA-512("abc")."""
    assert len(bytes.fromhex(RFC8032_VECTORS[3].values[2])) == 1023
    assert bytes.fromhex(RFC8032_VECTORS[4].values[2]) == hashlib.sha512(b"abc").digest()


def test_sign_is_deterministic_and_accepts_bytes_likes() -> None:
    key = SigningKey.from_seed(bytes(range(32)))
    message = b"model v7"
    signature = key.sign(message)
    assert len(signature) == 64 and key.sign(bytearray(message)) == signature
    key.verify_key.verify(memoryview(message), bytearray(signature))
    with pytest.raises(TypeError):
        key.sign("text")  # type: ignore[arg-type]


def test_key_id_is_sha256_prefix() -> None:
    key = SigningKey.generate()
    public = bytes(key.verify_key)
    assert key.key_id == key.verify_key.key_id == key_id(public) == hashlib.sha256(public).digest()[:8].hex()
    assert len(key.key_id) == 16
    assert SigningKey.generate().key_id != key.key_id


# --- agreement with cryptography (OpenSSL) --------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=600))
def test_matches_cryptography(seed: bytes, message: bytes) -> None:
    ours = SigningKey.from_seed(seed)
    theirs = Ed25519PrivateKey.from_private_bytes(seed)
    public = theirs.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert bytes(ours.verify_key) == public
    signature = ours.sign(message)
    assert signature == theirs.sign(message)  # Ed25519 signing is deterministic
    theirs.public_key().verify(signature, message)
    ours.verify_key.verify(message, signature)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32),
    message=st.binary(max_size=200),
    where=st.sampled_from(["signature", "message"]),
    position=st.integers(0, 10_000),
    bit=st.integers(0, 7),
)
def test_tampering_rejected_like_cryptography(seed: bytes, message: bytes, where: str, position: int, bit: int) -> None:
    key = SigningKey.from_seed(seed)
    signature = bytearray(key.sign(message))
    if where == "signature" or not message:
        signature[position % 64] ^= 1 << bit
    else:
        message = bytearray(message)
        message[position % len(message)] ^= 1 << bit
        message = bytes(message)
    with pytest.raises(BadSignature):
        key.verify_key.verify(message, bytes(signature))
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(bytes(key.verify_key)).verify(bytes(signature), message)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.binary(min_size=32, max_size=32), other=st.binary(min_size=32, max_size=32), message=st.binary(max_size=64)
)
def test_signature_of_another_key_rejected(seed: bytes, other: bytes, message: bytes) -> None:
    if seed == other:
        return
    signature = Ed25519PrivateKey.from_private_bytes(other).sign(message)
    with pytest.raises(BadSignature, match="different key"):
        SigningKey.from_seed(seed).verify_key.verify(message, signature)


@settings(max_examples=30, deadline=None)
@given(seed=st.binary(min_size=32, max_size=32), position=st.integers(0, 31), bit=st.integers(0, 7))
def test_tampered_public_key_rejected(seed: bytes, position: int, bit: int) -> None:
    key = SigningKey.from_seed(seed)
    signature = key.sign(b"payload")
    public = bytearray(bytes(key.verify_key))
    public[position] ^= 1 << bit
    with pytest.raises((InvalidKey, BadSignature)):  # not a valid key, or a key that did not sign
        VerifyKey(bytes(public)).verify(b"payload", signature)


# --- strictness ------------------------------------------------------------------------------------
KEY = SigningKey.from_seed(bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"))
MESSAGE = b"tree ensemble"
SIGNATURE = KEY.sign(MESSAGE)


def test_non_canonical_s_rejected() -> None:
    s = int.from_bytes(SIGNATURE[32:], "little")
    assert s + L < 2**256
    malleable = SIGNATURE[:32] + (s + L).to_bytes(32, "little")  # same point equation, S >= L
    with pytest.raises(BadSignature, match="S >= L"):
        KEY.verify_key.verify(MESSAGE, malleable)
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(bytes(KEY.verify_key)).verify(malleable, MESSAGE)
    with pytest.raises(BadSignature, match="S >= L"):
        KEY.verify_key.verify(MESSAGE, SIGNATURE[:32] + L.to_bytes(32, "little"))
    with pytest.raises(BadSignature, match="S >= L"):
        KEY.verify_key.verify(MESSAGE, SIGNATURE[:32] + b"\xff" * 32)


@pytest.mark.parametrize("length", [0, 1, 32, 63, 65, 128])
def test_wrong_signature_length_rejected(length: int) -> None:
    signature = (SIGNATURE * 3)[:length]
    with pytest.raises(BadSignature, match="64 bytes"):
        KEY.verify_key.verify(MESSAGE, signature)


@pytest.mark.parametrize("length", [0, 31, 33, 64])
def test_wrong_key_lengths_rejected(length: int) -> None:
    with pytest.raises(InvalidKey, match="32 bytes"):
        VerifyKey(bytes(length))
    with pytest.raises(InvalidKey, match="32 bytes"):
        SigningKey.from_seed(bytes(length))


def test_bad_types_rejected() -> None:
    with pytest.raises(TypeError):
        VerifyKey(bytes(KEY.verify_key).hex())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        KEY.verify_key.verify(MESSAGE.decode(), SIGNATURE)  # type: ignore[arg-type]


def test_non_canonical_point_encodings_rejected() -> None:
    # y = p + 1 is the canonical y = 1 written non-canonically; y = p, 2^255 - 1 likewise.
    for y in (P + 2, P + 3, 2**255 - 1):
        with pytest.raises(InvalidKey, match="not canonical"):
            VerifyKey(encode_point(y))
        with pytest.raises(BadSignature):  # OpenSSL compares R's bytes with its canonical re-encoding
            KEY.verify_key.verify(MESSAGE, encode_point(y) + SIGNATURE[32:])


def test_points_not_on_the_curve_verify_nothing() -> None:
    """Without curve arithmetic of its own, the module cannot tell an off-curve key at load;
    OpenSSL refuses to decode it, so every signature fails -- nothing is ever accepted."""
    off_curve = [y for y in range(2, 60) if not is_square((y * y - 1) * pow(D * y * y + 1, -1, P))]
    assert len(off_curve) >= 5
    for y in off_curve[:5]:
        for sign in (0, 1):
            with pytest.raises(BadSignature):
                VerifyKey(encode_point(y, sign)).verify(MESSAGE, SIGNATURE)
            with pytest.raises(BadSignature):
                KEY.verify_key.verify(MESSAGE, encode_point(y, sign) + SIGNATURE[32:])


#: y of the 8 points of small order (the torsion points): 1 (identity), p-1 (order 2), 0 (order 4,
#: x = +-sqrt(-1)) and the two y of order 8 (libsodium's blocklist, ge25519_has_small_order).
Y8 = 2707385501144840649318225287225658788936804267575313519463743609750303402022
TORSION = [
    encode_point(1),
    encode_point(P - 1),
    encode_point(0),
    encode_point(0, 1),
    *(encode_point(y, sign) for y in (Y8, P - Y8) for sign in (0, 1)),
]


def test_order_8_y_is_on_the_curve() -> None:
    """Y8 was typed correctly: a point with that y exists (x^2 = (y^2 - 1) / (d y^2 + 1) is a
    square); that it has small order is what the forgery test below shows."""
    assert is_square((Y8 * Y8 - 1) * pow(D * Y8 * Y8 + 1, -1, P))
    assert len(set(TORSION)) == 8


def test_small_order_keys_refused_where_openssl_alone_accepts_forgeries() -> None:
    """With a public key of small order, ``[k]A`` takes at most 8 values, so ``S = 0`` and ``R``
    one of the 8 torsion points verifies for about one message in eight: OpenSSL (as used by
    ``cryptography``) accepts such forgeries, shown here for every torsion key. ``VerifyKey``
    refuses those keys, under each of their encodings."""
    for public in TORSION:
        theirs = Ed25519PublicKey.from_public_bytes(public)
        forged = None
        for n in range(200):
            message = b"forged %d" % n
            for r in TORSION:
                try:
                    theirs.verify(r + bytes(32), message)
                except InvalidSignature:
                    continue
                forged = (message, r + bytes(32))
                break
            if forged:
                break
        assert forged is not None, f"no forgery found for {public.hex()}"
        with pytest.raises(InvalidKey, match="small order"):
            VerifyKey(public)
        y = int.from_bytes(public, "little") & ((1 << 255) - 1)
        with pytest.raises(InvalidKey, match="small order"):
            VerifyKey(encode_point(y, 1 - (public[31] >> 7)))  # the other sign bit
    with pytest.raises(InvalidKey, match="not canonical"):
        VerifyKey(encode_point(P + 1))  # the identity, non-canonically: also accepted by OpenSSL alone


def test_ed25519_comes_from_cryptography() -> None:
    """No curve arithmetic of our own: no modular powers or inverses, no point operations, no
    SHA-512 of the signature scheme -- OpenSSL does all of it."""
    source = inspect.getsource(shared.signing)
    assert "from cryptography.hazmat.primitives.asymmetric.ed25519 import" in source
    for arithmetic in ("pow(", "% _", "_double", "_mul", "sha512"):
        assert arithmetic not in source, arithmetic


def test_bad_signature_is_a_value_error_with_a_clear_message() -> None:
    assert issubclass(BadSignature, ValueError) and issubclass(InvalidKey, ValueError)
    with pytest.raises(BadSignature) as info:
        KEY.verify_key.verify(MESSAGE + b"!", SIGNATURE)
    assert KEY.key_id in str(info.value) and "altered" in str(info.value)


def test_secret_is_not_exposed() -> None:
    assert KEY.seed.hex() not in repr(KEY)
    with pytest.raises(TypeError, match="not picklable"):
        pickle.dumps(KEY)


# --- key files ------------------------------------------------------------------------------------------
def test_signing_key_file_round_trip(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "aggregator.key"
    save_signing_key(key, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = load_signing_key(path)
    assert loaded == key and loaded.key_id == key.key_id
    assert loaded.sign(b"m") == key.sign(b"m")
    assert key.key_id in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["aggregator.key"]  # no temp files left


def test_signing_key_file_refuses_overwrite(tmp_path: Path) -> None:
    first, second = SigningKey.generate(), SigningKey.generate()
    path = tmp_path / "aggregator.key"
    first.save(path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_signing_key(second, path)
    assert load_signing_key(path) == first
    old_umask = os.umask(0)
    try:
        second.save(path, overwrite=True)
    finally:
        os.umask(old_umask)
    assert load_signing_key(path) == second
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_signing_key_file_permissions_checked(tmp_path: Path) -> None:
    path = tmp_path / "aggregator.key"
    save_signing_key(SigningKey.generate(), path)
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        load_signing_key(path)
    assert load_signing_key(path, check_permissions=False).key_id


def test_verify_key_file_round_trip(tmp_path: Path) -> None:
    key = SigningKey.generate()
    path = tmp_path / "aggregator.pub"
    save_verify_key(key, path)  # from the signing key ...
    assert load_verify_key(path) == key.verify_key
    key.verify_key.save(path, overwrite=True)  # ... or from the public key
    loaded = load_verify_key(path)
    loaded.verify(b"m", key.sign(b"m"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert key.seed.hex() not in path.read_text()


def test_key_files_are_not_interchangeable(tmp_path: Path) -> None:
    key = SigningKey.generate()
    save_signing_key(key, tmp_path / "k")
    save_verify_key(key, tmp_path / "k.pub")
    with pytest.raises(InvalidKey, match="SECRET"):
        load_verify_key(tmp_path / "k")
    with pytest.raises(InvalidKey, match="public key"):
        load_signing_key(tmp_path / "k.pub", check_permissions=False)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n",
        "wheelfed-ed25519-public\n",
        "wheelfed-ed25519-public zz" + "00" * 31 + "\n",
        "wheelfed-ed25519-public " + "00" * 31 + "\n",
        "wheelfed-ed25519-public " + "00" * 32 + " extra\n",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI\n",
        "wheelfed-ed25519-public " + encode_point(1).hex() + "\n",  # small order
        "wheelfed-ed25519-public " + "00" * 32 + "\nwheelfed-ed25519-public " + "00" * 32 + "\n",
    ],
)
def test_malformed_verify_key_files_rejected(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.pub"
    path.write_text(text)
    with pytest.raises(InvalidKey):
        load_verify_key(path)


def test_verify_key_file_tolerates_comments_and_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "k.pub"
    path.write_text(f"# provisioned 2025-01-01\n\n  wheelfed-ed25519-public   {bytes(KEY.verify_key).hex()}  \n")
    assert load_verify_key(path) == KEY.verify_key
