"""Write the example sentence-embedding encoder as ONNX (deterministic: same bytes on every run).

A one-layer transformer encoder: token + position embeddings, masked self-attention, a ReLU feed-forward
block, masked mean pooling and L2 normalisation. Inputs ``input_ids`` and ``attention_mask`` (int64,
``[batch, seq]``, seq <= 512); output ``embeddings`` (float32, ``[batch, 64]``).

Beside the model it writes ``calib.npz``, the calibration data an int8 build needs (``trtfarm build ... --precision
int8`` finds it there): ``CALIB_SAMPLES`` sentences of ``CALIB_SEQ`` token ids with their attention masks, lengths
as the example's traffic has them (``make_traffic.py``: lognormal around 63 tokens) and token ids drawn as words are
(a few frequent, many rare), padded with 0. Both files are the same bytes on every run.

Usage: ``python examples/encoder/make_model.py [--out examples/encoder/model.onnx] [--seed 0]``
"""

from __future__ import annotations

import argparse
import io
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, HEADS, FFN, MAX_LEN = 1000, 64, 4, 128, 512
CALIB_SAMPLES, CALIB_SEQ = 64, 128  # the profile's opt sequence length (farm.yaml: 16x128)


def _weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def dense(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    return {
        "tok_emb": (rng.standard_normal((VOCAB, HIDDEN)) * 0.5).astype(np.float32),
        "pos_emb": (rng.standard_normal((MAX_LEN, HIDDEN)) * 0.1).astype(np.float32),
        "ln0_g": np.ones(HIDDEN, np.float32), "ln0_b": np.zeros(HIDDEN, np.float32),
        "wq": dense(HIDDEN, HIDDEN), "wk": dense(HIDDEN, HIDDEN), "wv": dense(HIDDEN, HIDDEN),
        "wo": dense(HIDDEN, HIDDEN), "bo": np.zeros(HIDDEN, np.float32),
        "ln1_g": np.ones(HIDDEN, np.float32), "ln1_b": np.zeros(HIDDEN, np.float32),
        "w1": dense(HIDDEN, FFN), "b1": np.zeros(FFN, np.float32),
        "w2": dense(FFN, HIDDEN), "b2": np.zeros(HIDDEN, np.float32),
        "ln2_g": np.ones(HIDDEN, np.float32), "ln2_b": np.zeros(HIDDEN, np.float32),
    }


def _constants() -> dict[str, np.ndarray]:
    head_dim = HIDDEN // HEADS
    return {
        "c_zero": np.array(0, np.int64), "c_one": np.array(1, np.int64),
        "c_axis1": np.array([1], np.int64), "c_seq_idx": np.array([1], np.int64),
        "c_heads_shape": np.array([0, 0, HEADS, head_dim], np.int64),
        "c_merge_shape": np.array([0, 0, HIDDEN], np.int64),
        "c_scale": np.array(1.0 / np.sqrt(head_dim), np.float32),
        "c_neg": np.array(-1e4, np.float32), "c_fone": np.array(1.0, np.float32),
        "c_eps": np.array(1e-6, np.float32),
    }


def _nodes() -> list[onnx.NodeProto]:
    n = helper.make_node
    return [
        # embeddings: token + position (positions 0..seq-1)
        n("Gather", ["tok_emb", "input_ids"], ["tok"], name="embed/tokens"),
        n("Shape", ["input_ids"], ["ids_shape"], name="embed/shape"),
        n("Gather", ["ids_shape", "c_one"], ["seq_len"], name="embed/seq_len", axis=0),
        n("Range", ["c_zero", "seq_len", "c_one"], ["positions"], name="embed/range"),
        n("Gather", ["pos_emb", "positions"], ["pos"], name="embed/positions"),
        n("Add", ["tok", "pos"], ["emb"], name="embed/add"),
        n("LayerNormalization", ["emb", "ln0_g", "ln0_b"], ["x0"], name="embed/norm", axis=-1),
        # self-attention
        n("MatMul", ["x0", "wq"], ["q"], name="attn/q"),
        n("MatMul", ["x0", "wk"], ["k"], name="attn/k"),
        n("MatMul", ["x0", "wv"], ["v"], name="attn/v"),
        n("Reshape", ["q", "c_heads_shape"], ["q4"], name="attn/q_heads"),
        n("Reshape", ["k", "c_heads_shape"], ["k4"], name="attn/k_heads"),
        n("Reshape", ["v", "c_heads_shape"], ["v4"], name="attn/v_heads"),
        n("Transpose", ["q4"], ["qh"], name="attn/q_t", perm=[0, 2, 1, 3]),
        n("Transpose", ["k4"], ["kh"], name="attn/k_t", perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vh"], name="attn/v_t", perm=[0, 2, 1, 3]),
        n("MatMul", ["qh", "kh"], ["scores_raw"], name="attn/scores"),
        n("Mul", ["scores_raw", "c_scale"], ["scores"], name="attn/scale"),
        n("Cast", ["attention_mask"], ["maskf"], name="mask/cast", to=TensorProto.FLOAT),
        n("Sub", ["c_fone", "maskf"], ["mask_inv"], name="mask/invert"),
        n("Mul", ["mask_inv", "c_neg"], ["mask_bias2"], name="mask/bias"),
        n("Unsqueeze", ["mask_bias2", "c_axis1"], ["mask_bias3"], name="mask/unsqueeze_heads"),
        n("Unsqueeze", ["mask_bias3", "c_axis1"], ["mask_bias"], name="mask/unsqueeze_query"),
        n("Add", ["scores", "mask_bias"], ["scores_masked"], name="attn/mask"),
        n("Softmax", ["scores_masked"], ["probs"], name="attn/softmax", axis=-1),
        n("MatMul", ["probs", "vh"], ["ctx_h"], name="attn/context"),
        n("Transpose", ["ctx_h"], ["ctx_t"], name="attn/ctx_t", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "c_merge_shape"], ["ctx"], name="attn/merge_heads"),
        n("MatMul", ["ctx", "wo"], ["attn_o"], name="attn/out"),
        n("Add", ["attn_o", "bo"], ["attn_ob"], name="attn/out_bias"),
        n("Add", ["x0", "attn_ob"], ["res1"], name="attn/residual"),
        n("LayerNormalization", ["res1", "ln1_g", "ln1_b"], ["x1"], name="attn/norm", axis=-1),
        # feed-forward
        n("MatMul", ["x1", "w1"], ["h1"], name="ffn/up"),
        n("Add", ["h1", "b1"], ["h1b"], name="ffn/up_bias"),
        n("Relu", ["h1b"], ["h1g"], name="ffn/relu"),
        n("MatMul", ["h1g", "w2"], ["h2"], name="ffn/down"),
        n("Add", ["h2", "b2"], ["h2b"], name="ffn/down_bias"),
        n("Add", ["x1", "h2b"], ["res2"], name="ffn/residual"),
        n("LayerNormalization", ["res2", "ln2_g", "ln2_b"], ["x2"], name="ffn/norm", axis=-1),
        # masked mean pooling + L2 normalisation
        n("Unsqueeze", ["maskf", "c_seq_idx"], ["mask3_t"], name="pool/mask_t"),
        n("Transpose", ["mask3_t"], ["mask3"], name="pool/mask", perm=[0, 2, 1]),
        n("Mul", ["x2", "mask3"], ["masked"], name="pool/apply_mask"),
        n("ReduceSum", ["masked", "c_axis1"], ["summed"], name="pool/sum", keepdims=0),
        n("ReduceSum", ["mask3", "c_axis1"], ["count_raw"], name="pool/count", keepdims=0),
        n("Max", ["count_raw", "c_fone"], ["count"], name="pool/count_floor"),
        n("Div", ["summed", "count"], ["pooled"], name="pool/mean"),
        n("ReduceL2", ["pooled", "c_axis1"], ["norm_raw"], name="pool/l2", keepdims=1),
        n("Max", ["norm_raw", "c_eps"], ["norm"], name="pool/l2_floor"),
        n("Div", ["pooled", "norm"], ["embeddings"], name="pool/normalize"),
    ]


def encoder_model(seed: int = 0) -> onnx.ModelProto:
    """Return the example encoder with weights drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    initializers = [numpy_helper.from_array(v, k) for k, v in {**_weights(rng), **_constants()}.items()]
    graph = helper.make_graph(
        _nodes(), "sentence_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", HIDDEN])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="trtfarm-example")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def calibration_data(seed: int = 0) -> dict[str, np.ndarray]:
    """``input_ids`` and ``attention_mask`` (int64, ``[CALIB_SAMPLES, CALIB_SEQ]``): sentences padded with 0."""
    rng = np.random.default_rng(seed + 1)
    lengths = np.clip(rng.lognormal(np.log(63), 0.45, CALIB_SAMPLES).round(), 5, CALIB_SEQ).astype(np.int64)
    mask = (np.arange(CALIB_SEQ)[None, :] < lengths[:, None]).astype(np.int64)
    ids = ((rng.zipf(1.3, (CALIB_SAMPLES, CALIB_SEQ)) - 1) % (VOCAB - 1) + 1).astype(np.int64)  # ids 1..VOCAB-1
    return {"input_ids": ids * mask, "attention_mask": mask}


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An ``.npz`` (what ``np.load`` reads) with fixed entry times: ``np.savez`` stamps the time it writes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, array in arrays.items():
            npy = io.BytesIO()
            np.save(npy, array, allow_pickle=False)
            z.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), npy.getvalue())
    return out.getvalue()


def main() -> None:
    """Write the model to ``--out`` and its calibration data beside it (``calib.npz``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("model.onnx"))
    parser.add_argument("--seed", type=int, default=0, help="weight seed (a new seed = same graph, new weights)")
    args = parser.parse_args()
    data = encoder_model(args.seed).SerializeToString(deterministic=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    calib = npz_bytes(calibration_data(args.seed))
    args.out.with_name("calib.npz").write_bytes(calib)
    print(f"wrote {args.out} ({len(data):,} bytes) and {args.out.with_name('calib.npz')} ({CALIB_SAMPLES} "
          f"calibration samples for int8)")


if __name__ == "__main__":
    main()
