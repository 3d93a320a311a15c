"""Models made by the real exporters from random-initialised architectures (no weights are downloaded).

A small BERT (``transformers.BertModel``: ``input_ids`` + ``attention_mask``, dynamic batch and sequence, the seed
article's encoder) and a ResNet CNN (``transformers.ResNetModel``), each through ``torch.onnx.export`` with the
TorchScript exporter and with ``dynamo=True``. The dynamo exporter keeps the weights in ``model.onnx.data`` beside
the model (external data), as every model over 2 GB must.

torchvision's PyPI wheel is built against CUDA torch and does not import with the CPU torch these machines have
(``operator torchvision::nms does not exist``), so the CNN comes from transformers' ResNet, a real third-party
architecture all the same.

Exports are cached under the corpus cache, keyed by the torch and transformers versions; each runs in a fresh
interpreter (``python -m tests.corpus.exported NAME OUT``) so torch's exporter state never leaks into a test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from tests.corpus.sources import cache_dir

REPO = Path(__file__).resolve().parents[2]
EXPORTS = ("bert-ts", "bert-dynamo", "resnet-ts", "resnet-dynamo")


def _bert():
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=512)
    bert = BertModel(config)

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    args = (torch.randint(0, 1000, (2, 16)), torch.ones(2, 16, dtype=torch.int64))
    return Encoder(), args, ["input_ids", "attention_mask"], ["hidden"], {0: "batch", 1: "seq"}


def _resnet():
    import torch
    from transformers import ResNetConfig, ResNetModel

    net = ResNetModel(ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]))

    class Backbone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, pixel_values):
            return self.net(pixel_values=pixel_values).pooler_output

    return Backbone(), (torch.randn(1, 3, 224, 224),), ["pixel_values"], ["pooled"], {0: "batch"}


def export(name: str, out: Path) -> None:
    """Export ``name`` (one of ``EXPORTS``) to ``out`` (``model.onnx``, and ``model.onnx.data`` for dynamo)."""
    import torch

    torch.manual_seed(0)
    arch, exporter = name.split("-")
    model, args, inputs, outputs, axes = _bert() if arch == "bert" else _resnet()
    model.eval()
    if exporter == "dynamo":
        dims = {i: torch.export.Dim(n, min=2 if n == "seq" else 1, max=512 if n == "seq" else 64)
                for i, n in axes.items()}
        torch.onnx.export(model, args, str(out), input_names=inputs, output_names=outputs, dynamo=True,
                          dynamic_shapes={n: dims for n in inputs}, verbose=False)
    else:
        dynamic = {n: dict(axes) for n in inputs + outputs}
        torch.onnx.export(model, args, str(out), input_names=inputs, output_names=outputs, dynamo=False,
                          opset_version=17, dynamic_axes=dynamic)


def exported_model(name: str) -> Path:
    """The cached export ``name`` (made in a fresh interpreter when missing): the folder's ``model.onnx``."""
    key = f"torch-{version('torch')}-transformers-{version('transformers')}"
    folder = cache_dir() / "exported" / key / name
    if (folder / "model.onnx").is_file():
        return folder / "model.onnx"
    tmp = folder.with_name(f".{name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "tests.corpus.exported", name, str(tmp / "model.onnx")], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"exporting {name} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder / "model.onnx"


if __name__ == "__main__":
    export(sys.argv[1], Path(sys.argv[2]))
