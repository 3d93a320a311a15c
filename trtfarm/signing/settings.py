"""Where the signing key and the trusted keys come from: the environment first, then ``gpu_targets.yaml``.

``TRTFARM_SIGNING_KEY=PATH`` (a PEM private key) makes every build and farm child sign what it publishes;
``TRTFARM_TRUSTED_KEYS=PATH[,PATH...]`` (PEM public keys) turns on verification. ``gpu_targets.yaml`` can hold the
same two settings (``signing: {key: PATH, trusted_keys: [PATH, ...]}``); a variable that is set wins over the file.
Keys are read only when used, so this module imports no cryptography.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SIGNING_KEY_ENV, TRUSTED_KEYS_ENV = "TRTFARM_SIGNING_KEY", "TRTFARM_TRUSTED_KEYS"


@dataclass(frozen=True)
class SigningSettings:
    """The configured key paths and the setting each came from (for messages)."""

    key: Path | None = None
    key_source: str = ""
    trusted: tuple[Path, ...] = ()
    trusted_source: str = ""

    def signer(self):
        """The signer of this machine's publishes (a ``PemKeySigner``), or None when no key is configured."""
        if self.key is None:
            return None
        from trtfarm.signing.keys import PemKeySigner

        return PemKeySigner(self.key, self.key_source)

    def trusted_keys(self):
        """The ``TrustedKeys`` verification accepts, or None when no trusted key is configured."""
        if not self.trusted:
            return None
        from trtfarm.signing.keys import load_trusted_keys

        return load_trusted_keys(self.trusted, self.trusted_source)


def _paths(value: str) -> tuple[Path, ...]:
    return tuple(Path(p.strip()).expanduser() for p in value.split(",") if p.strip())


def settings_from(env: Mapping[str, str] | None = None, *, file_key: Path | None = None,
                  file_trusted: Sequence[Path] = (), file_source: str = "gpu_targets.yaml") -> SigningSettings:
    """Combine the environment (``env``, default ``os.environ``) with what the fleet file declares."""
    env = os.environ if env is None else env
    key_value, trusted_value = env.get(SIGNING_KEY_ENV, "").strip(), env.get(TRUSTED_KEYS_ENV, "").strip()
    key, key_source = (Path(key_value).expanduser(), SIGNING_KEY_ENV) if key_value else \
        (file_key, f"{file_source}: signing.key") if file_key else (None, "")
    trusted, trusted_source = (_paths(trusted_value), TRUSTED_KEYS_ENV) if trusted_value else \
        (tuple(file_trusted), f"{file_source}: signing.trusted_keys") if file_trusted else ((), "")
    return SigningSettings(key, key_source, trusted, trusted_source)


def env_decides(only: str | None = None, env: Mapping[str, str] | None = None) -> bool:
    """True when the environment sets what is needed (``only="key"``, ``"trust"``, or both), so no file is read."""
    env = os.environ if env is None else env
    has = {"key": bool(env.get(SIGNING_KEY_ENV, "").strip()), "trust": bool(env.get(TRUSTED_KEYS_ENV, "").strip())}
    return has[only] if only else all(has.values())
