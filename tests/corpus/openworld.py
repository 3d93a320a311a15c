"""Every corpus model through every step a user runs, each judged by a referee that is not trtfarm.

Steps (one ``Cell`` each): ``plain`` (the plain TensorRT-RTX builder, in its own interpreter: the referee of
``build``), ``build`` (``trtfarm build``, one TensorRT-RTX target), ``rerun`` (up to date), ``verify``, ``reweight``
(a copy with one weight changed: it must build again), ``ort`` (onnxruntime runs the FP32 model on the model's own
inputs, else on generated ones: the referee of the precision steps), ``fp16`` and ``int8`` (``trtfarm precision``).
trtfarm's commands run in this process through the command line's own app (``cli``), as ``python -m trtfarm`` runs
them: a ``TrtfarmError`` is the one line a user sees, anything else a traceback. A precision step refused for its
memory budget runs again as a real process (the budget counts the process's peak memory, and this one's holds every
model before), as does a failed gate's ``--auto-pin`` command (``cli_process``).

The verdict (``judge``): no step ends in a traceback; ``build`` agrees with ``plain`` (built where it builds,
refused where it refuses, with the builder's first reason in trtfarm's message); a model onnxruntime runs gets a gate
verdict for fp16 and int8 (passed; failed; not judged, naming the output and asking for held-out data), or one line
naming the library that refused it in its own words (not in a path: every model's path holds "onnx"), or asking for
the real inputs a shape tensor needs (``REFUSAL_REASONS``). A failed gate names the layers
that cost the most accuracy, and the ``--auto-pin`` command its result suggests (run as a user pastes it, with the
same data, where asked: ``pin``) ends in a passing FP32 pin set or says why none passes, with figures. A step run
as a real process (``process``: the fp16 step of the first model of a family onnxruntime runs, in the bench; the
auto-pin runs) prints nothing after its result. ``python -m tests.corpus.openworld FAMILY [--share N] [--names
A,B]`` prints a family's cells as JSON lines (``bench/conformance.py`` runs one such process per family, with both).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tests.corpus.families import CorpusModel, family_models, suite_sample
from tests.fleets import ONE_RTX_TARGET

STEPS = ("plain", "build", "rerun", "verify", "reweight", "ort", "fp16", "int8")
TARGET_GPU = ("NVIDIA GeForce RTX 4090", "8.9")
# what a refusal must say, in the step's own phrasing: the library that refused (as a word of the sentence, never
# inside a path: every model's path holds "onnx"), the data it asks for, the memory budget, or what the model
# already is. A refusal with none of these has no reason a user can act on.
LIBRARY = r"(?:ModelOpt|onnxruntime|Polygraphy|onnx|ONNX-GraphSurgeon|onnxslim|onnxconverter-common|onnxscript)"
REFUSAL_REASONS = re.compile("|".join([
    rf"\b(?:failed|stopped) in {LIBRARY}\b",  # whatever a library raised, translated at its adapter
    r"\bonnxruntime (?:refused|cannot|could not)\b",  # the FP32 model's own run
    rf"\b{LIBRARY}(?:'s)? (?:operators|cannot|\w+ conversion wrote)\b",  # what the step knows a library refuses
    r"\bpass real inputs\b", r"\bneeds calibration data\b",  # the data it asks for (a shape tensor's values)
    r"\bfits the memory budget\b", r"\balready quantized\b"]))
# what an --auto-pin run may end in: a pin set that passes, the step's reason that none does (with the gate's
# figures), or not judged (naming the output, asking for held-out data)
PIN_ANSWERS = ("passed", "no pin set", "not judged")
MEMORY_REFUSAL = "fits the memory budget"


@dataclass
class PinSearch:
    """What the ``--auto-pin`` command a failed gate suggested gave: its outcome, what it said, how long it took."""

    outcome: str
    detail: str = ""
    seconds: float = 0.0
    traceback: bool = False
    after: str | None = None


@dataclass
class Cell:
    """What one step gave: its outcome, the message that goes with it, and how long it took.

    A failed precision gate adds the layers its result names as costing the most accuracy (``layers``) and what its
    suggested ``--auto-pin`` gave (``pin``, where asked); a step run as a real process, what it printed after its
    result (``after``; None: run in this process).
    """

    outcome: str
    detail: str = ""
    seconds: float = 0.0
    traceback: bool = False
    layers: list[str] = field(default_factory=list)
    pin: PinSearch | None = None
    after: str | None = None


def cli(*args: str) -> tuple[int, str, str, bool]:
    """Run ``trtfarm ARGS`` in this process: (exit code, stdout, stderr, whether it ended in a traceback)."""
    from trtfarm.cli.main import app
    from trtfarm.errors import TrtfarmError, one_line

    out, err, code, crashed = io.StringIO(), io.StringIO(), 0, False
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = app(args=list(args), prog_name="trtfarm", standalone_mode=False) or 0
        except TrtfarmError as e:
            print(f"error: {one_line(e)}", file=sys.stderr)
            code = e.exit_code
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except Exception as e:  # a traceback: what the judge looks for
            if type(e).__module__.startswith("click"):
                print(f"error: {e}", file=sys.stderr)
                code = getattr(e, "exit_code", 2)
            else:
                traceback.print_exc()
                code, crashed = 1, True
    return code, out.getvalue(), err.getvalue(), crashed


def cli_process(*args: str) -> tuple[int, str, str, bool, str]:
    """``python -m trtfarm ARGS`` as a user runs it, stdout and stderr in one stream in the order written: (exit
    code, the JSON result, what came before it, whether it ended in a traceback, what came after the result).

    The result is the JSON document, else the last ``error:`` line; what follows it (a library's leak report at
    exit) is what the user sees after the answer.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("PREFECT_API_URL", None)
    done = subprocess.run([sys.executable, "-m", "trtfarm", *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=3600)
    text, crashed = done.stdout, "Traceback (most recent call last)" in done.stdout
    if found := re.search(r"^\{$", text, re.MULTILINE):
        _, end = json.JSONDecoder().raw_decode(text, found.start())
        return done.returncode, text[found.start():end], text[:found.start()], crashed, text[end:].strip()
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("error:")), default=len(lines))
    return done.returncode, "", "\n".join(lines[:last + 1]), crashed, "\n".join(lines[last + 1:]).strip()


def _said(stderr: str) -> str:
    return " ".join(line.strip() for line in stderr.splitlines() if line.strip())[-1500:]


# --- the model's own inputs and its profile -------------------------------------------------------------------

def shipped_inputs(model: CorpusModel) -> dict[str, np.ndarray] | None:
    """The inputs the model ships (``test_data_set_0/input_N.pb``) by input name; None when it ships no tensors."""
    import onnx
    from onnx import numpy_helper

    if model.inputs is None:
        return None
    graph = onnx.load(str(model.path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in weights]
    found = {}
    for i, name in enumerate(names):
        file = model.inputs / f"input_{i}.pb"
        try:
            tensor = onnx.TensorProto.FromString(file.read_bytes())
            found[name] = numpy_helper.to_array(tensor)
        except Exception:  # noqa: BLE001 - a sequence, a map or no file: the model ships no tensors for it
            return None
        if found[name].dtype.kind not in "biuf":
            return None
    return found


def profile_for(model: CorpusModel, data: dict[str, np.ndarray] | None) -> list[str]:
    """``--profile`` arguments: its shipped inputs' shapes (shape tensors: values), else three generated points."""
    import onnx

    from trtfarm.onnxfile import onnx_inputs
    from trtfarm.onnxshapes import shape_tensor_inputs

    inputs = onnx_inputs(model.path)
    graph = onnx.load(str(model.path), load_external_data=False).graph
    shapes = shape_tensor_inputs([i for i in graph.input if i.name in inputs], list(graph.node))
    dynamic = [n for n, dims in inputs.items() if dims is None or not all(isinstance(d, int) for d in dims)]
    if not dynamic and not shapes:
        return []
    if data is not None:
        def text(name):
            v = data[name]
            return ",".join(str(int(x)) for x in v.reshape(-1)) if name in shapes else \
                "x".join(str(max(d, 1)) for d in v.shape) or "1"  # a profile dimension is at least 1
        return [f"{n}={':'.join([text(n)] * 3)}" for n in [*dynamic, *shapes] if n in data]
    return _generated_profile(model, dynamic)


def _generated_profile(model: CorpusModel, dynamic: list[str]) -> list[str]:
    import onnx

    from trtfarm.errors import UserInputError
    from trtfarm.precision.inputs import batched, fixed_batch, generated_inputs, probe_sizes
    from trtfarm.precision.runs import infer

    proto = onnx.load(str(model.path), load_external_data=False)

    def point(rows: int, seq: int, probe: bool = True) -> dict[str, list[int]]:
        rows = fixed_batch(proto) or rows  # a static export's batch stays its own
        sizes = probe_sizes(proto, lambda feed: infer(model.path, [feed]), seq=seq) if probe else None
        made = generated_inputs(proto, samples=rows, seq=seq, sizes=sizes)
        return {n: list(v.shape if n not in batched(proto) else (rows, *v.shape[1:])) for n, v in made.data.items()}

    for smallest in (8, 16, 32, 64, 128, 256, 512, 1024):  # the least size the model runs with (a conv stack)
        try:
            points = [point(1, smallest), point(2, 2 * smallest), point(4, 4 * smallest)]
            break
        except UserInputError:
            continue
    else:  # onnxruntime runs it on no generated input (a value it needs, e.g. a sample rate): the names' sizes
        try:
            points = [point(1, 64, False), point(2, 128, False), point(4, 256, False)]
        except UserInputError:
            return []
    return [f"{n}={':'.join('x'.join(map(str, p[n])) for p in points)}" for n in dynamic]


# --- the steps ---------------------------------------------------------------------------------------------------

PLAIN = """
import sys, tensorrt_rtx as trt
class Log(trt.ILogger):
    def __init__(self):
        trt.ILogger.__init__(self)
    def log(self, severity, msg):
        if severity <= trt.ILogger.ERROR:
            print("LOG:", msg.replace("\\n", " "))
logger = Log()
builder = trt.Builder(logger)
network = builder.create_network(0)
parser = trt.OnnxParser(network, logger)
if not parser.parse_from_file(sys.argv[1]):
    for i in range(parser.num_errors):
        e = parser.get_error(i)
        print("REASON:", e.node_operator(), e.desc().replace("\\n", " "))
    sys.exit(3)
config = builder.create_builder_config()
if len(sys.argv) > 2:
    profile = builder.create_optimization_profile()
    tensors = [network.get_input(i) for i in range(network.num_inputs)]
    shape_inputs = {t.name for t in tensors if t.is_shape_tensor}
    for arg in sys.argv[2:]:
        name, spec = arg.split("=")
        if name in shape_inputs:
            profile.set_shape_input(name, *([int(d) for d in s.split(",")] for s in spec.split(":")))
        else:
            profile.set_shape(name, *([int(d) for d in s.split("x")] for s in spec.split(":")))
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
    return Cell("refused", said[-1500:] or done.stderr[-1500:], seconds, "Traceback" in done.stderr)


def _build(model: Path, name: str, profile: list[str], work: Path) -> tuple[Cell, dict | None]:
    args = ["build", str(model), "--name", name, "--store", (work / "store").as_uri(), "--targets-file",
            str(work / "gpu_targets.yaml"), "--json", *(a for p in profile for a in ("--profile", p))]
    start = time.perf_counter()
    code, stdout, stderr, crashed = cli(*args)
    seconds = time.perf_counter() - start
    if code == 2 or not stdout.strip():
        return Cell("refused" if code == 2 else "error", _said(stderr), seconds, crashed), None
    target = json.loads(stdout)[0]
    return Cell(target["status"], target.get("reason", ""), seconds, crashed), target


def _verify(target: dict) -> Cell:
    from urllib.parse import urlparse

    start = time.perf_counter()
    code, stdout, stderr, crashed = cli("verify", urlparse(target["manifest"]).path, "--gpu-name", TARGET_GPU[0],
                                        "--compute-capability", TARGET_GPU[1], "--json")
    if not stdout.strip():
        return Cell("error", _said(stderr), time.perf_counter() - start, crashed)
    doc = json.loads(stdout)
    bad = "; ".join(c["detail"] for c in doc["checks"] if c["ok"] is False)
    return Cell("ok" if doc["ok"] and code == 0 else "mismatch", bad, time.perf_counter() - start, crashed)


def reweighted(src: Path, folder: Path) -> Path | None:
    """A copy of the model (with its external data) with its largest float weight scaled; None when it has none."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(src))
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and np.prod(t.dims) > 0]
    if not floats:
        return None
    biggest = max(floats, key=lambda t: int(np.prod(t.dims)))
    values = numpy_helper.to_array(biggest) * np.float32(1.5) + np.float32(0.25)
    biggest.CopyFrom(numpy_helper.from_array(values.astype(np.float32), biggest.name))
    folder.mkdir(parents=True, exist_ok=True)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL
                   for t in onnx.load(str(src), load_external_data=False).graph.initializer)
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=external, location="model.onnx.data")
    return folder / "model.onnx"


def onnxruntime_runs(model: CorpusModel, data: dict | None) -> Cell:
    """The referee of the precision steps: onnxruntime runs the FP32 model (its own inputs, else generated ones)."""
    import onnx

    from trtfarm.errors import UserInputError
    from trtfarm.precision.inputs import probe_sizes
    from trtfarm.precision.runs import infer

    start = time.perf_counter()
    try:
        if data is not None:
            infer(model.path, [data], keep=False)
        else:
            probe_sizes(onnx.load(str(model.path), load_external_data=False),
                        lambda feed: infer(model.path, [feed]))
    except UserInputError as err:
        return Cell("refused", str(err)[:600], time.perf_counter() - start)
    except Exception as err:  # noqa: BLE001 - a model onnxruntime cannot even load
        return Cell("refused", f"{type(err).__name__}: {str(err)[:400]}", time.perf_counter() - start)
    return Cell("runs", "", time.perf_counter() - start)


def _precision(model: CorpusModel, mode: str, data: dict | None, work: Path, *, process: bool = False,
               pin: bool = False) -> Cell:
    """``trtfarm precision --mode MODE`` (``process``: as a real process); a failed gate's layers, and its
    suggested ``--auto-pin`` run where ``pin`` asks."""
    from tests.corpus.matrix import calibration_for
    from trtfarm.errors import UserInputError

    def run(*a: str) -> tuple[int, str, str, bool, str | None]:
        done = cli_process(*a) if process else (*cli(*a), None)
        if not process and done[0] == 2 and MEMORY_REFUSAL in done[2]:
            # the budget counted this process's peak memory (every model before this one); a user's starts fresh
            fresh.append(" (as a real process: in the bench's, its own peak memory counted against the budget)")
            return cli_process(*a)
        return done

    fresh: list[str] = []
    args = ["precision", str(model.path), "--mode", mode, "--out", str(work / f"{mode}.onnx"), "--json"]
    start = time.perf_counter()
    calibration = []
    if mode == "int8":  # made as a user would: samples of the model's own shapes and value ranges
        with contextlib.suppress(UserInputError):
            calibration = ["--calibration", str(calibration_for(model.path, work / "calib.npz"))]
    code, stdout, stderr, crashed, after = run(*args, *calibration)
    own = ""
    asked = "pass real inputs" in stderr or "needs calibration data" in stderr
    if code == 2 and asked and data is not None:  # as a user does, told to
        np.savez(work / "own.npz", **data)
        code, stdout, stderr, crashed, after = run(*args, "--heldout", str(work / "own.npz"),
                                                   *(["--calibration", str(work / "own.npz")] if mode == "int8"
                                                     else []))
        own = " (with its own inputs, as the first message asked)"
    seconds = time.perf_counter() - start
    if code == 2 or not stdout.strip():
        return Cell("refused" if code == 2 else "error", _said(stderr) + own + "".join(fresh[-1:]), seconds,
                    crashed, after=after)
    doc = json.loads(stdout)
    gate = doc["gate"]
    outcome = gate.get("verdict") or {True: "passed", False: "failed", None: "not judged"}[gate["passed"]]
    said = [gate["note"]] if outcome == "not judged" else []
    cell = Cell(outcome, "; ".join(said + gate["failures"] + gate["warnings"])[:600] + own + "".join(fresh[-1:]),
                seconds, crashed, after=after)
    if outcome == "failed":
        fix = doc.get("fix") or {}
        cell.layers = list(fix.get("costliest_layers") or [])
        if pin:
            cell.pin = follow_auto_pin(fix.get("auto_pin") or "", work / f"{mode}-pinned.onnx")
    return cell


def follow_auto_pin(command: str, out: Path) -> PinSearch:
    """Run the ``--auto-pin`` command a failed gate's result printed, as a user pastes it: a real process (writing
    to ``out``).

    ``passed`` (with the FP32 nodes it pinned), ``no pin set`` (the step's reason: the gate's figures with the
    costliest layers kept in FP32), ``not judged``; anything else is what it ended in.
    """
    argv = shlex.split(command)
    if argv[:2] != ["trtfarm", "precision"] or "--auto-pin" not in argv:
        return PinSearch("no command", f"the failed gate suggests no --auto-pin command: {command!r}"[:600])
    start = time.perf_counter()
    code, stdout, stderr, crashed, after = cli_process(*argv[1:], "--out", str(out), "--json")
    seconds = time.perf_counter() - start
    if not stdout.strip():
        said = _said(stderr)
        found = code == 1 and "--auto-pin:" in said and "still fail" in said  # a failed gate
        return PinSearch("no pin set" if found else "error", said[:600], seconds, crashed, after)
    doc = json.loads(stdout)
    gate, pins = doc["gate"], doc["pinned_fp32_nodes"]
    if gate["verdict"] == "passed":
        text = f"passed with {len(pins)} FP32 node(s): {', '.join(pins)}"
    else:
        text = "; ".join([gate["note"], *gate["failures"], *gate["warnings"]])
    return PinSearch(gate["verdict"], text[:600], seconds, crashed, after)


def run_model(model: CorpusModel, work: Path, steps: tuple[str, ...] = STEPS, *, process: tuple[str, ...] = (),
              pin: bool = False) -> dict[str, Cell]:
    """Every step of ``steps`` for one model, in a folder of its own under ``work``.

    ``process``: the precision modes run as a real process (where onnxruntime runs the model); ``pin``: a failed
    gate's ``--auto-pin`` is run.
    """
    folder = work / model.key.replace("/", "__")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    data = shipped_inputs(model)
    profile = profile_for(model, data)
    name = re.sub(r"[^A-Za-z0-9._-]", "-", model.name)[:60]
    cells: dict[str, Cell] = {}
    target = None
    for step in steps:
        built = cells.get("build", Cell("-")).outcome == "built"
        if step == "plain":
            cells[step] = plain_build(model.path, profile)
        elif step == "build":
            cells[step], target = _build(model.path, name, profile, folder)
        elif step == "rerun":
            cells[step] = _build(model.path, name, profile, folder)[0] if built else Cell("-")
        elif step == "verify":
            cells[step] = _verify(target) if target and target.get("manifest") else Cell("-")
        elif step == "reweight":
            copy = reweighted(model.path, folder / "reweighted") if built else None
            cells[step] = _build(copy, name, profile, folder)[0] if copy else Cell("-")
        elif step == "ort":
            cells[step] = onnxruntime_runs(model, data)
        else:
            runs = cells.get("ort", Cell("-")).outcome == "runs"
            cells[step] = _precision(model, step, data, folder, process=step in process and runs, pin=pin)
    cells["profile"] = Cell("given" if profile else "none", " ".join(profile)[:300])
    return cells


# --- the verdict -----------------------------------------------------------------------------------------------

def _builder_reason(plain: Cell) -> str:
    """Words of the plain builder's first reason (a parser error, else its first logged error) trtfarm must carry."""
    parts = [p.strip() for p in re.split(r"(?=REASON:|LOG:)", plain.detail) if p.strip()]
    first = next((p for p in parts if p.startswith("REASON:")), next(iter(parts), ""))
    text = first.removeprefix("REASON:").removeprefix("LOG:").strip()
    if first.startswith("REASON:"):
        text = text.split(" ", 1)[-1]  # the operator, then the parser's description
    elif found := re.search(r"Error Code \d+: [^(]*\((.*)", text):  # the builder's reason, not its API's name
        text = found[1]
    return re.sub(r"\s+", " ", text)[:60]


def judge(cells: dict[str, Cell]) -> list[str]:
    """What is wrong with one model's cells (empty: everything as the referees say)."""
    wrong = [f"{s}: traceback" for s, c in cells.items() if c.traceback and s != "plain"]
    plain, build = cells.get("plain"), cells.get("build")
    if plain and build:
        if (plain.outcome == "built") != (build.outcome == "built"):
            wrong.append(f"build {build.outcome} where the plain builder {plain.outcome}: {build.detail[:200]}")
        elif plain.outcome != "built":
            reason = _builder_reason(plain)
            if reason and reason not in " ".join(build.detail.split()):
                wrong.append(f"build refused without the builder's reason {reason!r}: {build.detail[:200]}")
        elif cells.get("rerun", Cell("-")).outcome not in ("up-to-date", "-"):
            wrong.append(f"rerun {cells['rerun'].outcome}")
        if build.outcome == "built" and cells.get("reweight", Cell("-")).outcome not in ("built", "-"):
            wrong.append(f"reweight {cells['reweight'].outcome}: a weight change must rebuild")
        if build.outcome == "built" and cells.get("verify", Cell("-")).outcome not in ("ok", "-"):
            wrong.append(f"verify {cells['verify'].outcome}: {cells['verify'].detail[:200]}")
    wrong += [f"{s}: output after the result: {c.after[:200]}" for s, c in cells.items() if c.after]
    if cells.get("ort", Cell("-")).outcome == "runs":
        for mode in ("fp16", "int8"):
            c = cells.get(mode)
            judged = c and (c.outcome in ("passed", "failed") or (  # not judged: names the output, asks for data
                c.outcome == "not judged" and "--heldout" in c.detail and "output" in c.detail))
            if c and not judged and not (
                    c.outcome == "refused" and "\n" not in c.detail and refusal_reason(c.detail)):
                wrong.append(f"{mode} {c.outcome} without a verdict or a library's reason: {c.detail[:200]}")
    for mode in ("fp16", "int8"):
        wrong += _failure_wrongs(mode, cells.get(mode))
    return wrong


def refusal_reason(detail: str) -> str:
    """The phrase of ``detail`` that gives a refusal's reason (``REFUSAL_REASONS``), with the paths in it taken out
    first; "" when it gives none."""
    words = " ".join(w for w in detail.split() if "/" not in w and "\\" not in w)
    found = REFUSAL_REASONS.search(words)
    return found[0] if found else ""


def _failure_wrongs(mode: str, c: Cell | None) -> list[str]:
    """A failed gate must name its costliest layers; its auto-pin (where run) must pass or say why it cannot."""
    if c is None or c.outcome != "failed":
        return []
    wrong = [] if c.layers else [f"{mode} failed without naming the layers that cost the most accuracy"]
    if c.pin is not None and c.pin.traceback:
        wrong.append(f"{mode} auto-pin: traceback")
    if c.pin is not None and c.pin.after:
        wrong.append(f"{mode} auto-pin: output after the result: {c.pin.after[:200]}")
    if c.pin is not None and c.pin.outcome not in PIN_ANSWERS:
        wrong.append(f"{mode} auto-pin {c.pin.outcome}, neither a pass nor a reason: {c.pin.detail[:200]}")
    return wrong


def run_family(family: str, work: Path, share: int = 1, names: set[str] | None = None, *, as_user: bool = False):
    """Yield ``(model, cells, seconds)`` for each sampled model of ``family``.

    ``as_user`` (the bench): a failed gate's ``--auto-pin`` is run, and the fp16 step of the first model that
    onnxruntime runs is a real process (nothing may follow its result).
    """
    checked = False
    for model in suite_sample(family_models(family), share):
        if names and model.name not in names:
            continue
        start = time.perf_counter()
        cells = run_model(model, work, process=("fp16",) if as_user and not checked else (), pin=as_user)
        checked = checked or cells.get("fp16", Cell("-")).after is not None
        yield model, cells, time.perf_counter() - start


def main() -> None:
    """``python -m tests.corpus.openworld FAMILY [--share N] [--names A,B] [--work DIR]``: one JSON line a model."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("family")
    parser.add_argument("--share", type=int, default=1)
    parser.add_argument("--names", default="")
    parser.add_argument("--work", default="")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    import tempfile
    import warnings

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="trtfarm-openworld-", dir=args.work or None) as tmp:
        for model, cells, seconds in run_family(args.family, Path(tmp), args.share,
                                                set(filter(None, args.names.split(","))) or None, as_user=True):
            print(json.dumps({"family": model.family, "model": model.name, "seconds": round(seconds, 1),
                              "cells": {s: asdict(c) for s, c in cells.items()}, "wrong": judge(cells)}), flush=True)
            shutil.rmtree(Path(tmp) / model.key.replace("/", "__"), ignore_errors=True)


if __name__ == "__main__":
    main()
