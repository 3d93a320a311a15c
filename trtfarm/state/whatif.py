"""What a run under a proposed fleet would do, decided from the store without writing to it.

``decide_fleet`` takes the fleet as it is and a proposed one and returns one ``TargetDecision`` per (model, target):
``keep`` when the build the proposed fleet gives is published already, ``rebuild`` when it is not and it replaces a
published build of this (model, target), ``new`` when nothing of the model is published for the target ("not built
yet": a target the fleet gains, or one never built), ``drop`` for a target it loses. Each rebuild names what changed in
the build digest against the build it replaces (toolchain, GPU, builder setting, precision recipe, export, profiles);
every build carries an estimate of its time, its basis saying which recorded build it comes from. A run with the fleet
unchanged is ``farm run --dry-run``: the same function, the same fleet twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from trtfarm import layout
from trtfarm.publishing.gc import deleted_folders
from trtfarm.state.estimate import Estimator, Want, family
from trtfarm.state.expected import (
    SAME_INPUTS,
    ExpectedExport,
    TargetInputs,
    build_changes,
    digest_part,
    target_differences,
)
from trtfarm.state.listings import Folder
from trtfarm.state.summaries import ManifestSummary
from trtfarm.state.survey import StoreSurvey
from trtfarm.vocabulary.fleet import Fleet, ResolvedTarget, select_targets
from trtfarm.vocabulary.fleetview import Action, FleetDecisions, TargetDecision


@dataclass(frozen=True)
class _Open:
    """A pair that needs a build: what the decision is made of before reasons and estimates are known."""

    model: str
    target: ResolvedTarget
    current: ResolvedTarget | None
    digest: str | None
    previous: Folder | None  # the published build this one replaces (None: not built yet)
    nearest: Folder | None  # the published build on its GPU its estimate starts from (any target's)
    changes: tuple[str, ...] | None = None  # what the proposed fleet changes for it (None: judged by the store)


Baseline = Literal["fleet", "store"]
NOT_BUILT = "not built yet"
Slots = dict[tuple[str, str], set[str]]  # (GPU, toolchain label) -> the ids of the targets that build there


def decide_fleet(survey: StoreSurvey, expected: dict[str, ExpectedExport], current: Fleet | None, proposed: Fleet,
                 *, baseline: Baseline = "fleet", target_ids: list[str] | None = None,
                 force: bool = False) -> FleetDecisions:
    """Every (model, target) decision of a run under ``proposed``.

    ``baseline="fleet"`` (``trtfarm whatif``): what the change from ``current`` costs; a pair whose build the proposal
    leaves as it is keeps, built or not. ``baseline="store"`` (``farm run --dry-run``): what a run would do now; a
    pair keeps only when its build is published.
    """
    unknown = [i for i in target_ids or [] if i not in _ids(proposed) | _ids(current)]
    if unknown:
        select_targets(proposed, unknown)  # the user's error, naming the known targets
    now = {t.id: t for t in select_targets(proposed) if not target_ids or t.id in target_ids}
    was = {t.id: t for t in select_targets(current) if not target_ids or t.id in target_ids} if current else {}
    parts = {t.id: digest_part(t) for t in now.values()}
    slots = _slots(current, proposed)
    fleet_changes = {i: tuple(target_changes(was[i], t)) for i, t in now.items() if i in was} \
        if baseline == "fleet" else {}  # what the proposal changes for each target: the same for every model
    order = list(now) + [i for i in was if i not in now]
    decisions: dict[tuple[str, str], TargetDecision] = {}
    pending: list[_Open] = []
    for model in sorted(expected):
        x = expected[model]
        for tid in order:
            if not x.covers(tid):
                continue
            t, c = now.get(tid), was.get(tid)
            if t is None:
                decisions[model, tid] = TargetDecision(model, tid, "drop", ("target removed from the fleet: its "
                                                       "released plans stay in the store until `trtfarm gc`",),
                                                       0.0, "nothing to build", "nothing to build", c.gpu.pool,
                                                       channel=x.channel)
                continue
            digest = x.digest(t, parts[tid])
            published = digest is not None and survey.published(x.prefix(t, digest))
            changes = fleet_changes.get(tid)
            keep = _kept(survey, x, t, published, changes, force)
            if keep is not None:
                decisions[model, tid] = TargetDecision(model, tid, "keep", keep, 0.0, "nothing to build",
                                                       "nothing to build", t.gpu.pool, digest, published, x.channel)
            else:
                pending.append(_Open(model, t, c, digest, _predecessor(survey, x, tid, c or t, slots),
                                     _closest(survey, x, c or t), changes))
    decisions.update(_open_decisions(survey, expected, pending, current, proposed, force))
    ordered = [decisions[m, t] for m in sorted(expected) for t in order if (m, t) in decisions]
    return FleetDecisions(_share_builds(ordered), serving_changes(current, proposed), _triton(ordered),
                          _refused(expected, proposed))


def _refused(expected: dict[str, ExpectedExport], proposed: Fleet) -> list[str]:
    """Models whose build spec names a target the proposed fleet lacks: a run refuses them (exit 2)."""
    ids = _ids(proposed)
    lines = []
    for model, x in sorted(expected.items()):
        gone = [t for t in x.targets or () if t not in ids]
        if gone:
            lines.append(f"{model}: its farm.yaml names {', '.join(gone)}, which the proposed fleet lacks: a run "
                         f"refuses {model} until farm.yaml's targets or the fleet change")
    return lines


def _kept(survey: StoreSurvey, x: ExpectedExport, t: ResolvedTarget, published: bool,
          changes: tuple[str, ...] | None, force: bool) -> tuple[str, ...] | None:
    """Why the pair keeps (its notes), or None when it builds."""
    if force:
        return None
    if changes == ():  # the proposal leaves every input of its build as it is
        return () if published else ("not built under the current fleet either: the next run builds it anyway",)
    if published:
        unreleased = layout.release_key(x.model, t.gpu_key, t.toolchain_label) not in survey.pointers
        return ("published already",) + (("published, not released yet: the run releases it when the target's "
                                          "policy allows",) if unreleased else ())
    return None


def _ids(fleet: Fleet | None) -> set[str]:
    return {t.id for t in fleet.targets} if fleet else set()


def _slots(current: Fleet | None, proposed: Fleet) -> Slots:
    """Where each target of either fleet publishes: a plan folder's GPU and toolchain name its target."""
    out: Slots = {}
    for fleet in (current, proposed):
        for t in select_targets(fleet) if fleet else []:
            out.setdefault((t.gpu_key, t.toolchain_label), set()).add(t.id)
    return out


def _predecessor(survey: StoreSurvey, x: ExpectedExport, tid: str, owner: ResolvedTarget,
                 slots: Slots) -> Folder | None:
    """The published build of this (model, target) a new build replaces, or None when it was never built.

    ``owner`` is the target as the fleet has it now (its GPU key, before a rename). A build on that GPU counts unless
    its toolchain is another target's (a target beside it on the same GPU keeps its own plans).
    """
    def ours(f: Folder) -> bool:
        return tid in slots.get((f.gpu, f.toolchain), {tid})

    return _closest(survey, x, owner, ours)


def _closest(survey: StoreSurvey, x: ExpectedExport, owner: ResolvedTarget,
             fits: Callable[[Folder], bool] = lambda f: True) -> Folder | None:
    """The published build on ``owner``'s GPU closest to the next one: its export, its toolchain first."""
    gpu, label = owner.gpu_key, owner.toolchain_label
    flavour = family(label)
    rank = survey.export_rank(x.model)
    found = [f for f in survey.by_model.get(x.model, []) if f.gpu == gpu and fits(f) and survey.published(f.prefix)]
    if not found:
        return None
    return max(found, key=lambda f: (f.onnx12 == x.onnx_digest[:12], f.toolchain == label,
                                     family(f.toolchain) == flavour, rank.get(f.onnx12, -1)))


def _open_decisions(survey: StoreSurvey, expected: dict[str, ExpectedExport], pending: list[_Open],
                    current: Fleet | None, proposed: Fleet, force: bool) -> dict[tuple[str, str], TargetDecision]:
    """Reasons and estimates of the pairs that build: their closest published manifests are read together."""
    previous = survey.manifests({f.prefix for p in pending for f in (p.previous, p.nearest) if f})
    capabilities = {k: g.compute_capability for fleet in (current, proposed) if fleet for k, g in fleet.gpus.items()}
    sizes = {m: x.size_bytes for m, x in expected.items() if x.size_bytes}
    sizes.update(_other_sizes(survey, sizes))
    wants = [Want(p.model, expected[p.model].size_bytes, p.target,
                  previous.get(p.nearest.prefix) if p.nearest else None) for p in pending]
    estimates = Estimator(survey, capabilities, sizes).estimates(wants)
    deleted = deleted_folders(survey.store) if pending else {}
    out = {}
    for p, (seconds, basis, kind) in zip(pending, estimates, strict=True):
        x = expected[p.model]
        replaced = previous.get(p.previous.prefix) if p.previous else None
        action, reasons = _action(p, x, replaced, current)
        gone = deleted.get(x.prefix(p.target, p.digest)) if p.digest and x.onnx_digest else None
        if gone:  # this very build was published once: that is why it builds, not what differs from another
            reasons = [f"its plan (build {p.digest[:12]}) was {gone}; a run builds it again"]
        if x.unknown:
            reasons.append(x.unknown)
        if force and action == "rebuild":
            reasons = ["--force: published targets are rebuilt", *[r for r in reasons if r != SAME_INPUTS]]
        out[p.model, p.target.id] = TargetDecision(p.model, p.target.id, action, tuple(reasons), seconds, basis, kind,
                                                   p.target.gpu.pool, p.digest, channel=x.channel)
    return out


def _action(p: _Open, x: ExpectedExport, replaced: ManifestSummary | None,
            current: Fleet | None) -> tuple[Action, list[str]]:
    """``rebuild`` with what changes against the build it replaces, else ``new``: not built yet, and what is new."""
    gained = [_gained(p.target, current)] if current is not None and p.current is None else []
    if replaced is None:
        return "new", [NOT_BUILT, *gained, *(p.changes or ())]
    return "rebuild", [*gained, *(p.changes or build_changes(replaced, x, p.target))]


def _other_sizes(survey: StoreSurvey, known: dict[str, int]) -> dict[str, int]:
    """Sizes of registered models outside this view, from their records (size-based estimates scale by them)."""
    others = [m for m in survey.exports if m not in known]
    return {m: sum(f.bytes for n, f in r.files.items() if n in (r.model_files or [layout.ONNX_NAME]))
            for m, r in survey.records(others).items()}


def target_changes(c: ResolvedTarget, t: ResolvedTarget) -> list[str]:
    """What a fleet change does to one target's build (``expected.target_differences``, as status words it)."""
    return target_differences(TargetInputs.of_target(c), TargetInputs.of_target(t))


def _gained(t: ResolvedTarget, current: Fleet) -> str:
    what = "new GPU model" if t.gpu_key not in current.gpus else "new target"
    return (f"{what}: {t.gpu_key} ({t.gpu.nvml_name}, pool {t.gpu.pool}) x {t.toolchain.flavour.value} "
            f"{t.toolchain.version}")


def _share_builds(decisions: list[TargetDecision]) -> list[TargetDecision]:
    """Targets of one model with one build digest are built once: the first carries the estimate, the rest none."""
    lead: dict[tuple[str, str], str] = {}
    out = []
    for d in decisions:
        key = (d.model, d.build_digest or "")
        if d.action in ("rebuild", "new") and d.build_digest:
            if key in lead:
                d = replace(d, estimate_s=0.0, basis=f"built once with {lead[key]} (same build digest "
                            f"{d.build_digest[:12]})", basis_kind="shared", published=False)
            else:
                lead[key] = d.target
        out.append(d)
    return out


def _triton(decisions: list[TargetDecision]) -> dict[str, list[str]]:
    """Model -> the targets whose plan its Triton repository would change (built, or dropped)."""
    out: dict[str, list[str]] = {}
    for d in decisions:
        if d.action != "keep":
            out.setdefault(d.model, []).append(d.target)
    return out


def serving_changes(current: Fleet | None, proposed: Fleet) -> list[str]:
    """Serving images declared differently, and images left carrying a TensorRT the toolchain no longer builds."""
    lines = []
    for key in sorted(set(current.toolchains if current else {}) | set(proposed.toolchains)):
        before = current.toolchains.get(key) if current else None
        after = proposed.toolchains.get(key)
        was = {(s.image, s.tensorrt_version) for s in before.serving_images} if before else set()
        now = {(s.image, s.tensorrt_version) for s in after.serving_images} if after else set()
        lines += [f"{key}: serving image {img} (TensorRT {v}) added" for img, v in sorted(now - was)]
        lines += [f"{key}: serving image {img} (TensorRT {v}) removed" for img, v in sorted(was - now)]
        if after and before and after.version != before.version:
            lines += [f"{key}: serving image {s.image} carries TensorRT {s.tensorrt_version}, but the toolchain now "
                      f"builds {after.version}: `trtfarm triton` and `pull` refuse its new plans; update serving_images"
                      for s in after.serving_images if s.tensorrt_version != after.version]
    return lines
