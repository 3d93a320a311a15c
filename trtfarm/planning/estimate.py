"""How long a build will take, from the build times manifests record, with the basis stated.

In order: this model's recorded build on the same GPU model; on a GPU of the same compute capability; on any GPU;
then the model's size times the seconds per MiB that builds of other models took on that GPU. When nothing is
recorded, there is no estimate (and the basis says so). A refit's time is never taken for a build's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from trtfarm.publishing.summaries import ManifestSummary
from trtfarm.publishing.survey import Folder, StoreSurvey
from trtfarm.vocabulary.fleet import ResolvedTarget

SIZE_SAMPLE = 8  # builds of other models per GPU that a size-based estimate scales from
MIB = 2**20


@dataclass(frozen=True)
class Want:
    """One build to estimate: the model, its size, the target, and the closest published build (if any)."""

    model: str
    size_bytes: int | None
    target: ResolvedTarget
    previous: ManifestSummary | None


def _newest(survey: StoreSurvey, folders: list[Folder]) -> Folder | None:
    """The folder of the newest export among ``folders`` (registered order, else the listing's)."""
    if not folders:
        return None
    rank = survey.export_rank(folders[0].model)
    return max(folders, key=lambda f: rank.get(f.onnx12, -1))


class Estimator:
    """Estimates for many builds at once: the manifests each one needs are read together (cached by version)."""

    def __init__(self, survey: StoreSurvey, capabilities: dict[str, str], sizes: dict[str, int]) -> None:
        self.survey = survey
        self.capabilities = capabilities  # GPU key -> compute capability, over both fleets
        self.sizes = sizes  # model -> bytes of its export, where known

    def _published(self, model: str, gpus: set[str]) -> list[Folder]:
        return [f for f in self.survey.by_model.get(model, []) if f.gpu in gpus and self.survey.published(f.prefix)]

    def estimates(self, wants: list[Want]) -> list[tuple[float | None, str, str]]:
        """``(seconds, basis, kind of basis)`` for each want, in order."""
        same = [w.previous if w.previous and w.previous.gpu == w.target.gpu_key and not w.previous.refit else None
                for w in wants]
        sibling = {}
        for i, w in enumerate(wants):
            if same[i] is None:
                cc = w.target.gpu.compute_capability
                near = {g for g, c in self.capabilities.items() if c == cc and g != w.target.gpu_key}
                sibling[i] = _newest(self.survey, self._published(w.model, near)) or \
                    _newest(self.survey, self._published(w.model, set(self.capabilities) - {w.target.gpu_key}))
        read = self.survey.manifests({f.prefix for f in sibling.values() if f})
        rates = self._rates({w.target.gpu_key for i, w in enumerate(wants) if same[i] is None})
        out = []
        for i, w in enumerate(wants):
            m = same[i]
            if m is not None:
                out.append((m.wall_s, f"recorded: this model on {m.gpu} ({m.toolchain_label}) took {m.wall_s:.1f} s",
                            "this GPU"))
                continue
            near = read.get(sibling[i].prefix) if sibling.get(i) else None
            if near is not None and not near.refit:
                same_cc = near.compute_capability == w.target.gpu.compute_capability
                how = "same compute capability" if same_cc else \
                    f"compute capability {near.compute_capability}, none recorded on {w.target.gpu.compute_capability}"
                out.append((near.wall_s, f"recorded: this model on {near.gpu} ({how}) took {near.wall_s:.1f} s",
                            "same compute capability" if same_cc else "other GPU"))
                continue
            out.append(self._by_size(w, rates.get(w.target.gpu_key)))
        return out

    def _rates(self, gpus: set[str]) -> dict[str, tuple[float, int]]:
        """GPU -> (median seconds per MiB, builds) over up to ``SIZE_SAMPLE`` models of known size built on it."""
        sample: dict[str, list[Folder]] = {g: [] for g in gpus}
        for model, folders in self.survey.by_model.items():
            if model not in self.sizes:
                continue
            taken: set[str] = set()  # one build per model and GPU (its newest listed)
            for f in reversed(folders):
                if f.gpu in sample and f.gpu not in taken and len(sample[f.gpu]) < SIZE_SAMPLE \
                        and self.survey.published(f.prefix):
                    sample[f.gpu].append(f)
                    taken.add(f.gpu)
            if all(len(v) >= SIZE_SAMPLE for v in sample.values()):
                break
        read = self.survey.manifests(f.prefix for v in sample.values() for f in v)
        rates = {}
        for gpu, folders in sample.items():
            per = [read[f.prefix].wall_s / (self.sizes[f.model] / MIB) for f in folders
                   if f.prefix in read and not read[f.prefix].refit and self.sizes[f.model]]
            if per:
                rates[gpu] = (statistics.median(per), len(per))
        return rates

    @staticmethod
    def _by_size(w: Want, rate: tuple[float, int] | None) -> tuple[float | None, str, str]:
        gpu = w.target.gpu_key
        if rate is None or not w.size_bytes:
            why = "its size is not known" if not w.size_bytes else f"no build on {gpu} to scale by size"
            return None, f"nothing recorded: no build of this model on any GPU, and {why}", "nothing recorded"
        mib = w.size_bytes / MIB
        return round(mib * rate[0], 1), (f"model size: {mib:.1f} MiB x {rate[0]:.2f} s/MiB (median of {rate[1]} "
                                         f"build(s) of other models on {gpu})"), "model size"
