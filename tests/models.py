"""Small models that are not the bundled encoder, for the journeys a user takes with "your model"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def write_small_cnn(path: Path, batch: int | str = 1) -> Path:
    """A conv net with one input ``x`` (``batch``x3x32x32; a str batch is a dynamic, named dim) and output ``y``."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(8, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [batch, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


if __name__ == "__main__":  # the docs' "your model": python tests/models.py PATH [BATCH]
    import sys

    write_small_cnn(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].isdigit() else
                    int(sys.argv[2]) if len(sys.argv) > 2 else 1)
