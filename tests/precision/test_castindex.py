"""trtfarm's indexed ``remove_redundant_casts`` removes what ModelOpt's own removes, on generated cast graphs.

The graphs are drawn at random from what the function looks at: casts between FP64/FP32/FP16/BF16 (same-type casts,
casts up then down, down then up), Constants cast once or read twice, casts whose output is a graph output while
their input has other readers, and subgraphs declaring the tensors the function retypes. The referee is ModelOpt's
function on a copy of the same graph (trtfarm's runs as a conversion runs it, within
``modelopt_workarounds``): the two results must serialise to the same bytes, or raise the same error.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtfarm.precision import castindex
from trtfarm.precision.workarounds import modelopt_workarounds

FLOATS = [TensorProto.DOUBLE, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16]
NP = {TensorProto.DOUBLE: np.float64, TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def _cast(rng, name, tensor, to):
    return helper.make_node("Cast", [tensor], [name], name=f"n_{name}", to=to)


def cast_graph(seed: int) -> onnx.ModelProto:
    """A random graph of casts, constants, unary and binary ops on one [2, 3] input (types kept consistent)."""
    rng = random.Random(seed)
    pool = [("x", TensorProto.FLOAT)]
    nodes = []
    for i in range(rng.randint(4, 30)):
        kind = rng.random()
        name = f"t{i}"
        if kind < 0.45:  # a cast of something already there, often of the last tensor (chains)
            src, _ = pool[-1] if rng.random() < 0.5 else rng.choice(pool)
            to = rng.choice(FLOATS)
            nodes.append(_cast(rng, name, src, to))
            pool.append((name, to))
        elif kind < 0.65:  # a Constant, mostly cast right away
            dtype = rng.choice([TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
            value = numpy_helper.from_array(np.full((2, 3), rng.uniform(-3, 3), NP[dtype]), f"v{i}")
            nodes.append(helper.make_node("Constant", [], [name], name=f"n_{name}", value=value))
            pool.append((name, dtype))
            if rng.random() < 0.8:
                nodes.append(_cast(rng, f"{name}c", name, rng.choice(FLOATS)))
                pool.append((f"{name}c", nodes[-1].attribute[0].i))
        elif kind < 0.85:
            src, dtype = rng.choice(pool)
            nodes.append(helper.make_node(rng.choice(["Relu", "Neg", "Identity"]), [src], [name], name=f"n_{name}"))
            pool.append((name, dtype))
        else:
            a, dtype = rng.choice(pool)
            same = [t for t, d in pool if d == dtype]
            nodes.append(helper.make_node("Add", [a, rng.choice(same)], [name], name=f"n_{name}"))
            pool.append((name, dtype))
    outputs = rng.sample(pool[1:], k=min(len(pool) - 1, rng.randint(1, 4)))
    if rng.random() < 0.3:  # a subgraph that declares outer tensors (ModelOpt's sync retypes those too)
        declared = [helper.make_tensor_value_info(t, d, [2, 3]) for t, d in rng.sample(pool, k=min(3, len(pool)))]
        branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"], name=f"id{seed}")], "branch", [],
                                   [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
                                   value_info=declared)
        nodes.append(helper.make_node("Constant", [], ["cond"], name="n_cond", value=numpy_helper.from_array(
            np.array(True), "cv")))
        nodes.append(helper.make_node("If", ["cond"], ["iff"], name="n_if", then_branch=branch, else_branch=branch))
        outputs.append(("iff", TensorProto.FLOAT))
    graph = helper.make_graph(nodes, "casts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(t, d, [2, 3]) for t, d in dict(outputs).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)  # AutoCast infers types before it removes casts


def _run(function, model: onnx.ModelProto):
    try:
        return function(model).SerializeToString(deterministic=True)
    except Exception as err:  # noqa: BLE001 - the referee's own failure is a result to compare
        return f"{type(err).__name__}: {err}"


def test_the_indexed_removal_removes_what_modelopts_own_removes():
    from modelopt.onnx import utils

    covered = {"same-type": 0, "sequential": 0, "constant folded": 0, "output kept": 0, "subgraph": 0}
    for seed in range(400):
        model = cast_graph(seed)
        theirs, ours = onnx.ModelProto(), onnx.ModelProto()
        theirs.CopyFrom(model)
        ours.CopyFrom(model)
        expected = _run(utils.remove_redundant_casts, theirs)
        with modelopt_workarounds():  # as a conversion runs it: its sync of declarations answered from the index
            assert utils.remove_redundant_casts is castindex.remove_redundant_casts
            got = _run(utils.remove_redundant_casts, ours)
        assert got == expected, f"seed {seed}: the removals differ"
        if isinstance(expected, str):
            continue
        kept = {n.name for n in theirs.graph.node}
        removed = [n for n in model.graph.node if n.op_type == "Cast" and n.name not in kept]
        outputs = {o.name for o in model.graph.output}
        covered["output kept"] += any(n.output[0] in outputs for n in removed)
        after = {n.name: n.attribute[0].t.data_type for n in theirs.graph.node if n.op_type == "Constant"}
        covered["constant folded"] += any(n.op_type == "Constant" and after.get(n.name) not in (
            None, n.attribute[0].t.data_type) for n in model.graph.node)
        covered["subgraph"] += any(n.op_type == "If" for n in model.graph.node) and bool(removed)
        types = {v.name: v.type.tensor_type.elem_type for v in [*model.graph.value_info, *model.graph.output]}
        covered["same-type"] += any(types.get(n.input[0]) == n.attribute[0].i for n in removed)
        covered["sequential"] += any(types.get(n.input[0]) != n.attribute[0].i for n in removed)
    assert all(count >= 5 for count in covered.values()), covered
