"""Keys: the signer interface (a PEM file today; a KMS signer implements the same two members) and trusted keys.

Keys are ECDSA on NIST P-256 (``openssl ecparam -name prime256v1 -genkey -noout``), or P-384/P-521, the curves
OpenSSF model-signing accepts, each with its matching SHA-2 hash. A key is named by its *hint*: the sha256 of its
public key as SubjectPublicKeyInfo PEM, which is what model-signing records in a bundle's ``publicKey.hint``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trtfarm.errors import UserInputError

if TYPE_CHECKING:  # cryptography is imported where a key is read: a run that signs nothing never loads it
    from cryptography.hazmat.primitives.asymmetric import ec

_HASHES = {"secp256r1": "SHA256", "secp384r1": "SHA384", "secp521r1": "SHA512"}
MAKE_KEY = "openssl ecparam -name prime256v1 -genkey -noout -out signing.pem"
PUBLIC_HALF = "openssl ec -in signing.pem -pubout -out signing.pub"  # a trusted key: the signing key's public half


class Signer(Protocol):
    """What signs a plan folder: its public key (SubjectPublicKeyInfo PEM) and a signature over bytes.

    ``sign`` returns the DER-encoded ECDSA signature of ``data`` with the curve's hash. A KMS-backed signer needs
    only these two members.
    """

    @property
    def public_key_pem(self) -> bytes:
        """The public key, SubjectPublicKeyInfo PEM."""

    def sign(self, data: bytes) -> bytes:
        """DER ECDSA signature over ``data``."""


def key_hint(public_key_pem: bytes) -> str:
    """A key's name in bundles and messages: sha256 of its SubjectPublicKeyInfo PEM (model-signing's hint)."""
    return hashlib.sha256(public_key_pem).hexdigest()


def _ecdsa(curve: ec.EllipticCurve, source: str) -> ec.ECDSA:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if curve.name not in _HASHES:
        raise UserInputError(f"{source}: an ECDSA key on {curve.name}; use P-256 ({MAKE_KEY})")
    return ec.ECDSA(getattr(hashes, _HASHES[curve.name])())


def _spki_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _read(path: Path, source: str, what: str) -> bytes:
    """The key file's bytes; a file that cannot be read names the fix for its kind of key.

    A missing public key is never answered with a new private key: a trusted key is the public half of the key
    that signs, made from it where it is kept (``PUBLIC_HALF``) and copied here.
    """
    try:
        return Path(path).read_bytes()
    except OSError as err:
        fix = f"make it from the signing key with `{PUBLIC_HALF}` where that key is kept, and copy it here" \
            if what == "public key" else f"create one with `{MAKE_KEY}`"
        raise UserInputError(f"{source}: cannot read the {what} {path} ({err.strerror}); {fix}, or fix the "
                             "path") from err


class PemKeySigner:
    """A signer holding an unencrypted ECDSA private key from a PEM file (SEC1 or PKCS#8)."""

    def __init__(self, path: str | Path, source: str = "signing key") -> None:
        """Load the key at ``path``; ``source`` (the setting that named it) goes into error messages."""
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        data = _read(Path(path), source, "signing key")
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except TypeError as err:
            raise UserInputError(f"{source}: {path} is encrypted; trtfarm reads unencrypted PEM keys (keep the file "
                                 "readable by the worker only, or implement a KMS signer)") from err
        except (ValueError, UnsupportedAlgorithm) as err:
            raise UserInputError(f"{source}: {path} is not a PEM private key ({err}); create one with "
                                 f"`{MAKE_KEY}`") from err
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise UserInputError(f"{source}: {path} is a {type(key).__name__.lstrip('_')}, not an ECDSA key; create "
                                 f"one with `{MAKE_KEY}`")
        self.path, self._key = Path(path), key
        self._algorithm = _ecdsa(key.curve, f"{source} {path}")
        self.public_key_pem = _spki_pem(key.public_key())
        self.hint = key_hint(self.public_key_pem)

    def sign(self, data: bytes) -> bytes:
        """DER ECDSA signature over ``data``."""
        return self._key.sign(data, self._algorithm)


@dataclass(frozen=True)
class TrustedKey:
    """One public key the fleet trusts, and where it was configured."""

    path: Path
    hint: str
    key: ec.EllipticCurvePublicKey

    def verifies(self, signature: bytes, data: bytes) -> bool:
        """True when ``signature`` (DER ECDSA) is this key's over ``data``."""
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(signature, data, _ecdsa(self.key.curve, str(self.path)))
        except InvalidSignature:
            return False
        return True

    @property
    def label(self) -> str:
        """``<hint:12> (<path>)`` for messages."""
        return f"{self.hint[:12]} ({self.path})"


def load_public_key(path: str | Path, source: str) -> TrustedKey:
    """Read one trusted public key (SubjectPublicKeyInfo PEM)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = _read(Path(path), source, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as err:
        raise UserInputError(f"{source}: {path} is not a PEM public key ({err}); make one from the signing key with "
                             f"`{PUBLIC_HALF}`") from err
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise UserInputError(f"{source}: {path} is not an ECDSA public key")
    _ecdsa(key.curve, f"{source} {path}")
    return TrustedKey(Path(path), key_hint(_spki_pem(key)), key)


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys verification accepts (several during a rotation), and the setting that named them."""

    keys: tuple[TrustedKey, ...]
    source: str

    def by_hint(self, hint: str) -> TrustedKey | None:
        """The trusted key with this hint, or None."""
        return next((k for k in self.keys if k.hint == hint), None)

    def describe(self) -> str:
        """``2 trusted key(s) from TRTFARM_TRUSTED_KEYS: 1a2b.. (a.pub), ...``."""
        return f"{len(self.keys)} trusted key(s) from {self.source}: " + ", ".join(k.label for k in self.keys)


def load_trusted_keys(paths: Sequence[str | Path] | Iterable[str | Path], source: str) -> TrustedKeys:
    """Read every trusted public key; an empty list is a configuration error (it would trust nothing)."""
    keys = tuple(load_public_key(p, source) for p in paths)
    if not keys:
        raise UserInputError(f"{source}: no public keys listed; name one or more PEM files (PATH[,PATH...])")
    return TrustedKeys(keys, source)
