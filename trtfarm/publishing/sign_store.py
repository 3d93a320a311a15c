"""``trtfarm sign``: sign what a store already holds unsigned, after checking it is what its manifest says.

Turning signing on signs new publishes only; a store's older plans stay unsigned, and serving hosts with trusted keys
refuse them. ``sign_store`` signs each unsigned plan folder (plan, manifest and, where there is one, provenance)
once the plan's bytes are re-hashed against its manifest and the manifest is found in its own identity's folder;
anything else is refused and listed, never signed. It then signs each release pointer that carries no claim, or a
claim that expires within ``refresh_within`` (a refresh: same manifest, next version, new expiry), when the plan it
names is signed. The signature is written create-only, named by the manifest's sha256, as a publish writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from trtfarm import layout
from trtfarm.errors import CorruptObject, UserInputError
from trtfarm.nearest import did_you_mean, known
from trtfarm.publishing.attest import read_stored, sha256_bytes, signed_names
from trtfarm.publishing.catalog import manifests_in, store_models
from trtfarm.publishing.publish import plan_rehash
from trtfarm.publishing.release import read_pointer, refresh_release
from trtfarm.publishing.release_check import manifest_identity_problem
from trtfarm.signing.bundle import SignatureRefused, sign_resources
from trtfarm.signing.keys import Signer
from trtfarm.signing.release_claim import DEFAULT_EXPIRY, now_utc, unverified_claim
from trtfarm.store import Store

REFRESH_WITHIN = DEFAULT_EXPIRY / 3


@dataclass
class Signed:
    """What ``sign_store`` did: plan folders signed, releases signed, what it refused (one line each), skipped."""

    plans: list[str] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    already: int = 0

    def to_json(self) -> dict:
        """The ``--json`` document."""
        return {"signed_plans": self.plans, "signed_releases": self.releases, "refused": self.refused,
                "already_signed": self.already}


def sign_plan_folder(store: Store, key: str, signer: Signer) -> str | None:
    """Sign the plan folder of the manifest at ``key`` unless it is signed; None when done, else why it is refused."""
    stored = read_stored(store, key)
    if stored is None or stored.signature is not None:
        return None
    m, msha = stored.manifest, stored.manifest_sha256
    problem = manifest_identity_problem(key, m)
    if problem:
        return problem
    if not store.exists(m.plan.key):  # deleted by hand: named, never signed, and the rest of the store still is
        return f"{store.url(m.plan.key)}: the plan object is missing; rebuild it or `trtfarm gc` its manifest"
    damaged = plan_rehash(store, m)
    if damaged:
        return f"{store.url(key)}: {damaged}"
    plan, man, prov = signed_names(msha)
    resources = {plan: m.plan.sha256, man: msha}
    if stored.provenance is not None:
        resources[prov] = sha256_bytes(stored.provenance)
    folder = layout.folder_of(key)
    bundle = sign_resources(signer, layout.leaf_of(folder), resources, ignore_paths=[layout.signature_name(msha)])
    store.put_if_absent(layout.signature_key(folder, msha), bundle)
    return None


def _sign_one_plan(store: Store, key: str, signer: Signer, done: Signed, say: Callable[[str], None]) -> None:
    """Sign one plan folder into ``done`` (signed, already signed or refused with why); the others go on."""
    try:
        if read_stored(store, key).signature is not None:
            done.already += 1
            return
        why = sign_plan_folder(store, key, signer)
    except (SignatureRefused, CorruptObject) as err:
        why = str(err)
    (done.refused if why else done.plans).append(why or key)
    say(f"refused: {why}" if why else f"signed {layout.short_ref(key)}")


def _needs_claim(pointer, within: timedelta) -> bool:
    claim = unverified_claim(pointer.claim)
    return claim is None or claim.expires() - now_utc() < within


def _has_any(store: Store, prefix: str) -> bool:
    return next(iter(store.list(prefix)), None) is not None


def check_models(store: Store, models: Sequence[str]) -> None:
    """Refuse (bad input) a model name the store holds no plan or release of, naming the nearest and the known ones."""
    unknown = [m for m in dict.fromkeys(models) if not layout.is_name(m) or not (
        _has_any(store, layout.plans_prefix(m)) or _has_any(store, layout.releases_prefix(m)))]
    if unknown:
        names = store_models(store)
        raise UserInputError(f"no plan or release of {', '.join(map(repr, unknown))} in {store.location}; "
                             f"{did_you_mean(unknown[0], names)}known models: {known(names)}. Fix: check the name "
                             "(`trtfarm plans`) and --store")


def sign_store(store: Store, signer: Signer, models: Sequence[str] = (), *, refresh_within: timedelta = REFRESH_WITHIN,
               reason: str = "signed by `trtfarm sign`", note: Callable[[str], None] | None = None) -> Signed:
    """Sign the unsigned plans and releases of ``models`` (all when empty) in ``store``; ``note`` hears each step."""
    check_models(store, models)
    done, say = Signed(), note or (lambda _line: None)
    for model in dict.fromkeys(models) or [None]:
        problems: list[str] = []
        for listed in manifests_in(store, model, problems):
            _sign_one_plan(store, listed.key, signer, done, say)
        for problem in problems:
            done.refused.append(problem)
            say(f"refused: {problem}")
        for key in store.list(layout.releases_prefix(model)):
            try:
                pointer, _ = read_pointer(store, key)
                stored = read_stored(store, pointer.manifest) if pointer else None
                if pointer is None or not _needs_claim(pointer, refresh_within):
                    continue
                if stored is None or stored.signature is None:
                    raise SignatureRefused("unsigned", f"{store.url(key)} names {pointer.manifest}, which is not "
                                           "signed (or not there): its release is left unsigned")
                refresh_release(store, key, signer, reason=reason)
            except (SignatureRefused, CorruptObject) as err:
                done.refused.append(str(err))
                say(f"refused: {err}")
                continue
            done.releases.append(key)
            say(f"signed the release {key}")
    return done
