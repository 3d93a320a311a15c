"""Profiles are refused before any build: 0-sized dims when parsed, names/ranks/static dims against the ONNX inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtfarm.errors import ConfigError, UserInputError
from trtfarm.onnxfile import onnx_inputs
from trtfarm.profiles.profile import check_profiles_against_inputs, load_profiles_file, profile_from_args

from ..conftest import ENCODER_PROFILE


@pytest.mark.parametrize("spec", ["0x4:0x4:0x4", "1x0:1x4:1x4", "1x4:1x4:0x4"])
def test_a_zero_sized_dimension_is_refused_when_parsed(spec):
    with pytest.raises(UserInputError, match="at least 1"):
        profile_from_args([f"input_ids={spec}"])


def test_a_profiles_file_with_a_zero_sized_dimension_names_file_and_line(tmp_path):
    path = tmp_path / "profiles.yaml"
    path.write_text("profiles:\n  - input_ids: 1x16:16x128:32x512\n  - input_ids: 0x16:0x16:0x16\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: .*at least 1"):
        load_profiles_file(path)


def _model(path, inputs, initializers=(), sparse=()):
    """An Add chain over ``inputs`` (name -> dims, str for a dynamic dim); initializers may be listed as inputs."""
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n, dims in inputs.items()]
    names = list(inputs) + [t.name for t in initializers] + [s.values.name for s in sparse]
    nodes = [helper.make_node("Identity", [names[0]], ["y0"])]
    nodes += [helper.make_node("Add", [f"y{i}", n], [f"y{i + 1}"]) for i, n in enumerate(names[1:])]
    out = helper.make_tensor_value_info(f"y{len(names) - 1}", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", infos, [out], list(initializers), sparse_initializer=list(sparse))
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_onnx_inputs_reads_names_and_dims_and_leaves_out_initializers(tmp_path, example_onnx):
    assert onnx_inputs(example_onnx) == {"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq")}
    w = numpy_helper.from_array(np.zeros((4, 8), np.float32), "w")
    s = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(2, np.float32), "sp"),
                                  numpy_helper.from_array(np.array([0, 5], np.int64), "sp_idx"), [4, 8])
    # IR < 4 style: the weights are listed among the graph inputs too
    path = _model(tmp_path / "m.onnx", {"x": ["batch", 8], "scale": [1], "w": [4, 8], "sp": [4, 8]}, [w], [s])
    assert [i.name for i in onnx.load(str(path)).graph.input] == ["x", "scale", "w", "sp"]
    assert onnx_inputs(path) == {"x": ("batch", 8), "scale": (1,)}


@pytest.mark.parametrize("content", [b"", b"this is not an onnx file\xff\xfe", b"\x0a\x05abc"])
def test_onnx_inputs_of_a_file_that_is_not_onnx_is_a_user_error(tmp_path, content):
    (tmp_path / "bad.onnx").write_bytes(content)
    with pytest.raises(UserInputError, match="not a valid ONNX model"):
        onnx_inputs(tmp_path / "bad.onnx")


ENCODER = {"input_ids": (None, None), "attention_mask": (None, None)}
FIXED = {"x": (None, 8), "scale": (1,)}


def test_profiles_that_fit_the_inputs_pass():
    check_profiles_against_inputs([profile_from_args(ENCODER_PROFILE)], ENCODER)
    check_profiles_against_inputs([profile_from_args(["x=1x8:4x8:16x8"])], FIXED)
    check_profiles_against_inputs([profile_from_args(["x=1x8:4x8:16x8", "scale=1:1:1"])], FIXED)
    check_profiles_against_inputs([], {"x": (1, 8)})  # a static model needs no profile


def test_no_profile_for_a_dynamic_model_names_its_dynamic_inputs_and_where_profiles_come_from():
    with pytest.raises(UserInputError, match=r"no profile for its dynamic inputs 'input_ids' \(\?x\?\), "
                                             r"'attention_mask' \(\?x\?\); give --profile input_ids=MIN:OPT:MAX"):
        check_profiles_against_inputs([], ENCODER)


@pytest.mark.parametrize("args,inputs,words", [
    (["input_idz=1x16:16x128:32x512", "attention_mask=1x16:16x128:32x512"], ENCODER,
     ["'input_idz' is not an input", "its inputs: input_ids, attention_mask", "no range for dynamic input "
      "'input_ids'", "--profile input_ids=MIN:OPT:MAX"]),
    (["input_ids=1x16:16x128:32x512"], ENCODER, ["no range for dynamic input 'attention_mask' (?x?)"]),
    (["input_ids=16:128:512", "attention_mask=1x16:16x128:32x512"], ENCODER,
     ["input 'input_ids': 16:128:512 has 1 dimensions but the model's input has 2 (?x?); give 2 dimensions"]),
    (["x=1x4:4x8:16x8"], FIXED, ["input 'x': dimension 1 is fixed at 8 in the model (?x8)", "gives 4:8:8",
                                 "use 8 there"]),
    (["x=1x8:4x8:16x8", "scale=2:2:2"], FIXED, ["input 'scale': dimension 0 is fixed at 1"]),
])
def test_a_profile_that_does_not_fit_the_inputs_is_refused_naming_the_input_and_the_fix(args, inputs, words):
    with pytest.raises(UserInputError) as refused:
        check_profiles_against_inputs([profile_from_args(ENCODER_PROFILE) if "input_ids" in inputs else
                                       profile_from_args(["x=1x8:1x8:1x8"]), profile_from_args(args)], inputs)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("profile 1")  # the first profile fits; the second does not
    for w in words:
        assert w in message
