"""Models made by the real exporters from random-initialised ``transformers`` architectures (no weights downloaded).

Each architecture goes through ``torch.onnx.export`` twice: the TorchScript exporter (``-ts``, dynamic axes named
the way Optimum names them, a decoder's mask ``past_sequence_length + sequence_length``) and ``dynamo=True``
(``-dynamo``: dims from ``torch.export``, an opaque ``s53`` where the exporter could not name one, weights in
``model.onnx.data`` beside the model, as every model over 2 GB must keep them). The families:

- ``bert``: a small BERT encoder (``input_ids`` + ``attention_mask``, dynamic batch and sequence);
- ``resnet``: transformers' ResNet CNN (torchvision's PyPI wheel needs CUDA torch and does not import here);
- ``gpt2``: a GPT-2 decoder with past key values (``use_cache``): ids, a mask over past + new tokens, and two
  layers' past keys and values in, logits and the present keys and values out;
- ``wav2vec2``: a speech encoder on raw audio, behind a wrapper that takes the sample rate as a rank-0 ``sr``
  input (as voice-activity models do);
- ``vit``: a vision transformer; ``t5enc``: the encoder half of a T5 seq2seq model; ``distilbert``: a distilled
  encoder.

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
ARCHS = ("bert", "resnet", "gpt2", "wav2vec2", "vit", "t5enc", "distilbert")
# torch.export cannot trace T5's relative-attention view with a dynamic batch and sequence (torch 2.13:
# "Cannot view a tensor with shape (64*s50, 32, 32*s50, 1)"): its encoder goes through TorchScript only
EXPORTS = tuple(f"{a}-{e}" for a in ARCHS for e in ("ts", "dynamo") if f"{a}-{e}" != "t5enc-dynamo")
MADE_BY = {"bert": "BertModel", "resnet": "ResNetModel", "gpt2": "GPT2LMHeadModel with past key values",
           "wav2vec2": "Wav2Vec2Model, scalar sample rate", "vit": "ViTModel", "t5enc": "T5EncoderModel",
           "distilbert": "DistilBertModel"}


class Spec:
    """One architecture ready to export: module, example args, I/O names, and its dynamic axes by name."""

    def __init__(self, module, args, inputs, outputs, axes, auto=()):
        self.module, self.args, self.inputs, self.outputs = module, args, inputs, outputs
        self.axes = axes  # input or output name -> {axis: dim name}
        self.auto = auto  # (input, axis) pairs the dynamo exporter names itself


def _wrap(fn):
    import torch

    class Wrapped(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, *args):
            return fn(self.net, *args)

    return Wrapped


def _encoder(net, vocab: int = 1000) -> Spec:
    import torch

    module = _wrap(lambda n, ids, mask: n(input_ids=ids, attention_mask=mask).last_hidden_state)(net)
    args = (torch.randint(0, vocab, (2, 16)), torch.ones(2, 16, dtype=torch.int64))
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            "hidden": {0: "batch", 1: "sequence"}}
    return Spec(module, args, ["input_ids", "attention_mask"], ["hidden"], axes)


def _bert() -> Spec:
    from transformers import BertConfig, BertModel

    return _encoder(BertModel(BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=128, max_position_embeddings=512)))


def _distilbert() -> Spec:
    from transformers import DistilBertConfig, DistilBertModel

    return _encoder(DistilBertModel(DistilBertConfig(vocab_size=1000, dim=64, hidden_dim=128, n_layers=2, n_heads=2,
                                                     max_position_embeddings=512)))


def _t5enc() -> Spec:
    from transformers import T5Config, T5EncoderModel

    return _encoder(T5EncoderModel(T5Config(vocab_size=1000, d_model=64, d_kv=32, d_ff=128, num_layers=2,
                                            num_heads=2)))


def _image(net, size: int, output) -> Spec:
    import torch

    module = _wrap(lambda n, x: output(n(pixel_values=x)))(net)
    return Spec(module, (torch.randn(1, 3, size, size),), ["pixel_values"], ["out"],
                {"pixel_values": {0: "batch"}, "out": {0: "batch"}})


def _resnet() -> Spec:
    from transformers import ResNetConfig, ResNetModel

    net = ResNetModel(ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]))
    spec = _image(net, 224, lambda o: o.pooler_output)
    spec.outputs = ["pooled"]
    spec.axes = {"pixel_values": {0: "batch"}, "pooled": {0: "batch"}}
    return spec


def _vit() -> Spec:
    from transformers import ViTConfig, ViTModel

    return _image(ViTModel(ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=128, image_size=64, patch_size=16)), 64,
                  lambda o: o.last_hidden_state)


def _wav2vec2() -> Spec:
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    net = Wav2Vec2Model(Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=128, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
                                       conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                                       num_conv_pos_embedding_groups=4))

    def forward(n, audio, sr):  # audio at another rate is scaled down, as voice-activity wrappers do
        gain = torch.clamp(sr.to(torch.float32) / 16000.0, max=1.0)
        return n(input_values=audio * gain).last_hidden_state

    module = _wrap(forward)(net)
    args = (torch.randn(1, 1600), torch.tensor(16000, dtype=torch.int64))
    return Spec(module, args, ["input_values", "sr"], ["hidden"],
                {"input_values": {0: "batch", 1: "samples"}, "hidden": {0: "batch", 1: "frames"}})


def _gpt2(positions: int = 256, width: int = 64, heads: int = 2) -> Spec:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.cache_utils import DynamicCache

    config = GPT2Config(vocab_size=1000, n_positions=positions, n_embd=width, n_layer=2, n_head=heads)
    net = GPT2LMHeadModel(config)

    def forward(n, ids, mask, *past):
        cache = DynamicCache(config=config)
        for i in range(config.n_layer):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = n(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        return (out.logits, *(t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)))

    module = _wrap(forward)(net)
    batch, new, old = 2, 3, 5
    kv = [f"{i}.{kv}" for i in range(config.n_layer) for kv in ("key", "value")]
    args = (torch.randint(0, 1000, (batch, new)), torch.ones(batch, old + new, dtype=torch.int64),
            *[torch.randn(batch, config.n_head, old, width // heads) for _ in kv])
    axes = {"input_ids": {0: "batch", 1: "sequence_length"},
            "attention_mask": {0: "batch", 1: "past_sequence_length + sequence_length"},
            "logits": {0: "batch", 1: "sequence_length"},
            **{f"past_key_values.{k}": {0: "batch", 2: "past_sequence_length"} for k in kv},
            **{f"present.{k}": {0: "batch", 2: "past_sequence_length + sequence_length"} for k in kv}}
    return Spec(module, args, ["input_ids", "attention_mask", *(f"past_key_values.{k}" for k in kv)],
                ["logits", *(f"present.{k}" for k in kv)], axes, auto=(("attention_mask", 1),))


def _gpt2short() -> Spec:
    """GPT-2 with a 64-row position table: past + new tokens at the usual generated length (64 + 64) index past it.

    Not in ``ARCHS`` (the conformance matrix has ``gpt2``): the precision tests export it by name.
    """
    return _gpt2(positions=64, width=128, heads=4)


def _dynamo_shapes(spec: Spec) -> dict:
    """torch.export Dims for the dynamic axes of each input, one Dim per name; ``auto`` axes named by torch."""
    import torch

    dims, shapes = {}, {}
    for name in spec.inputs:
        axes = {}
        for axis, label in spec.axes.get(name, {}).items():
            if (name, axis) in spec.auto:
                axes[axis] = torch.export.Dim.AUTO
                continue
            short = {"sequence_length": "seq", "past_sequence_length": "past"}.get(label, label)
            low = 400 if short == "samples" else 1
            dims.setdefault(short, torch.export.Dim(short, min=low, max=100000 if short == "samples" else 512))
            axes[axis] = dims[short]
        shapes[name] = axes or None
    return shapes


def export(name: str, out: Path) -> None:
    """Export ``name`` (``EXPORTS``, or ``gpt2short-ts``/``-dynamo``) to ``out`` (``model.onnx``, and
    ``model.onnx.data`` for dynamo)."""
    import torch

    torch.manual_seed(0)
    arch, exporter = name.rsplit("-", 1)
    spec = globals()[f"_{arch}"]()
    spec.module.eval()
    if exporter == "dynamo":
        torch.onnx.export(spec.module, spec.args, str(out), input_names=spec.inputs, output_names=spec.outputs,
                          dynamo=True, dynamic_shapes=(tuple(_dynamo_shapes(spec).values()),), verbose=False)
    else:
        torch.onnx.export(spec.module, spec.args, str(out), input_names=spec.inputs, output_names=spec.outputs,
                          dynamo=False, opset_version=17, dynamic_axes=spec.axes)


def exported_model(name: str) -> Path:
    """The cached export ``name`` (made in a fresh interpreter when missing): the folder's ``model.onnx``."""
    key = f"v2-torch-{version('torch')}-transformers-{version('transformers')}"
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
