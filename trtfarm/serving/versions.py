"""A model's releases as Triton versions, and which fleet GPUs can share one Triton model repository.

Each (model, GPU, toolchain) has its own release pointer, with a history of moves. The model's releases are those
moves merged in time order: consecutive moves of one export with one action (a build released for every GPU of
its class, say) make one release; a move to another export, or a different action (a rollback, a forced release),
starts the next. Each release whose state covers every GPU of the repository is one version, numbered from 1 in
order, so a rollback is a new, higher version (Triton serves the highest). A refresh (``trtfarm sign`` re-signing
the same manifest) is no release: it starts no version, closes none and changes no version's time, author or reason,
so nightly signing adds no version and pushes none out of ``--keep``. A pointer keeps its last 50 moves, refreshes
dropped first (``release.HISTORY``); the numbering is only as long as that history, and a history that starts with
refreshes (its release trimmed away by an older trtfarm) counts its first refresh as the release it stands for.

Triton's TensorRT backend picks a plan per GPU only by compute capability (``cc_model_filenames``). Two GPUs of one
capability that need different plans (an L4 and an L40S are both 8.9) cannot share a repository: each gets its
own. (The Python backend's ``model.py`` picks a TensorRT-RTX plan by GPU model, so no split is needed there.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trtfarm.publishing.release import ReleaseEvent, ReleasePointer
from trtfarm.vocabulary.manifest import Manifest


@dataclass(frozen=True)
class Version:
    """One release of the model: the manifest each GPU serves, and the move that made it."""

    number: int
    manifests: dict[str, str]  # GPU key -> manifest key
    action: str
    at: str
    by: str
    reason: str


def _events(pointers: Sequence[ReleasePointer]) -> list[tuple[str, ReleaseEvent]]:
    """Every release of every pointer (no refresh but a history's first event), oldest first.

    Times have one-second resolution, and one build releases every GPU of its class within a second: moves of one
    second are ordered by their place in their own pointer's history, so the n-th moves of each pointer go together.
    """
    moves = [(e.at, i, p.gpu, e) for p in pointers
             for i, e in enumerate(m for n, m in enumerate(p.history) if not n or m.action != "refresh")]
    return [(gpu, e) for _, _, gpu, e in sorted(moves, key=lambda m: (m[0], m[1]))]


def model_versions(pointers: Sequence[ReleasePointer]) -> list[Version]:
    """The model's releases over ``pointers`` (one per GPU), as numbered versions, oldest first."""
    gpus = {p.gpu for p in pointers}
    state: dict[str, str] = {}
    versions: list[Version] = []
    touched: set[str] = set()
    last: tuple[str, str] | None = None
    event: ReleaseEvent | None = None

    def close() -> None:
        if event is not None and set(state) == gpus:
            versions.append(Version(len(versions) + 1, dict(state), event.action, event.at, event.by, event.reason))

    for gpu, e in _events(pointers):
        kind = (e.onnx_digest, e.action)
        if last is not None and (kind != last or gpu in touched):
            close()
            touched = set()
        state[gpu], last, event = e.manifest, kind, e
        touched.add(gpu)
    close()
    return versions


@dataclass(frozen=True)
class Split:
    """Why GPUs cannot share one repository: ``gpus`` share ``compute_capability`` but not a plan."""

    compute_capability: str
    gpus: tuple[str, ...]
    version: int

    def reason(self) -> str:
        """One sentence a person can act on."""
        return (f"{' and '.join(self.gpus)} share compute capability {self.compute_capability} but not a plan "
                f"(version {self.version}), and cc_model_filenames picks by compute capability only; deploy each "
                "repository on hosts of its GPU")


def capability_collisions(versions: Sequence[Version], manifests: dict[str, Manifest]) -> list[Split]:
    """Each compute capability whose GPUs need different plans in some version (``manifests``: key -> manifest)."""
    splits: dict[str, Split] = {}
    for v in versions:
        by_cc: dict[str, dict[str, str]] = {}
        for gpu, key in sorted(v.manifests.items()):
            m = manifests[key]
            by_cc.setdefault(m.target.compute_capability, {})[gpu] = m.plan.sha256
        for cc, plans in by_cc.items():
            if len(set(plans.values())) > 1 and cc not in splits:
                splits[cc] = Split(cc, tuple(plans), v.number)
    return list(splits.values())
