"""What a serving host says of a release, asked of the function ``pull`` calls, for the fleet views.

``served_check`` runs ``release_check.served_release`` (the chain from pointer to plan, the serving images, the
signatures where keys are trusted) and keeps its answer on this machine per version of every object it read.
``release_refs`` asks it of every channel pointer, whatever the fleet: what each references, and whether hosts take
it (``gc`` keeps by it; a state record keeps it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from trtfarm import layout
from trtfarm.errors import TrtfarmError
from trtfarm.publishing.release_check import asked_channel, asked_identity
from trtfarm.signing.keys import TrustedKeys
from trtfarm.state.record import RecordedState
from trtfarm.state.summaries import PointerSummary
from trtfarm.state.survey import READ_THREADS, StoreSurvey
from trtfarm.store.base import side_by_side
from trtfarm.vocabulary.fleet import Fleet
from trtfarm.vocabulary.fleetview import ReleaseRef, TargetStatus
from trtfarm.vocabulary.pointer import ReleasePointer

if TYPE_CHECKING:
    from trtfarm.publishing.attest import StoredPlan


def has_release(c: TargetStatus) -> bool:
    """Whether the cell names a release a serving host would be given (a pointer at it)."""
    return c.state in ("released", "stale") and bool(c.manifest)


def release_key_of(c: TargetStatus) -> str:
    """The release pointer's key of a cell that names a release."""
    return layout.release_key(c.model, *_gpu_and_toolchain(c.manifest))


def _gpu_and_toolchain(manifest_key: str) -> tuple[str, str]:
    parsed = layout.parse_plan_key(manifest_key)
    return parsed.gpu, parsed.toolchain


def expired(at: str | None, now: datetime) -> bool:
    """Whether an ISO time (a claim's expiry) is past; an unreadable one is."""
    try:
        then = datetime.fromisoformat(at) if at else None
    except ValueError:
        return True
    return then is not None and (then if then.tzinfo else then.replace(tzinfo=timezone.utc)) <= now


@dataclass(frozen=True)
class ReadRelease:
    """A release pointer and the manifest it names, parsed from the bytes a view read (``served_check``)."""

    pointer: ReleasePointer
    stored: StoredPlan  # the manifest as ``attest.read_stored`` reads it without attestations


def read_release(objects: dict, key: str) -> ReadRelease | None:
    """The pointer at ``key`` and the manifest it names from ``objects`` (what a view parsed, by key), if both are."""
    from trtfarm.publishing.attest import StoredPlan

    pointer = objects.get(key)
    manifest = objects.get(pointer.manifest) if isinstance(pointer, ReleasePointer) else None
    if manifest is None:
        return None
    parsed, data = manifest
    return ReadRelease(pointer, StoredPlan(pointer.manifest, parsed, data, None, None))


@dataclass(frozen=True)
class ServedCheck:
    """What a serving host says of a release.

    ``refusal``: why it refuses it (None: it takes it); ``expires``: when the signed claim expires; ``keys``: the
    hints of the keys that signed the claim and the plan (with trusted keys).
    """

    refusal: str | None
    expires: str | None = None
    keys: tuple[str, ...] = ()


def served_check(survey: StoreSurvey, key: str, trust: TrustedKeys | None, fleet: Fleet | None,
                 now: datetime, read: ReadRelease | None = None) -> ServedCheck:
    """What a serving host (``pull``) says of the release at ``key`` (a release or candidate channel's pointer).

    ``fleet`` None: the serving images the manifest records, none the fleet declares besides.

    Asked of ``release_check.served_release`` itself; kept on this machine per version of every object the answer
    reads (the pointer, and every object of the plan folder it names), the trusted keys and the fleet's serving
    images, and asked again once the signed release it judged has expired. ``read``: the pointer at ``key`` and the
    manifest it names, as this view read them (the same checks, without reading them again; without trusted keys).
    """
    from trtfarm.publishing.release_check import served_from, served_release

    if survey.listed_pointer(key) is None:
        return ServedCheck(None)
    version = _version(survey, key, trust, fleet)
    kept = remembered_check(survey, key, trust, fleet, now, version)
    if kept is not None:
        return kept
    try:
        if read is not None and trust is None:
            served = served_from(survey.store, key, read.pointer, read.stored, None, fleet=fleet, now=now)
        else:
            served = served_release(survey.store, key, trust, fleet=fleet, now=now, attestations=False)
        claim = served.release.claim if served else None
        keys = [k.hint for k in (served.release.key, served.verdict.key) if k] if served else []
        check = ServedCheck(None, claim.expires_at if claim else None, tuple(dict.fromkeys(keys)))
    except TrtfarmError as refused:
        check = ServedCheck(one_line(str(refused)))
    survey.cache.put(_kind(trust, fleet), key, version, [check.refusal, check.expires, list(check.keys)])
    return check


def _kind(trust: TrustedKeys | None, fleet: Fleet | None) -> str:
    """The cache's kind of an answer: without or with trusted keys, with or without a fleet's serving images.

    Kept apart: one store's readers ask each of one release (gc without a fleet), and each would replace the other.
    """
    return ("served-trusted" if trust else "served") + ("" if fleet is not None else "-unpinned")


def _version(survey: StoreSurvey, key: str, trust: TrustedKeys | None, fleet: Fleet | None, named=None) -> str:
    """Everything a serving host's answer about ``key`` depends on, as one digest (``named``: its pointer's summary)."""
    named = named or survey.pointer_summaries([key]).get(key)  # read (or remembered) by the cell it is asked for
    objects = survey.folders.get(layout.folder_of(named.manifest), {}) if named else {}
    folder = ";".join(f"{k}@{o.version}" for k, o in sorted(objects.items()))
    stamp = ",".join(sorted(k.hint for k in trust.keys)) if trust else "-"
    parts = [survey.listed_pointer(key).version, folder, stamp, serving_print(fleet)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def remembered_check(survey: StoreSurvey, key: str, trust: TrustedKeys | None, fleet: Fleet | None, now: datetime,
                     version: str | None = None, named=None) -> ServedCheck | None:
    """The answer this machine kept for ``key`` at the versions listed now (None: ask ``served_check``)."""
    if survey.listed_pointer(key) is None:
        return ServedCheck(None)
    # a view asks both (its cells, then with keys): one entry each, or each answer would replace the other
    cached = survey.cache.get(_kind(trust, fleet), key, version or _version(survey, key, trust, fleet, named))
    if isinstance(cached, list) and len(cached) == 3 and all(isinstance(v, str | None) for v in cached[:2]) and \
            isinstance(cached[2], list) and all(isinstance(k, str) for k in cached[2]) and \
            not expired(cached[1], now):
        return ServedCheck(cached[0], cached[1], tuple(cached[2]))
    return None


def serving_print(fleet: Fleet | None) -> str:
    """What of the fleet a serving host's check reads: each toolchain's declared serving images (once per fleet)."""
    if fleet is None:
        return "-"
    kept = _SERVING.get(id(fleet))
    if kept is None or kept[0] is not fleet:
        kept = _SERVING[id(fleet)] = (fleet, ";".join(f"{k}={t.model_dump_json()}"
                                                      for k, t in sorted(fleet.toolchains.items())))
    return kept[1]


_SERVING: dict[int, tuple[Fleet, str]] = {}


def serving_digest(fleet: Fleet) -> str:
    """``serving_print`` as a digest: what a state record says its releases were checked against."""
    return hashlib.sha256(serving_print(fleet).encode()).hexdigest()


def one_line(text: str, limit: int = 300) -> str:
    """A multi-line reason (a parser's list of errors under its summary) as one line, at most ``limit`` long.

    A longer one is cut at a word boundary, never inside a word.
    """
    joined = " ".join(part.strip() for part in text.splitlines() if part.strip())
    if len(joined) <= limit:
        return joined
    cut = joined[:limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"


def refusals(survey: StoreSurvey, keys: list[str], fleet: Fleet | None, now: datetime,
             named: dict[str, PointerSummary]) -> dict[str, str | None]:
    """What a serving host without trusted keys says of the pointer at each of ``keys``: why it refuses it, or None.

    What this machine kept answers at once; the rest is asked many at once (``named``: the pointers' summaries).
    """
    out: dict[str, str | None] = {}
    for key in dict.fromkeys(keys):
        kept = remembered_check(survey, key, None, fleet, now, named=named.get(key))
        if kept is not None:
            out[key] = kept.refusal
    asked = [k for k in dict.fromkeys(keys) if k not in out]
    size = max(1, min(64, len(asked) // (READ_THREADS * 4)))  # a task per batch, as the survey reads
    batches = [asked[i:i + size] for i in range(0, len(asked), size)]
    with side_by_side(survey.store, READ_THREADS) as pool:
        for batch, answers in zip(batches, pool.map(lambda b: [
                served_check(survey, k, None, fleet, now).refusal for k in b], batches), strict=True):
            out.update(zip(batch, answers, strict=True))
    return out


def release_refs(survey: StoreSurvey, keys: list[str], now: datetime, fleet: Fleet | None = None) -> list[ReleaseRef]:
    """What each channel pointer at ``keys`` (release or candidate) references, and whether serving hosts take it.

    The part of the state that no fleet target scopes: every pointer the store lists has one, a target the fleet
    dropped too. Read as the cells are (the pointers' summaries, then ``served_check`` without trusted keys, with
    ``fleet``'s serving images where one is given), so ``gc`` and the views tell one story: a pointer that cannot be
    read, or names a missing or damaged manifest or another identity's, is refused in ``pull``'s words.
    """
    keys = list(dict.fromkeys(keys))
    named = survey.pointer_summaries(keys)
    found = refusals(survey, [k for k in keys if k not in survey.damaged], fleet, now, named)
    out = []
    for key in keys:
        refusal = survey.damaged.get(key) or found.get(key)
        ptr = named.get(key)
        out.append(ReleaseRef(key, asked_identity(key), asked_channel(key), ptr.manifest if ptr else None,
                              one_line(refusal) if refusal else None))
    return out


def recorded_refs(state: RecordedState, keys: list[str]) -> list[ReleaseRef] | None:
    """The references a state record holds for exactly the pointers at ``keys`` (None: it holds others, or none)."""
    if state.releases is None or set(state.releases) != set(keys):
        return None
    return [ReleaseRef(k, asked_identity(k), asked_channel(k), state.releases[k].manifest, state.releases[k].refusal)
            for k in keys]
