"""Release pointers: ``releases/<model>/<gpu>/<toolchain>-<version>.json`` names the plan serving hosts pull.

A pointer moves by compare-and-swap, only when the target's verification policy accepts the manifest (default: the
engine was validated on the target GPU; a target may opt into ``built``), and never to an older export unless a
person rolls it back on purpose. Every move is recorded in the pointer's history with who and why.
"""

from __future__ import annotations

import getpass
import socket
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trtfarm.errors import UserInputError
from trtfarm.publishing.layout import release_key, releases_prefix
from trtfarm.publishing.manifest import Manifest
from trtfarm.store import Conflict, Store

HISTORY = 50


class ReleaseRefused(UserInputError):
    """The pointer may not move to this plan; the message says why and how to override on purpose."""


class ReleaseEvent(BaseModel):
    """One move of a pointer."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["release", "rollback", "forced"]
    manifest: str
    onnx_digest: str
    exported_at: str | None
    at: str
    by: str
    reason: str


class ReleasePointer(BaseModel):
    """What a serving host of (model, GPU, toolchain version) should run."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1] = 1
    model: str
    gpu: str
    toolchain: str
    manifest: str
    plan_key: str
    plan_sha256: str
    onnx_digest: str
    build_digest: str
    exported_at: str | None
    history: list[ReleaseEvent] = Field(default_factory=list)

    @property
    def current(self) -> ReleaseEvent:
        """The move that put the pointer where it is."""
        return self.history[-1]


def toolchain_label(m: Manifest) -> str:
    """``tensorrt-11.4.0.106`` for a manifest's target."""
    return f"{m.target.flavour}-{m.target.toolchain_version}"


def pointer_key(m: Manifest) -> str:
    """The pointer this manifest's plan would be released under."""
    return release_key(m.model.name, m.target.gpu, toolchain_label(m))


def policy_blocker(m: Manifest, release_on: str) -> str | None:
    """Why the verification policy refuses this manifest, or None when it accepts it."""
    failed = [k for k, c in m.verification if c.status == "failed"]
    if failed:
        return f"verification failed ({', '.join(failed)}): {getattr(m.verification, failed[0]).detail}"
    if release_on == "engine" and m.verification.engine.status != "passed":
        return (f"the engine check is {m.verification.engine.status} on {m.target.gpu_name}; this target releases "
                "only a plan validated on its GPU (set release_on: built in gpu_targets.yaml to release on build)")
    if m.verification.built.status != "passed":
        return f"the build check is {m.verification.built.status}"
    return None


def read_pointer(store: Store, key: str) -> tuple[ReleasePointer | None, str | None]:
    """The pointer and its ETag (both None when there is none)."""
    blob = store.get(key)
    return (ReleasePointer.model_validate_json(blob.data), blob.etag) if blob else (None, None)


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _older(m: Manifest, current: ReleasePointer) -> bool:
    return bool(m.model.exported_at and current.exported_at and m.model.exported_at < current.exported_at)


def move_release(store: Store, manifest_key: str, m: Manifest, *, release_on: str = "engine", reason: str,
                 by: str | None = None, rollback: bool = False, force: bool = False,
                 max_attempts: int = 20, trust=None) -> ReleasePointer:
    """Point (model, GPU, toolchain) at ``manifest_key``; ``ReleaseRefused`` when policy or ordering forbid it.

    With ``trust`` (the fleet's ``TrustedKeys``), a plan that serving hosts would refuse is not released
    (``SignatureRefused``; ``force`` does not override it): a rotation keeps every plan signed by a still-trusted key.
    """
    if trust is not None:
        from trtfarm.publishing.attest import read_stored

        stored = read_stored(store, manifest_key)
        if stored is None:
            raise ReleaseRefused(f"not released: no manifest at {store.url(manifest_key)}")
        stored.verdict(trust).raise_if_refused(f"not released: {store.url(manifest_key)}")
    blocker = None if force else policy_blocker(m, release_on)
    if blocker:
        raise ReleaseRefused(f"not released: {blocker}")
    key = pointer_key(m)
    for _ in range(max_attempts):
        current, etag = read_pointer(store, key)
        if current and current.manifest == manifest_key:
            return current
        if current and _older(m, current) and not rollback:
            raise ReleaseRefused(
                f"not released: {key} points at an export from {current.exported_at}; this plan's export is older "
                f"({m.model.exported_at}). Use `trtfarm release MANIFEST --rollback --reason ...` to go back "
                "on purpose.")
        action = "forced" if force else "rollback" if rollback and current and _older(m, current) else "release"
        event = ReleaseEvent(action=action, manifest=manifest_key, onnx_digest=m.model.onnx_digest,
                             exported_at=m.model.exported_at, by=by or _who(), reason=reason,
                             at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        pointer = ReleasePointer(model=m.model.name, gpu=m.target.gpu, toolchain=toolchain_label(m),
                                 manifest=manifest_key, plan_key=m.plan.key, plan_sha256=m.plan.sha256,
                                 onnx_digest=m.model.onnx_digest, build_digest=m.build.build_digest,
                                 exported_at=m.model.exported_at,
                                 history=[*(current.history if current else []), event][-HISTORY:])
        try:
            store.compare_and_swap(key, pointer.model_dump_json(indent=2).encode(), etag)
            return pointer
        except Conflict:
            continue
    raise ReleaseRefused(f"{key}: {max_attempts} concurrent writers in a row; try again")


def release_note(store: Store, manifest_key: str, m: Manifest, release_on: str) -> str:
    """Say whether the release pointer points at this manifest, and if not, why (read back after a build)."""
    key = pointer_key(m)
    current, _ = read_pointer(store, key)
    if current and current.manifest == manifest_key:
        return f"released: {key}"
    blocker = policy_blocker(m, release_on)
    if blocker:
        return f"not released: {blocker}"
    return f"not released: {key} points at {current.manifest if current else 'nothing'}"


def list_pointers(store: Store, model: str | None = None) -> list[ReleasePointer]:
    """Every release pointer (of one model)."""
    out = []
    for key in store.list(releases_prefix(model)):
        pointer, _ = read_pointer(store, key)
        if pointer:
            out.append(pointer)
    return out
