"""The local build path at the builder's cost: TensorRT filters its own log, and the command imports only what it
uses (``python -X importtime`` lists every module a run imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trtfarm.cli.main import COMMAND_MODULES

from .fleets import ONE_RTX_TARGET

pytestmark = pytest.mark.integration
TRTFARM = [sys.executable, "-m", "trtfarm"]


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "gpu_targets.yaml").write_text(ONE_RTX_TARGET)
    (tmp_path / "tmp").mkdir()
    return tmp_path


def run(cwd: Path, *args: str, python: tuple[str, ...] = ("-m", "trtfarm"),
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m trtfarm ARGS`` (or ``python PYTHON... ARGS``) in ``cwd``, with no signing key unless ``env``'s."""
    unset = ("PREFECT_API_URL", "TRTFARM_SIGNING_KEY", "TRTFARM_TRUSTED_KEYS")
    env = {**{k: v for k, v in os.environ.items() if k not in unset}, "COLUMNS": "200", "TMPDIR": str(cwd / "tmp"),
           **(env or {})}
    return subprocess.run([sys.executable, *python, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_tensorrt_prints_nothing_of_a_build_by_default_and_its_whole_log_with_verbose(workdir, example_dir):
    quiet = run(workdir, "build", str(example_dir / "model.onnx"), "--json", "--store", "quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "[TRT]" not in quiet.stderr, quiet.stderr[-2000:]
    loud = run(workdir, "build", str(example_dir / "model.onnx"), "--json", "--store", "loud", "--verbose")
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert [r["status"] for r in json.loads(loud.stdout)] == ["built"]
    verbose = [line for line in loud.stderr.splitlines() if "[TRT] [V]" in line]
    assert len(verbose) > 1000, loud.stderr[-2000:]  # TensorRT's VERBOSE log of the build, as TensorRT prints it


# Reads every file in argv with trtfarm's seam (onnxfile: ONNX's messages and checker without `import onnx`), or with
# onnx's own API when argv[1] is "onnx": the checker's verdict, the parsed model's bytes and the graph digest.
READ_MODELS = r"""
import hashlib, json, sys
from pathlib import Path
referee = sys.argv[1] == "onnx"
if referee:
    import onnx
else:
    from trtfarm.onnxfile import check_errors, check_model, load_model, onnx_messages

def graph_digest(model):  # identity.graph_digest as it was written against onnx: the referee's own copy
    copy = onnx.ModelProto() if referee else onnx_messages().ModelProto()
    copy.CopyFrom(model)
    for init in list(copy.graph.initializer):
        dims, dtype, name = list(init.dims), init.data_type, init.name
        init.Clear()
        init.name, init.data_type = name, dtype
        init.dims.extend(dims)
    del copy.graph.sparse_initializer[:]
    copy.ClearField("producer_version")
    copy.ClearField("doc_string")
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()

out = {}
for path in sys.argv[2:]:
    try:
        onnx.checker.check_model(path) if referee else check_model(path)
        verdict = "ok"
    except Exception as err:
        verdict = type(err).__name__
    try:
        model = onnx.load(path, load_external_data=False) if referee else load_model(path)
        out[path] = [verdict, hashlib.sha256(model.SerializeToString()).hexdigest(), graph_digest(model)]
    except Exception as err:
        out[path] = [verdict, type(err).__name__, None]
if not referee:
    from trtfarm.identity import graph_digest as ours
    for path, (verdict, _, digest) in out.items():
        if digest is not None:
            assert ours(Path(path)) == digest, path
    heavy = sorted(m for m in ("onnx", "onnx.helper", "numpy", "ml_dtypes") if m in sys.modules)
    import onnx  # after the seam, onnx imports and works (it reuses the seam's modules)
    assert onnx.ModelProto is onnx_messages().ModelProto and onnx.helper.make_node("Relu", ["x"], ["y"])
    out["heavy modules"] = heavy
print(json.dumps(out))
"""


def _onnx_family(tmp_path: Path) -> list[str]:
    """Every model the pinned onnx and onnxruntime wheels ship, the corpus's, and broken copies of some."""
    import importlib.util

    roots = [Path(importlib.util.find_spec(m).submodule_search_locations[0]) for m in ("onnx", "onnxruntime")]
    files = sorted(str(p) for root in roots for p in root.rglob("*.onnx"))
    assert len(files) > 100
    for i, path in enumerate(files[::25]):
        data = Path(path).read_bytes()
        (tmp_path / f"truncated-{i}.onnx").write_bytes(data[: len(data) // 2])
        (tmp_path / f"changed-{i}.onnx").write_bytes(data.replace(b"\x42", b"\x43", 1))  # one byte changed
    (tmp_path / "garbage.onnx").write_bytes(b"\xff" * 1000)
    (tmp_path / "empty.onnx").write_bytes(b"")
    return files + sorted(str(p) for p in tmp_path.glob("*.onnx"))


def test_onnx_files_read_and_checked_without_the_onnx_package_as_onnx_itself_reads_and_checks_them(tmp_path):
    files = _onnx_family(tmp_path)
    found = {}
    for who in ("onnx", "trtfarm"):
        proc = subprocess.run([sys.executable, "-c", READ_MODELS, who, *files], capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found[who] = json.loads(proc.stdout)
    assert found["trtfarm"].pop("heavy modules") == []
    assert found["trtfarm"] == found["onnx"]
    verdicts = {v[0] for v in found["onnx"].values()}
    assert "ok" in verdicts and len(verdicts) > 1  # the family has models the checker refuses


# Runs the command line in this interpreter (started with -X importtime) and writes every module it holds at exit.
RUN_CLI = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: json.dump(sorted(sys.modules), open(out, "w")))
sys.argv = ["trtfarm", *sys.argv[1:]]
from trtfarm.cli.main import main
main()
"""
# What a local build of an fp32 model for a TensorRT-RTX target never needs (no signing key, a file store).
NEVER_ON_THE_BUILD_PATH = (
    "onnx.helper", "onnx.numpy_helper", "ml_dtypes", "numpy", "cryptography", "prefect", "asyncio", "pyarrow",
    "modelopt", "onnxruntime", "torch", "polygraphy", "boto3", "botocore", "matplotlib", "httpx", "tensorrt",
    "flows", "tasks", "trtfarm.precision.step", "trtfarm.precision.convert", "trtfarm.precision.gate",
    "trtfarm.validation.summary", "trtfarm.validation.engine_gpu", "trtfarm.serving", "trtfarm.triggers",
    "trtfarm.workers.k8s", "trtfarm.publishing.catalog", "trtfarm.reports.html",
    "rich.progress", "trtfarm.cli.progress_bars")  # (stderr is no terminal here: no progress display to draw)
# an up-to-date rerun imports no toolchain, scans no GPU, and neither parses nor checks the model
NOT_WHEN_UP_TO_DATE = ("tensorrt_rtx", "pynvml", "onnx", "google.protobuf", "trtfarm.toolchain",
                       "trtfarm.building.run_job", "trtfarm.building.build")
NOT_FOR_HELP = ("pydantic", "yaml", "google.protobuf", "trtfarm.pipeline", "trtfarm.vocabulary", "trtfarm.store")


def _imported(workdir: Path, name: str, *args: str) -> set[str]:
    out = workdir / f"{name}.json"
    proc = run(workdir, *args, python=("-X", "importtime", "-c", RUN_CLI, str(out)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    timed = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return timed | set(json.loads(out.read_text()))


def _offending(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(f"{b}.") for b in banned))


def test_the_build_path_imports_only_what_the_build_uses(workdir, example_dir):
    """A guard for later changes: a heavy module on the path of `trtfarm build` (fresh, up to date) or of
    `trtfarm --help` fails here; bench/local_vs_direct.py prints what the imports cost."""
    import ctypes

    model = workdir / "encoder" / "model.onnx"  # without farm.yaml: fp32, the profile from the command line
    model.parent.mkdir()
    model.write_bytes((example_dir / "model.onnx").read_bytes())
    build = ["build", str(model), "--json", "--store", "store", "--profile", "input_ids=1x16:16x128:32x512",
             "--profile", "attention_mask=1x16:16x128:32x512"]
    fresh, rerun = _imported(workdir, "fresh", *build), _imported(workdir, "rerun", *build)
    helped = _imported(workdir, "help", "--help")
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        gpu_driver = True
    except OSError:
        gpu_driver = False
    banned = NEVER_ON_THE_BUILD_PATH + (() if gpu_driver else ("pynvml",))
    other_commands = tuple(sorted({f"trtfarm.cli.{m}" for m in COMMAND_MODULES.values()}
                                  - {"trtfarm.cli.build_commands"}))
    assert "tensorrt_rtx" in fresh and "trtfarm.toolchain.builder" in fresh  # the runs did what they say
    assert _offending(fresh, banned + other_commands) == []
    assert _offending(rerun, banned + other_commands + NOT_WHEN_UP_TO_DATE) == []
    assert _offending(helped, banned + NOT_WHEN_UP_TO_DATE + NOT_FOR_HELP) == []


@pytest.mark.parametrize("break_it", ["unknown attribute", "unknown operator"])
def test_onnx_checker_runs_beside_the_build_and_its_refusal_stops_the_command_with_nothing_published(
        workdir, example_dir, break_it):
    """A local build runs onnx.checker and the graph digest on a thread while TensorRT builds. A model the checker
    refuses is refused as planning refused it before (exit 2, the checker's words), whether TensorRT builds it (an
    attribute the operator does not have) or its parser fails too (an operator nobody registered): nothing is
    published, and the same model, repaired, builds."""
    import onnx

    model = onnx.load(example_dir / "model.onnx")
    node = model.graph.node[0]
    if break_it == "unknown attribute":
        node.attribute.append(onnx.helper.make_attribute("bogus", 1))
        words = f"Unrecognized attribute: bogus for operator {node.op_type}"
    else:
        node.op_type = "NoSuchOp"
        words = "NoSuchOp"
    path = workdir / "broken" / "model.onnx"
    path.parent.mkdir()
    path.write_bytes(model.SerializeToString())
    build = ["build", str(path), "--store", "store", "--profile", "input_ids=1x16:16x128:32x512",
             "--profile", "attention_mask=1x16:16x128:32x512"]
    refused = run(workdir, *build)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "not a valid ONNX model" in refused.stderr and words in refused.stderr, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert not list((workdir / "store").rglob("*.plan")) and not list((workdir / "store").rglob("manifest.json"))
    path.write_bytes((example_dir / "model.onnx").read_bytes())
    built = run(workdir, *build, "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    [row] = json.loads(built.stdout)
    manifest = json.loads(Path(row["manifest"].removeprefix("file://")).read_text())
    assert row["status"] == "built" and manifest["model"]["graph_digest"]  # the digest came from beside the build


def test_a_command_starts_without_pydantics_plugin_lookup_unless_the_environment_asks_for_it(workdir):
    """pydantic loads its plugins (entry points of the group ``pydantic``) when it builds its first validator; a
    trtfarm command that ends skips that lookup, and ``PYDANTIC_DISABLE_PLUGINS`` set, even empty, is respected."""
    site = workdir / "site"
    dist = site / "witness_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: witness-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nwitness = witness_plugin:plugin\n")
    (site / "witness_plugin.py").write_text(
        "import os\nopen(os.environ['WITNESS'], 'a').write('loaded\\n')\n"
        "class Plugin:\n    def new_schema_validator(self, *args, **kwargs):\n        return None, None, None\n"
        "plugin = Plugin()\n")
    witness = workdir / "witness.txt"
    for env_value, loaded in ((None, False), ("", True), ("__all__", False)):
        env = {**os.environ, "PYTHONPATH": str(site), "WITNESS": str(witness), "COLUMNS": "200"}
        env.pop("PYDANTIC_DISABLE_PLUGINS", None)
        if env_value is not None:
            env["PYDANTIC_DISABLE_PLUGINS"] = env_value
        witness.unlink(missing_ok=True)
        proc = subprocess.run([*TRTFARM, "targets"], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "rtx-4090" in proc.stdout
        assert witness.exists() == loaded, (env_value, proc.stderr[-2000:])


BUILD_IMPORTS = Path(__file__).parent / "data" / "build_imports.json"


def test_the_trtfarm_modules_a_build_imports_are_the_ones_listed(workdir, example_dir):
    """The set of trtfarm modules `trtfarm build` imports (fresh, and an up-to-date rerun) is held in
    tests/data/build_imports.json: a change that adds one fails here, naming it, and adds it to the file knowingly
    (issue 60); one that drops some passes and says which lines the file can lose."""
    model = workdir / "encoder" / "model.onnx"
    model.parent.mkdir()
    model.write_bytes((example_dir / "model.onnx").read_bytes())
    build = ["build", str(model), "--json", "--store", "store", "--profile", "input_ids=1x16:16x128:32x512",
             "--profile", "attention_mask=1x16:16x128:32x512"]
    listed = json.loads(BUILD_IMPORTS.read_text())
    for run_name in ("fresh", "rerun"):
        found = {m for m in _imported(workdir, run_name, *build) if m == "trtfarm" or m.startswith("trtfarm.")}
        added = sorted(found - set(listed[run_name]))
        assert not added, f"`trtfarm build` ({run_name}) now imports {added}: import them where they are used, or " \
                          f"add them to {BUILD_IMPORTS.name} knowingly"
        if set(listed[run_name]) - found:
            print(f"{run_name}: {sorted(set(listed[run_name]) - found)} no longer imported: drop them from the file")


@pytest.mark.parametrize("signed", [False, True], ids=["no key", "TRTFARM_SIGNING_KEY"])
def test_a_local_build_importing_less_still_records_its_state_and_signs_where_a_key_is_configured(
        workdir, example_dir, tmp_path, signed):
    """However little `trtfarm build` imports, it records the model's state in the store (state/<model>.json, what
    `trtfarm status` reads) and, with a signing key, signs both the plan and that record with it; an up-to-date
    rerun (which imports none of the recorder) leaves the record as it was."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from trtfarm import layout
    from trtfarm.publishing.attest import read_stored
    from trtfarm.signing.keys import load_trusted_keys
    from trtfarm.signing.state_claim import verify_state
    from trtfarm.store import open_store

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "farm.pem", tmp_path / "farm.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    model = workdir / "encoder" / "model.onnx"
    model.parent.mkdir()
    model.write_bytes((example_dir / "model.onnx").read_bytes())
    build = ["build", str(model), "--json", "--store", "store", "--profile", "input_ids=1x16:16x128:32x512",
             "--profile", "attention_mask=1x16:16x128:32x512"]
    env = {"TRTFARM_SIGNING_KEY": str(private)} if signed else {}
    built = run(workdir, *build, env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    [row] = json.loads(built.stdout)
    assert row["status"] == "built", row
    store = open_store(str(workdir / "store"))
    blob = store.get(layout.state_key("encoder"))
    assert blob is not None, sorted(o.key for o in store.list(""))
    record = json.loads(blob.data)
    assert record["model"] == "encoder" and record["by"].startswith("trtfarm build"), record
    assert {t: c["cell"]["state"] for t, c in record["cells"].items()} == {"rtx-4090-rtx1.7": "released"}, record
    stored = read_stored(store, row["manifest"].removeprefix(store.uri + "/"))
    trust = load_trusted_keys([public], "test")
    if signed:
        assert stored.verdict(trust).ok is True
        verify_state(record["signature"], layout.state_key("encoder"), record, trust)  # raises unless this key's
    else:
        assert stored.signature is None and record.get("signature") is None

    again = run(workdir, *build, env=env)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["status"] for r in json.loads(again.stdout)] == ["up-to-date"]
    assert store.get(layout.state_key("encoder")).data == blob.data
