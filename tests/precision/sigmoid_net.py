"""A text-detector-shaped conv net built with onnx.helper: a strided backbone, a top-down neck and a sigmoid map.

Like a real text detector (a DBNet-style probability map), its output lives in [0, 1] and is nearly 0 wherever
there is no text, so on random inputs every pixel sits around ``sigmoid(bias)``: with the default bias about 1e-4,
FP16's subnormal range, where cosine similarity is ill-conditioned. ``width=32`` gives about 1.4M parameters (5.7
MB), the size of the detector that showed the false refusal; the tests use a narrower one.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def conv(self, x: str, cin: int, cout: int, name: str, k: int = 3, stride: int = 1, relu: bool = True,
             bias: float | None = None) -> str:
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        b = np.full(cout, bias) if bias is not None else self.rng.standard_normal(cout) * 0.05
        self.inits += [numpy_helper.from_array(w.astype(np.float32), f"{name}.w"),
                       numpy_helper.from_array(b.astype(np.float32), f"{name}.b")]
        self.nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.y"], name=name,
                                           kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return f"{name}.y"
        self.nodes.append(helper.make_node("Relu", [f"{name}.y"], [f"{name}.a"], name=f"{name}.relu"))
        return f"{name}.a"

    def up(self, x: str, name: str) -> str:
        if "up.scales" not in {i.name for i in self.inits}:
            self.inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up.scales"))
        self.nodes.append(helper.make_node("Resize", [x, "", "up.scales"], [f"{name}.y"], name=name, mode="nearest"))
        return f"{name}.y"

    def add(self, a: str, b: str, name: str) -> str:
        self.nodes.append(helper.make_node("Add", [a, b], [f"{name}.y"], name=name))
        return f"{name}.y"


def sigmoid_net(width: int = 32, seed: int = 0, bias: float = -9.0, size: int | None = None) -> onnx.ModelProto:
    """The model: input ``image`` [batch, 3, h, w] (divisible by 16), output ``prob`` [batch, 1, h, w].

    ``size``: fixed h = w (generated inputs then have that size); None: dynamic (generated inputs are 64 x 64).
    """
    g, w, hw = _Builder(seed), width, [size, size] if size else ["h", "w"]
    x = g.conv("image", 3, w, "stem", stride=2)
    c1 = g.conv(g.conv(x, w, w, "s1.conv1"), w, w, "s1.conv2")                       # 1/2
    c2 = g.conv(g.conv(g.conv(c1, w, 2 * w, "s2.down", stride=2), 2 * w, 2 * w, "s2.conv1"),
                2 * w, 2 * w, "s2.conv2")                                             # 1/4
    c3 = g.conv(g.conv(g.conv(c2, 2 * w, 4 * w, "s3.down", stride=2), 4 * w, 4 * w, "s3.conv1"),
                4 * w, 4 * w, "s3.conv2")                                             # 1/8
    c4 = g.conv(g.conv(c3, 4 * w, 8 * w, "s4.down", stride=2), 8 * w, 8 * w, "s4.conv1")  # 1/16
    p4 = g.conv(c4, 8 * w, 2 * w, "neck.l4", k=1, relu=False)
    p3 = g.add(g.up(p4, "neck.up4"), g.conv(c3, 4 * w, 2 * w, "neck.l3", k=1, relu=False), "neck.add3")
    p2 = g.add(g.up(p3, "neck.up3"), g.conv(c2, 2 * w, 2 * w, "neck.l2", k=1, relu=False), "neck.add2")
    h = g.conv(p2, 2 * w, 2 * w, "head.conv")
    h = g.up(g.up(h, "head.up1"), "head.up2")                                       # back to full size
    logit = g.conv(h, 2 * w, 1, "head.logit", k=1, relu=False, bias=bias)
    g.nodes.append(helper.make_node("Sigmoid", [logit], ["prob"], name="head.sigmoid"))
    graph = helper.make_graph(
        g.nodes, "sigmoid_net", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, *hw])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["batch", 1, *hw])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
