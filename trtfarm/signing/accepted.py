"""What a serving host remembers of the releases it accepted, and the rollback and freeze checks that use it.

A host keeps, per (store, model, GPU, toolchain), the last release version it accepted, with the manifest and the
export time. A claim with a lower version is a rollback of the metadata (a bucket writer serving last month's
pointer again) and is refused; one at the same version must name the same manifest. A higher version that moves to
an older export is refused unless it is an operator's signed ``rollback``. A claim past its ``expires_at``, or
issued longer ago than the host's ``TRTFARM_RELEASE_MAX_AGE``, is refused as frozen (a writer keeping the host on
an old view). The file is ``TRTFARM_RELEASE_STATE``, else ``$XDG_STATE_HOME/trtfarm/accepted-releases.json``
(``~/.local/state/...``); it is written atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from trtfarm.errors import OutputRefused, UserInputError
from trtfarm.signing.bundle import SignatureRefused
from trtfarm.signing.release_claim import ReleaseClaim

STATE_ENV, MAX_AGE_ENV = "TRTFARM_RELEASE_STATE", "TRTFARM_RELEASE_MAX_AGE"
_AGE = re.compile(r"^(\d+)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str, source: str = MAX_AGE_ENV) -> timedelta:
    """``90``, ``90s``, ``15m``, ``36h`` or ``14d`` as a duration; one line naming the setting otherwise."""
    match = _AGE.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise UserInputError(f"{source}={text!r} is not an age; write seconds or 15m, 36h, 14d")
    try:
        return timedelta(seconds=int(match.group(1)) * _UNIT[match.group(2)])
    except OverflowError:  # past timedelta's 999,999,999 days
        raise UserInputError(f"{source}={text!r} is longer than any age trtfarm can count; write at most "
                             "36500d (or leave it unset: each claim's own expiry still holds)") from None


def configured_max_age(env: dict[str, str] | None = None) -> timedelta | None:
    """The host's freeze limit from ``TRTFARM_RELEASE_MAX_AGE`` (None: only each claim's own expiry)."""
    value = (os.environ if env is None else env).get(MAX_AGE_ENV, "").strip()
    return parse_age(value) if value else None


def state_path(env: dict[str, str] | None = None) -> Path:
    """Where this host remembers accepted releases."""
    env = os.environ if env is None else env
    if env.get(STATE_ENV, "").strip():
        return Path(env[STATE_ENV]).expanduser()
    base = env.get("XDG_STATE_HOME", "").strip() or str(Path.home() / ".local" / "state")
    return Path(base) / "trtfarm" / "accepted-releases.json"


@dataclass(frozen=True)
class Accepted:
    """The last release a host accepted for one pointer."""

    version: int
    manifest_sha256: str
    exported_at: str | None


class AcceptedReleases:
    """The host's memory, one JSON file: ``{"<store>#<model>/<gpu>/<toolchain>": {version, manifest_sha256, ...}}``."""

    def __init__(self, path: Path | None = None) -> None:
        """Read ``path`` (default ``state_path()``); a missing file is an empty memory."""
        self.path = Path(path) if path is not None else state_path()
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            doc = {}
        except (OSError, ValueError) as err:
            raise UserInputError(f"{self.path}: the accepted-releases file cannot be read ({err}); it guards this "
                                 f"host against rollbacks, so restore it, or remove it to trust the next release "
                                 f"as new ({STATE_ENV} names another)") from err
        self._doc = doc if isinstance(doc, dict) else {}

    def get(self, store: str, identity: str) -> Accepted | None:
        """The last accepted release of ``identity`` from ``store``, or None."""
        entry = self._doc.get(f"{store}#{identity}")
        if not isinstance(entry, dict):
            return None
        try:
            return Accepted(int(entry["version"]), str(entry["manifest_sha256"]), entry.get("exported_at"))
        except (KeyError, TypeError, ValueError):
            return None

    def remember(self, store: str, claim: ReleaseClaim) -> None:
        """Record ``claim`` as accepted (only ever upwards) and write the file atomically."""
        before = self.get(store, claim.track)
        if before is not None and before.version > claim.version:
            return
        self._doc[f"{store}#{claim.track}"] = {"version": claim.version, "manifest_sha256": claim.manifest_sha256,
                                                  "exported_at": claim.exported_at, "action": claim.action,
                                                  "issued_at": claim.issued_at}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self._doc, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise self._refused(err) from err

    def check_writable(self) -> None:
        """Refuse (before any download) when this host's memory cannot be written: a pull must remember what it took.

        Creates the folder where missing, and a temporary file in it, removed again.
        """
        probe = self.path.with_name(f".{self.path.name}.{os.getpid()}.probe")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise self._refused(err) from err

    def _refused(self, err: OSError) -> OutputRefused:
        return OutputRefused(f"{self.path}: this host's accepted-releases file cannot be written "
                             f"({err.strerror or err}); make {self.path.parent} writable, or set {STATE_ENV} to a "
                             "file in a folder you can write")


def check_not_frozen(claim: ReleaseClaim, now: datetime, max_age: timedelta | None) -> None:
    """Refuse a claim past its expiry, or issued longer ago than ``max_age`` (``SignatureRefused``: ``frozen``)."""
    if now > claim.expires():
        raise SignatureRefused("frozen", f"the release of {claim.identity} (version {claim.version}) expired at "
                               f"{claim.expires_at}; a current release is re-signed before it expires (`trtfarm "
                               "sign` refreshes it)")
    if max_age is not None and now - claim.issued() > max_age:
        raise SignatureRefused("frozen", f"the release of {claim.identity} (version {claim.version}) was issued at "
                               f"{claim.issued_at}, older than this host's {MAX_AGE_ENV} ({max_age}); `trtfarm "
                               "sign` refreshes it")


def check_not_rolled_back(claim: ReleaseClaim, before: Accepted | None) -> None:
    """Refuse a claim older than the one this host accepted (``SignatureRefused``: ``rollback``)."""
    if before is None:
        return
    if claim.version < before.version:
        raise SignatureRefused("rollback", f"the release of {claim.identity} is version {claim.version}, and this "
                               f"host already accepted version {before.version}: an older release served again")
    if claim.version == before.version and claim.manifest_sha256 != before.manifest_sha256:
        raise SignatureRefused("rollback", f"the release of {claim.identity} version {claim.version} names manifest "
                               f"{claim.manifest_sha256[:12]}, and this host accepted version {claim.version} "
                               f"naming {before.manifest_sha256[:12]}")
    older = bool(claim.exported_at and before.exported_at and claim.exported_at < before.exported_at)
    if older and claim.action != "rollback":
        raise SignatureRefused("rollback", f"the release of {claim.identity} version {claim.version} goes back to an "
                               f"export of {claim.exported_at} from {before.exported_at} without an operator's "
                               "`trtfarm release --rollback`")
