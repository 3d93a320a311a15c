"""The conformance matrix: every corpus model through every model-reading step of trtfarm, as a user runs them.

One row per model (``ROWS``), one cell per step (``STEPS``), each cell's expected outcome written in the row:

- ``plain``: the plain TensorRT-RTX builder (parse, the row's profile, build), in its own interpreter. It is the
  referee: trtfarm's ``build`` cell must agree with it (built where it builds; refused where it refuses).
- ``precheck``: the profile pre-check against the model's inputs (``check_profiles_against_inputs``).
- ``build``: ``trtfarm build`` for one TensorRT-RTX target; ``rerun``: the same again (up to date).
- ``verify``: ``trtfarm verify`` of the published plan, for the target's GPU (the runtime step needs that GPU).
  These three run in this process through the command line's own app, as ``tests/corpus/openworld.py`` runs them.
- ``fp16``: ``trtfarm precision --mode fp16`` (ModelOpt AutoCast and the accuracy gate against FP32 on CPU), as a
  real process (``python -m trtfarm``), as is ``int8``.
- ``int8``: ``trtfarm precision --mode int8`` with calibration data generated for the model's inputs.

An expectation is an outcome (``built``, ``up-to-date``, ``ok``, ``passed``, ``refused``, ``failed``, or ``-`` for a
step that has nothing to run on), optionally followed by ``: words`` that the outcome's message must contain.
``bench/conformance_matrix.py`` prints the matrix; ``tests/test_conformance.py`` and ``tests/test_conformance_rows.py``
compare it with the expectations.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from tests.corpus.exported import exported_model
from tests.corpus.sources import corpus_file
from tests.fleets import ONE_RTX_TARGET

REPO = Path(__file__).resolve().parents[2]
STEPS = ("plain", "precheck", "build", "rerun", "verify", "fp16", "int8")
TARGET_GPU = ("NVIDIA GeForce RTX 4090", "8.9")
FLEET = ONE_RTX_TARGET  # one TensorRT-RTX target, released on build

OCR_LINE = "input1=1x1x64x64:1x1x64x256:1x1x64x512"
BERT = ["input_ids=1x16:4x64:8x128", "attention_mask=1x16:4x64:8x128"]
RESNET = ["pixel_values=1x3x224x224:4x3x224x224:8x3x224x224"]
OPS = "ConvInteger"  # the onnxruntime-only operator TensorRT's parser rejects first
# INT8 on generated inputs moves the 2-class softmax of PaddleOCR's angle classifier by more than 10 % of its range
ONE_CLASS = "FP32 picks class 0 at every position on these inputs"
CLASSIFIER_INT8 = "output 'save_infer_model/scale_0.tmp_1': top1_agreement"
QUANTIZED = "already quantized with onnxruntime's operators (ConvInteger x21"


@dataclass(frozen=True)
class Row:
    """One corpus model, the profile it is built with, and what each step must give."""

    name: str
    source: str  # who made the file (for the README table)
    model: str  # a ``sources.MEMBERS`` or ``exported.EXPORTS`` name
    profile: list[str]
    expect: dict[str, str]
    rename_dims: dict[int, str] = field(default_factory=dict)  # a copy with these input dims renamed

    def path(self, work: Path) -> Path:
        """The model in its own export folder under ``work`` (external data beside it)."""
        src = corpus_or_export(self.model)
        folder = work / self.name
        if not (folder / "model.onnx").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            for f in src.parent.iterdir():
                if f.name == src.name or f.name.startswith(f"{src.name}."):  # the model and its external data
                    shutil.copy(f, folder / ("model.onnx" if f == src else f.name))
            if self.rename_dims:
                _rename_dims(folder / "model.onnx", self.rename_dims)
        return folder / "model.onnx"


def corpus_or_export(name: str) -> Path:
    """A corpus model by name: a member of a pinned wheel, or an export made here."""
    from tests.corpus.sources import MEMBERS

    return corpus_file(name) if name in MEMBERS else exported_model(name)


def _rename_dims(path: Path, names: dict[int, str]) -> None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for i, name in names.items():
        dims[i].Clear()
        dims[i].dim_param = name
    onnx.save(model, str(path))


BUILT = {"plain": "built", "precheck": "passed", "build": "built", "rerun": "up-to-date", "verify": "ok"}
ROWS = [
    Row("ddddocr-crnn", "PyTorch 1.9 (ddddocr 1.6.1)", "ddddocr-common", [OCR_LINE],
        {**BUILT, "fp16": "passed", "int8": "passed"}),
    Row("ddddocr-det", "PyTorch 1.9 (ddddocr 1.6.1)", "ddddocr-det", [],
        {**BUILT, "fp16": "passed", "int8": "passed"}),
    Row("ddddocr-quantized", "onnxruntime quantizer (ddddocr 1.6.1)", "ddddocr-old", [OCR_LINE],
        {"plain": f"refused: {OPS}", "precheck": "passed", "build": f"failed: {OPS} x21", "rerun": "-",
         "verify": "-", "fp16": f"refused: {QUANTIZED}", "int8": f"refused: {QUANTIZED}"}),
    Row("ppocr-det", "Paddle2ONNX (rapidocr 1.4.4)", "ppocr-det", ["x=1x3x320x320:1x3x640x640:1x3x960x960"],
        {**BUILT, "fp16": "not judged: output 'sigmoid_0.tmp_0' is uninformative",
         "int8": "not judged: output 'sigmoid_0.tmp_0' is uninformative"}),
    # a CTC softmax over 6,625 characters per step, judged (since the gate's rules 2) by the character each step
    # picks, as CTC decoding reads it; on generated images it reads blank at every step: nothing to judge
    Row("ppocr-rec", "Paddle2ONNX (rapidocr 1.4.4)", "ppocr-rec", ["x=1x3x48x160:4x3x48x320:8x3x48x640"],
        {**BUILT, "fp16": f"not judged: {ONE_CLASS}", "int8": f"not judged: {ONE_CLASS}"}),
    # its input is written [-1, 3, ?, ?]: a -1 batch, and height and width both named "?"
    Row("ppocr-cls", "Paddle2ONNX (rapidocr 1.4.4)", "ppocr-cls", ["x=1x3x48x192:8x3x48x192:32x3x48x192"],
        {"plain": "refused: Input dimensions with this name have different constant values",
         "precheck": "refused: both named '?'", "build": "refused: both named '?'", "rerun": "-", "verify": "-",
         "fp16": "passed", "int8": f"failed: {CLASSIFIER_INT8}"}),
    Row("ppocr-cls-renamed", "Paddle2ONNX, dims 2-3 renamed", "ppocr-cls", ["x=1x3x48x192:8x3x48x192:32x3x48x192"],
        {**BUILT, "fp16": "passed", "int8": f"failed: {CLASSIFIER_INT8}"}, rename_dims={2: "height", 3: "width"}),
    Row("bert-torchscript", "torch.onnx TorchScript (transformers BertModel)", "bert-ts", BERT,
        {**BUILT, "fp16": "passed", "int8": "passed"}),
    Row("bert-dynamo", "torch.onnx dynamo, external data", "bert-dynamo", BERT,
        {**BUILT, "fp16": "passed", "int8": "passed"}),  # its mask's finfo.min histograms: workarounds, 6
    Row("resnet-torchscript", "torch.onnx TorchScript (transformers ResNet)", "resnet-ts", RESNET,
        {**BUILT, "fp16": "passed", "int8": "passed"}),
    Row("resnet-dynamo", "torch.onnx dynamo, external data", "resnet-dynamo", RESNET,
        {**BUILT, "fp16": "passed", "int8": "passed"}),
]


@dataclass
class Cell:
    """What one step gave: its outcome, the message that goes with it, and how long it took."""

    outcome: str
    detail: str = ""
    seconds: float = 0.0
    traceback: bool = False

    def matches(self, expected: str) -> bool:
        """True when the outcome is the expected one and the message holds the expected words."""
        outcome, _, words = expected.partition(": ")
        return self.outcome == outcome and not self.traceback and words in self.detail

    def to_json(self) -> dict:
        """``{outcome, detail, seconds}``."""
        return {"outcome": self.outcome, "detail": self.detail, "seconds": round(self.seconds, 2)}


def _cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "trtfarm", *args], cwd=cwd, env=env, capture_output=True,
                          text=True)
    return done.returncode, done.stdout, done.stderr


def _in_process(*args: str) -> tuple[int, str, str]:
    """``trtfarm ARGS`` in this process through the command line's own app, as ``python -m trtfarm`` runs it (a
    traceback printed on stderr): a build, its rerun and verify need no interpreter of their own, whose start was
    most of a rerun's time. The precision steps stay real processes (``_cli``): their memory budget counts their
    process's peak."""
    from tests.corpus.openworld import cli

    code, stdout, stderr, _ = cli(*args)
    return code, stdout, stderr


def _message(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return " ".join(lines)[-2000:]


PLAIN = """
import sys, tensorrt_rtx as trt
class Log(trt.ILogger):
    def __init__(self):
        trt.ILogger.__init__(self)
    def log(self, severity, msg):
        if severity <= trt.ILogger.ERROR:
            print(msg)
logger = Log()
builder = trt.Builder(logger)
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
if not parser.parse_from_file(sys.argv[1]):
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        print(e.node_operator(), e.desc())
    sys.exit(3)
config = builder.create_builder_config()
if len(sys.argv) > 2:
    profile = builder.create_optimization_profile()
    for arg in sys.argv[2:]:
        name, shapes = arg.split("=")
        profile.set_shape(name, *([int(d) for d in s.split("x")] for s in shapes.split(":")))
    config.add_optimization_profile(profile)
sys.exit(0 if builder.build_serialized_network(network, config) is not None else 4)
"""


def plain_build(path: Path, profile: list[str]) -> Cell:
    """The plain TensorRT-RTX builder on ``path`` with ``profile``: built, or refused with its own messages."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PLAIN, str(path), *profile], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        return Cell("built", seconds=seconds)
    said = " ".join(line.strip() for line in done.stdout.splitlines() if line.strip())
    return Cell("refused", said[-2000:] or done.stderr[-2000:], seconds, "Traceback" in done.stderr)


def precheck(path: Path, profile: list[str]) -> Cell:
    """The profile pre-check trtfarm runs before any build."""
    from trtfarm.errors import UserInputError
    from trtfarm.onnxfile import onnx_inputs
    from trtfarm.profiles.profile import check_profiles_against_inputs, profile_from_args

    start = time.perf_counter()
    try:
        check_profiles_against_inputs([profile_from_args(profile)] if profile else [], onnx_inputs(path), str(path))
    except UserInputError as err:
        return Cell("refused", str(err), time.perf_counter() - start)
    return Cell("passed", seconds=time.perf_counter() - start)


def build(path: Path, row: Row, work: Path) -> tuple[Cell, dict | None]:
    """``trtfarm build`` of one RTX target into a store under ``work``: the cell and the target's JSON row."""
    (work / "gpu_targets.yaml").write_text(FLEET)
    args = ["build", str(path), "--name", row.name, "--store", (work / "store").as_uri(), "--targets-file",
            str(work / "gpu_targets.yaml"), "--json"]
    for p in row.profile:
        args += ["--profile", p]
    start = time.perf_counter()
    code, stdout, stderr = _in_process(*args)
    seconds = time.perf_counter() - start
    if code == 2 or not stdout.strip():
        return Cell("refused" if code == 2 else "error", _message(stderr), seconds, "Traceback" in stderr), None
    target = json.loads(stdout)[0]
    return Cell(target["status"], target.get("reason", ""), seconds, "Traceback" in stderr), target


def verify(work: Path, target: dict) -> Cell:
    """``trtfarm verify`` of the published plan against the target's GPU (the runtime step needs that GPU)."""
    manifest = Path(urlparse(target["manifest"]).path)  # the build's --json names it by URL
    start = time.perf_counter()
    code, stdout, stderr = _in_process("verify", str(manifest), "--gpu-name", TARGET_GPU[0],
                                       "--compute-capability", TARGET_GPU[1], "--json")
    seconds = time.perf_counter() - start
    if not stdout.strip():
        return Cell("error", _message(stderr), seconds, "Traceback" in stderr)
    doc = json.loads(stdout)
    bad = "; ".join(c["detail"] for c in doc["checks"] if c["ok"] is False)
    return Cell("ok" if doc["ok"] and code == 0 else "mismatch", bad, seconds, "Traceback" in stderr)


def calibration_for(path: Path, out: Path) -> Path:
    """Calibration data for the model's inputs: 32 generated samples with realistic masks and ids."""
    import numpy as np
    import onnx

    from trtfarm.precision.inputs import generated_inputs, probe_sizes
    from trtfarm.precision.runs import infer

    model = onnx.load(str(path), load_external_data=False)
    sizes = probe_sizes(model, lambda feed: infer(path, [feed]), path=str(path))
    np.savez(out, **generated_inputs(model, samples=32, seed=7, sizes=sizes, path=str(path)).data)
    return out


def precision(path: Path, mode: str, work: Path) -> Cell:
    """``trtfarm precision --mode MODE`` (int8 with generated calibration data)."""
    args = ["precision", str(path), "--mode", mode, "--out", str(work / f"{mode}.onnx"), "--json"]
    if mode in ("int8", "fp8"):
        args += ["--calibration", str(calibration_for(path, work / "calib.npz"))]
    start = time.perf_counter()
    code, stdout, stderr = _cli(*args, cwd=work)
    seconds = time.perf_counter() - start
    if code == 2 or not stdout.strip():
        return Cell("refused" if code == 2 else "error", _message(stderr), seconds, "Traceback" in stderr)
    gate = json.loads(stdout)["gate"]
    # the gate's own verdict: passed, failed, or not judged (no sample carries signal on an output)
    outcome = gate.get("verdict") or {True: "passed", False: "failed", None: "not judged"}[gate["passed"]]
    return Cell(outcome, "; ".join(gate["failures"] + gate["warnings"]), seconds, "Traceback" in stderr)


def run_row(row: Row, work: Path, steps: tuple[str, ...] = STEPS) -> dict[str, Cell]:
    """Every step of ``steps`` for one row, in a folder of its own under ``work``."""
    path = row.path(work / "models")
    folder = work / "runs" / row.name
    folder.mkdir(parents=True, exist_ok=True)
    cells: dict[str, Cell] = {}
    target = None
    for step in steps:
        if step == "plain":
            cells[step] = plain_build(path, row.profile)
        elif step == "precheck":
            cells[step] = precheck(path, row.profile)
        elif step == "rerun" and cells.get("build", Cell("-")).outcome != "built":
            cells[step] = Cell("-")
        elif step in ("build", "rerun"):
            cells[step], found = build(path, row, folder)
            target = target or found
        elif step == "verify":
            cells[step] = verify(folder, target) if target and target.get("manifest") else Cell("-")
        else:
            cells[step] = precision(path, step, folder)
    return cells
