"""How long a build will take, from the build times manifests record, with the basis stated.

Only builds of the target's toolchain family count: a TensorRT build (tactic timing on the GPU, minutes on a
datacenter part) is never estimated from a TensorRT-RTX build done ahead of time on a CPU, nor the other way. In
order: this model's recorded build on the same GPU model; on a GPU of the same compute capability; on any GPU;
then the model's size times the seconds per MiB that builds of other models took on that GPU. With none of these,
there is no estimate, and the basis says ``no basis``. A refit's time is never taken for a build's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from trtfarm.layout import parse_toolchain_label
from trtfarm.state.listings import Folder
from trtfarm.state.summaries import ManifestSummary
from trtfarm.state.survey import StoreSurvey
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


def family(toolchain_label: str) -> str:
    """The toolchain family of a plan folder's label: ``tensorrt_rtx-1.7.1.116`` -> ``tensorrt_rtx``."""
    return parse_toolchain_label(toolchain_label)[0]


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

    def _published(self, model: str, gpus: set[str], flavour: str) -> list[Folder]:
        return [f for f in self.survey.by_model.get(model, []) if f.gpu in gpus and family(f.toolchain) == flavour
                and self.survey.published(f.prefix)]

    def estimates(self, wants: list[Want]) -> list[tuple[float | None, str, str]]:
        """``(seconds, basis, kind of basis)`` for each want, in order."""
        same = [w.previous if w.previous and w.previous.gpu == w.target.gpu_key and not w.previous.refit
                and w.previous.flavour == w.target.toolchain.flavour.value else None for w in wants]
        sibling = {}
        for i, w in enumerate(wants):
            if same[i] is None:
                cc, flavour = w.target.gpu.compute_capability, w.target.toolchain.flavour.value
                near = {g for g, c in self.capabilities.items() if c == cc and g != w.target.gpu_key}
                sibling[i] = _newest(self.survey, self._published(w.model, near, flavour)) or _newest(
                    self.survey, self._published(w.model, set(self.capabilities) - {w.target.gpu_key}, flavour))
        read = self.survey.manifests({f.prefix for f in sibling.values() if f})
        rates = self._rates({(w.target.gpu_key, w.target.toolchain.flavour.value) for i, w in enumerate(wants)
                             if same[i] is None})
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
            out.append(self._by_size(w, rates.get((w.target.gpu_key, w.target.toolchain.flavour.value))))
        return out

    def _rates(self, wanted: set[tuple[str, str]]) -> dict[tuple[str, str], tuple[float, int]]:
        """(GPU, toolchain family) -> (median seconds per MiB, builds).

        Over up to ``SIZE_SAMPLE`` models of known size built on that GPU with that family.
        """
        sample: dict[tuple[str, str], list[Folder]] = {k: [] for k in wanted}
        for model, folders in self.survey.by_model.items():
            if model not in self.sizes:
                continue
            taken: set[tuple[str, str]] = set()  # one build per model, GPU and family (its newest listed)
            for f in reversed(folders):
                k = (f.gpu, family(f.toolchain))
                if k in sample and k not in taken and len(sample[k]) < SIZE_SAMPLE and self.survey.published(f.prefix):
                    sample[k].append(f)
                    taken.add(k)
            if all(len(v) >= SIZE_SAMPLE for v in sample.values()):
                break
        read = self.survey.manifests(f.prefix for v in sample.values() for f in v)
        rates = {}
        for k, folders in sample.items():
            per = [read[f.prefix].wall_s / (self.sizes[f.model] / MIB) for f in folders
                   if f.prefix in read and not read[f.prefix].refit and self.sizes[f.model]]
            if per:
                rates[k] = (statistics.median(per), len(per))
        return rates

    @staticmethod
    def _by_size(w: Want, rate: tuple[float, int] | None) -> tuple[float | None, str, str]:
        gpu, flavour = w.target.gpu_key, w.target.toolchain.flavour.value
        if rate is None or not w.size_bytes:
            why = "its size is not known" if not w.size_bytes else f"no {flavour} build on {gpu} to scale by size"
            return None, f"no basis: no {flavour} build of this model on any GPU, and {why}", "no basis"
        mib = w.size_bytes / MIB
        return round(mib * rate[0], 1), (f"model size: {mib:.1f} MiB x {rate[0]:.2f} s/MiB (median of {rate[1]} "
                                         f"{flavour} build(s) of other models on {gpu})"), "model size"
