"""`trtfarm init`'s example profiles agree where the model's inputs share a dimension (issue 59).

silero-vad's ``input [?, ?]`` and ``state [2, ?, 128]`` share their batch, unnamed in both: the example gave the state
the sequence's sizes in its batch (``2x16x128:2x128x128:2x512x128`` beside ``input 1x16:8x128:32x512``), and the
build of the example, uncommented, failed. A model of the same inputs, whose graph ties the two batches, now builds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import yaml
from onnx import TensorProto, helper

from trtfarm.project.init_files import _examples, profiles_section
from trtfarm.vocabulary.buildspec import BuildSpec

from .conftest import REPO

TEMPLATE = (REPO / "trtfarm/templates/farm.yaml").read_text()


def write_vad_like(path: Path) -> Path:
    """``input [?, ?]`` and ``state [2, ?, 128]``, unnamed; the state's batch is added to the input's mean, per row."""
    n = helper.make_node
    nodes = [n("ReduceMean", ["input"], ["mean"], axes=[1], keepdims=1),  # [N, 1]
             n("Unsqueeze", ["mean", "zero"], ["mean3"]),  # [1, N, 1]
             n("Add", ["state", "mean3"], ["stateN"]),  # [2, N, 128]: N of both inputs must agree
             n("ReduceSum", ["stateN", "axes02"], ["output"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "vad_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, None]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, 128])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [None]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, None, 128])],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
         helper.make_tensor("axes02", TensorProto.INT64, [2], [0, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def uncommented(text: str) -> str:
    """farm.yaml with its example profiles uncommented, as the comment above them says to do."""
    return "\n".join(line[2:] if line.startswith(("# profiles:", "#   ")) else line for line in text.splitlines()
                     if "profiles.yaml" not in line)


def test_an_unnamed_batch_gets_the_batch_sizes_wherever_it_stands():
    examples = _examples({"input": (None, None), "state": (2, None, 128)})
    assert examples == {"input": "1x16:8x128:32x512", "state": "2x1x128:2x8x128:2x32x128"}


def test_a_named_dimension_has_one_range_in_every_input():
    examples = _examples({"input_ids": ("batch", "seq"), "past": ("batch", 4, "past", 16), "position": ("seq",),
                          "frames": (1, None, 80)})
    assert examples == {"input_ids": "1x16:8x128:32x512", "past": "1x4x16x16:8x4x128x16:32x4x512x16",
                        "position": "16:128:512", "frames": "1x1x80:1x8x80:1x32x80"}


def test_the_example_of_a_vad_like_model_builds_once_uncommented(tmp_path):
    model = write_vad_like(tmp_path / "vad" / "model.onnx")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRTFARM_", "PREFECT_"))}
    done = subprocess.run([sys.executable, "-m", "trtfarm", "init"], cwd=model.parent, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    text = (model.parent / "farm.yaml").read_text()
    assert "#     state: 2x1x128:2x8x128:2x32x128" in text, text
    (model.parent / "farm.yaml").write_text(uncommented(text))
    assert BuildSpec.model_validate(yaml.safe_load(uncommented(text))).profiles
    built = subprocess.run([sys.executable, "-m", "trtfarm", "build", "model.onnx", "--target", "rtx-4090-rtx1.7"],
                           cwd=model.parent, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]


@pytest.mark.integration
def test_silero_vads_example_profiles_share_their_batch():
    from .corpus.sources import corpus_file

    text = profiles_section(corpus_file("silero-vad"))
    assert "#   - input: 1x16:8x128:32x512\n#     state: 2x1x128:2x8x128:2x32x128\n" in text, text
