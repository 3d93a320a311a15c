"""The open-world corpus: whole families of ONNX models nobody on this project wrote, drawn by rule, not by list.

- ``onnx-light``, ``onnx-simple``, ``onnx-pytorch-converted``, ``onnx-pytorch-operator``: every ``.onnx`` the pinned
  ``onnx`` wheel ships under ``onnx/backend/test/data/`` (model-zoo nets with generated weights, small graphs with
  shape-tensor, sequence and string inputs, PyTorch's converted modules and operators), each with the inputs its
  ``test_data_set_0`` holds where it ships them;
- ``onnxruntime-samples``: every model the pinned ``onnxruntime`` wheel ships in ``onnxruntime/datasets/``;
- ``pypi-apps``: the OCR models two applications ship in their wheels (``sources.MEMBERS``);
- ``transformers-ts`` and ``transformers-dynamo``: every architecture of ``exported.ARCHS`` through each exporter.

Each model gets a profile by the same rules for the plain builder and for trtfarm: its shipped inputs' shapes (and
a shape tensor's values) where it has them, else sizes from its dimension names (``precision.inputs``) at three
points. ``suite_sample`` draws the models the test suite runs; ``bench/conformance.py`` runs them all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tests.corpus.exported import ARCHS, EXPORTS, MADE_BY, exported_model
from tests.corpus.sources import MEMBERS, ONNX, ONNXRUNTIME, corpus_file, wheel_members

ONNX_DATA = "onnx/backend/test/data/"


@dataclass(frozen=True)
class CorpusModel:
    """One model of a family: where it is cached, and its shipped inputs (a folder of ``input_N.pb``), if any."""

    family: str
    name: str
    path: Path
    inputs: Path | None = None

    @property
    def key(self) -> str:
        """``family/name``."""
        return f"{self.family}/{self.name}"


FAMILIES = {
    "onnx-simple": "onnx wheel: small graphs (shape tensors, sequences, strings)",
    "onnx-pytorch-converted": "onnx wheel: PyTorch modules",
    "onnx-pytorch-operator": "onnx wheel: PyTorch operators",
    "onnxruntime-samples": f"onnxruntime {ONNXRUNTIME.requirement.split('==')[1]} wheel samples",
    "pypi-apps": "OCR models in ddddocr/rapidocr wheels",
    "transformers-ts": "torch.onnx TorchScript, random weights",
    "transformers-dynamo": "torch.onnx dynamo, external data",
    # last: the slowest (ModelOpt's cleanup is quadratic in the nodes, and densenet121 has 1,746)
    "onnx-light": f"onnx {ONNX.requirement.split('==')[1]} wheel: model-zoo nets (IR 3)",
}


def _onnx_wheel(family: str) -> list[CorpusModel]:
    folder = family.removeprefix("onnx-")
    found = []
    for member, path in wheel_members(ONNX, ONNX_DATA).items():
        parts = member[len(ONNX_DATA):].split("/")
        if parts[0] != folder:
            continue
        name = parts[1].removesuffix(".onnx").removeprefix("test_").removeprefix("light_")
        data = path.parent / "test_data_set_0"
        found.append(CorpusModel(family, name, path, data if data.is_dir() else None))
    return found


def family_models(family: str) -> list[CorpusModel]:
    """Every model of ``family``, in a stable order."""
    if family.startswith("onnx-"):
        return _onnx_wheel(family)
    if family == "onnxruntime-samples":
        return [CorpusModel(family, Path(m).stem, p) for m, p in wheel_members(ONNXRUNTIME, "onnxruntime/datasets/")
                .items()]
    if family == "pypi-apps":
        return [CorpusModel(family, name, corpus_file(name)) for name in MEMBERS]
    exporter = family.removeprefix("transformers-")
    return [CorpusModel(family, arch, exported_model(f"{arch}-{exporter}")) for arch in ARCHS
            if f"{arch}-{exporter}" in EXPORTS]


def made_by(model: CorpusModel) -> str:
    """Who made the file, for tables."""
    arch = model.name
    return MADE_BY.get(arch, FAMILIES[model.family])


def suite_sample(models: list[CorpusModel], share: int) -> list[CorpusModel]:
    """A deterministic ``1/share`` of ``models``, drawn by a digest of each name (never hand-picked)."""
    if share <= 1:
        return list(models)
    return [m for m in models if int(hashlib.sha256(m.key.encode()).hexdigest(), 16) % share == 0]
