"""The command line as a user runs it: a process per command (tests/forkcli.py) in a fresh working directory (no
Prefect server needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from trtfarm.identity import sha256_file

from . import forkcli
from .conftest import REPO

pytestmark = pytest.mark.integration
TRTFARM = [sys.executable, "-m", "trtfarm"]


@pytest.fixture
def workdir(tmp_path):
    shutil.copy(REPO / "gpu_targets.yaml", tmp_path / "gpu_targets.yaml")
    return tmp_path


def cli(args, cwd, check=True):
    env = {**os.environ, "PREFECT_HOME": str(cwd / ".prefect"), "COLUMNS": "200"}
    env.pop("PREFECT_API_URL", None)
    proc = forkcli.trtfarm(args, cwd=cwd, env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def test_build_then_rebuild_show_and_plans(workdir, example_dir):
    onnx = str(example_dir / "model.onnx")
    first = json.loads(cli(["build", onnx, "--json"], workdir).stdout)
    status = {r["target"]: r["status"] for r in first}
    assert status["rtx-4090-rtx1.7"] == status["rtx-5090-rtx1.7"] == "built"
    assert {status[t] for t in status if "trt" in t and "rtx" not in t} == {"skipped"}
    assert set(first[0]) >= {"target", "status", "reason", "manifest"}

    table = cli(["build", onnx], workdir).stdout
    assert table.count("│ up-to-date") == 2 and "│ built" not in table and "2 up-to-date, 4 skipped" in table

    manifest_url = next(r["manifest"] for r in first if r["target"] == "rtx-5090-rtx1.7")
    shown = json.loads(cli(["show", manifest_url, "--json"], workdir).stdout)
    plan = workdir / "trtfarm-store" / shown["plan"]["key"]
    assert sha256_file(plan) == shown["plan"]["sha256"]
    human = cli(["show", shown["plan"]["key"].rsplit("/", 1)[0]], workdir).stdout
    assert shown["plan"]["sha256"] in human and "engine: pending on NVIDIA GeForce RTX 5090" in human

    listed = json.loads(cli(["plans", "--json"], workdir).stdout)
    assert sorted(m["target"]["target_id"] for m in listed) == ["rtx-4090-rtx1.7", "rtx-5090-rtx1.7"]

    whatif = cli(["whatif", "--fleet", "gpu_targets.yaml", "--json"], workdir)  # the same fleet: every built plan keeps
    kept = {(d["target"], d["action"]) for d in json.loads(whatif.stdout)}
    assert {("rtx-4090-rtx1.7", "keep"), ("rtx-5090-rtx1.7", "keep")} <= kept
    old = cli(["plan", "--fleet", "gpu_targets.yaml", "--json"], workdir)  # the old name, hidden: says so, and works
    assert old.stdout == whatif.stdout and old.stderr == "`trtfarm plan` is now `trtfarm whatif`\n" + whatif.stderr
    listing = [line.split()[1] for line in cli(["--help"], workdir).stdout.splitlines() if line.startswith("│ ")]
    assert "whatif" in listing and "plan" not in listing


def test_corrupt_onnx_exits_nonzero_with_the_reason_and_publishes_nothing(workdir, example_onnx):
    bad = workdir / "bad.onnx"
    bad.write_bytes(example_onnx.read_bytes()[:3000])
    proc = cli(["build", str(bad)], workdir, check=False)
    assert proc.returncode == 2
    assert "not a valid ONNX model" in proc.stderr and "re-export" in proc.stderr
    assert not (workdir / "trtfarm-store").exists() or not list((workdir / "trtfarm-store").rglob("*.plan"))


def test_unsupported_operator_exits_nonzero_with_the_parsers_message(workdir):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Unique", ["x"], ["y"], name="dedupe")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    path = workdir / "unique.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    proc = cli(["build", str(path), "--target", "rtx-4090-rtx1.7", "--json"], workdir, check=False)
    assert proc.returncode == 1
    row = json.loads(proc.stdout)[0]
    assert row["status"] == "failed" and "UNSUPPORTED_NODE" in row["reason"] and "'dedupe' (Unique)" in row["reason"]
    assert not list((workdir / "trtfarm-store").rglob("*.plan"))


def test_bad_profile_flag_and_bad_fleet_are_clear_errors(workdir, example_onnx):
    proc = cli(["build", str(example_onnx), "--profile", "input_ids=1x16:16x8:32x512"], workdir, check=False)
    assert proc.returncode == 2 and "min <= opt <= max" in proc.stderr
    fleet = (REPO / "gpu_targets.yaml").read_text().replace("pool: gpu-l4", "pool: gpu-l4\n    gpus: 4")
    (workdir / "gpu_targets.yaml").write_text(fleet)
    proc = cli(["targets"], workdir, check=False)
    assert proc.returncode == 2 and "gpu_targets.yaml:" in proc.stderr and "unknown key" in proc.stderr


def test_targets_json_says_what_this_machine_serves(workdir):
    doc = json.loads(cli(["targets", "--json"], workdir).stdout)
    servable = {t["target"]: t["servable"] for t in doc["targets"]}
    assert servable["rtx-4090-rtx1.7"] and not servable["h100-trt11.4"]
    api = {t["target"]: (t["api_checked"], t["api_check"]) for t in doc["targets"]}
    assert api["h100-trt10.16"] == (True, "code path checked against the tensorrt 10.16.1.11 bindings API "
                                          "(tensorrt-cu12-bindings==10.16.1.11): names and signatures, not "
                                          "TensorRT's behaviour")
    assert api["rtx-4090-rtx1.7"][0] is False
    assert doc["machine"]["toolchains"]["tensorrt_rtx"] == "1.7.1.116"


def test_help_imports_no_heavy_dependency():
    code = ("import sys; from trtfarm.cli.main import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['--help']); assert r.exit_code == 0, r.output; "
            "heavy = {'prefect', 'tensorrt_rtx', 'tensorrt', 'onnx', 'onnxruntime', 'boto3', 'torch'}; "
            "heavy &= set(sys.modules); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_derive_profiles_then_build_with_them(workdir, example_onnx, textbook_log):
    out = workdir / "profiles.yaml"
    doc = json.loads(cli(["profiles", "derive", str(textbook_log), "--cap", "input_ids:1=512", "--cap",
                          "attention_mask:1=512", "--max-batch", "32", "--model", str(example_onnx),
                          "--out", str(out), "--json"], workdir).stdout)
    assert [p["input_ids"] for p in doc["profiles"]] == ["1x16:32x64:32x128", "1x129:8x384:16x512"]
    assert doc["report"]["records"] == 200_000 and len(doc["report"]["profiles"]) == 2
    assert doc["report"]["profiles"][1]["activation_bytes_estimate"] > doc["report"]["profiles"][0][
        "activation_bytes_estimate"] > 0
    table = cli(["profiles", "derive", str(textbook_log)], workdir).stdout
    assert "98.0%" in table and "input_ids 1x129 : 8x384 : 16x512" in table

    rows = json.loads(cli(["build", str(example_onnx), "--profiles", str(out), "--target", "rtx-4090-rtx1.7",
                           "--json"], workdir).stdout)
    assert rows[0]["status"] == "built"
    shown = json.loads(cli(["show", rows[0]["manifest"], "--json"], workdir).stdout)
    assert len(shown["build"]["profiles"]) == 2


def test_a_malformed_log_writes_nothing(workdir):
    log = workdir / "shapes.jsonl"
    log.write_text('{"input_ids": [1, 8]}\n{"input_ids": [1, -8]}\n')
    proc = cli(["profiles", "derive", str(log), "--out", str(workdir / "p.yaml")], workdir, check=False)
    assert proc.returncode == 2 and "line 2: input_ids: negative dimension" in proc.stderr
    assert not list(workdir.glob("p.yaml*")) and not list(workdir.glob(".p.yaml*"))


def test_release_pull_verify_cache_and_gc_from_the_command_line(workdir, example_dir):
    rows = json.loads(cli(["build", str(example_dir / "model.onnx"), "--json"], workdir).stdout)
    assert all(r["release"].startswith("released: releases/encoder/") for r in rows if r["status"] == "built")

    pulled = json.loads(cli(["pull", "encoder", "--gpu", "rtx-5090", "--to", "host/enc.plan", "--json"],
                            workdir).stdout)
    assert pulled["release"] == "releases/encoder/rtx-5090/tensorrt_rtx-1.7.1.116.json"
    ok = json.loads(cli(["verify", "host/enc.plan", "--gpu-name", "NVIDIA GeForce RTX 5090",
                         "--compute-capability", "12.0", "--json"], workdir).stdout)
    assert ok["ok"] and [c["check"] for c in ok["checks"]][-1] == "runtime"
    proc = cli(["verify", "host/enc.plan"], workdir, check=False)  # this machine has no GPU
    assert proc.returncode == 1 and "this host has no NVIDIA GPU" in proc.stderr
    data = bytearray((workdir / "host/enc.plan").read_bytes())
    data[-100] ^= 0xFF
    (workdir / "host/enc.plan").write_bytes(bytes(data))
    proc = cli(["verify", "host/enc.plan", "--gpu-name", "NVIDIA GeForce RTX 5090", "--compute-capability", "12.0"],
               workdir, check=False)
    assert proc.returncode == 1 and "the file is damaged" in proc.stderr

    missing = cli(["pull", "encoder", "--gpu", "h100", "--toolchain", "tensorrt-11.4.0.106"], workdir, check=False)
    assert missing.returncode == 2 and "Released: rtx-4090 / tensorrt_rtx-1.7.1.116" in missing.stderr

    manifest = next(r["manifest"] for r in rows if r["target"] == "rtx-4090-rtx1.7")
    moved = json.loads(cli(["release", manifest, "--reason", "hand-checked on a 4090", "--json"], workdir).stdout)
    assert len(moved["history"]) == 1 and moved["history"][0]["reason"].startswith("built by run local-")  # no-op
    assert cli(["gc", "--json"], workdir).stdout.count('"manifest_key"') == 0

    store = workdir / "trtfarm-store"
    (store / "timing-caches/tensorrt-11.4.0.106/h100-sm90").mkdir(parents=True)
    (store / "timing-caches/tensorrt-11.4.0.106/h100-sm90/0123456789ab.cache").write_bytes(b"\x00" * 64)
    (store / "timing-caches/tensorrt-11.4.0.106/h100.cache").write_bytes(b"\x00" * 8)  # keyed before the flags were
    listed = sorted(json.loads(cli(["cache", "ls", "--json"], workdir).stdout), key=lambda r: r["key"])
    assert listed == [{"key": "timing-caches/tensorrt-11.4.0.106/h100-sm90/0123456789ab.cache", "bytes": 64},
                      {"key": "timing-caches/tensorrt-11.4.0.106/h100.cache", "bytes": 8}]
    ref = "tensorrt-11.4.0.106/h100-sm90/0123456789ab"
    shown = json.loads(cli(["cache", "show", ref, "--json"], workdir).stdout)
    assert shown["bytes"] == 64 and "unknown here" in shown["entries"]
    assert cli(["cache", "rm", ref], workdir, check=False).returncode == 1
    cli(["cache", "rm", ref, "--yes"], workdir)
    cli(["cache", "rm", "tensorrt-11.4.0.106/h100", "--yes"], workdir)  # an old key is removed the same way
    assert json.loads(cli(["cache", "ls", "--json"], workdir).stdout) == []


def test_precision_command_fails_naive_fp16_and_auto_pins(workdir, tmp_path):
    from .conftest import write_overflow_model

    model, heldout = write_overflow_model(tmp_path)
    naive = cli(["precision", str(model), "--mode", "fp16", "--data-max", "inf", "--heldout", str(heldout),
                 "--task", "classifier"], workdir, check=False)
    assert naive.returncode == 1 and "fc2 (MatMul): FP16 overflow" in naive.stdout
    pinned = json.loads(cli(["precision", str(model), "--mode", "fp16", "--auto-pin", "--heldout", str(heldout),
                             "--task", "classifier", "--json"], workdir).stdout)
    assert pinned["pinned_fp32_nodes"] == ["fc2", "rescale"] and pinned["gate"]["passed"]



def test_determinism_option_and_report_command(workdir, example_onnx):
    fleet = (REPO / "gpu_targets.yaml").read_text().replace(
        "{id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built}",
        "{id: rtx-4090-rtx1.7, gpu: rtx-4090, toolchain: rtx-1.7, release_on: built, determinism_check: true}")
    (workdir / "gpu_targets.yaml").write_text(fleet)
    rows = json.loads(cli(["build", str(example_onnx), "--target", "rtx-4090-rtx1.7", "--json"], workdir).stdout)
    shown = json.loads(cli(["show", rows[0]["manifest"], "--json"], workdir).stdout)
    assert shown["verification"]["built"]["figures"]["determinism"] == "identical plan bytes in two builds"
    doc = json.loads(cli(["report", "encoder", "--json"], workdir).stdout)
    (row,) = doc["rows"]
    assert row["target"] == "rtx-4090-rtx1.7" and row["engine"] == "pending on NVIDIA GeForce RTX 4090"
    assert row["p50_ms"] is None and row["build_s"] > 0  # no fabricated latency without the GPU
    report = (workdir / "trtfarm-report" / "report.md").read_text()
    assert "| rtx-4090-rtx1.7 | built | pending on NVIDIA GeForce RTX 4090 |" in report
    assert (workdir / "trtfarm-store" / "reports" / "encoder" / "latest" / "build_time.png").is_file()


# Imports each command module in turn and prints the names of the commands and groups each one registers.
REGISTERED_BY = """
import importlib, json
import typer.main
from trtfarm.cli.common import app
from trtfarm.cli.main import COMMAND_MODULES
found = {}
for module in dict.fromkeys(COMMAND_MODULES.values()):
    before = [*app.registered_commands, *app.registered_groups]
    importlib.import_module(f"trtfarm.cli.{module}")
    for c in app.registered_commands + app.registered_groups:
        if c not in before:
            found[c.name or typer.main.get_command_name(c.callback.__name__)] = module
print(json.dumps(found))
"""
# `trtfarm ARGS` as the console script runs it, and with every command registered first (as before the command line
# imported only the one asked for)
LAZY_APP, WHOLE_APP = "from trtfarm.cli.main import main", "from trtfarm.cli.main import app, main"
# Runs `trtfarm ARGS` for each ARGS of its argument (JSON) in a fork of this process, which has run the imports of
# sys.argv[2] first (LAZY_APP or WHOLE_APP): each fork goes on as a fresh `python -c "IMPORTS; main()"` would after
# them, its standard output and error in files of its own, and ends as that process ends (exit handlers included).
# What each said: [exit code, stdout, stderr] per ARGS, as JSON. The imports once, not once per command.
FORKED = """
import json, os, sys, tempfile
exec(sys.argv[2])
said = []
for args in json.loads(sys.argv[1]):
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        sys.argv[1:] = args
        main()
        sys.exit(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    said.append([code, *(f.seek(0) or f.read().decode() for f in (out, err))])
print(json.dumps(said))
"""


def test_each_command_imports_only_its_module_and_says_what_the_whole_app_says(tmp_path):
    """The table of which module registers each command holds, and each command (its help, its bad input) reads as
    it does with every command registered."""
    from trtfarm.cli.main import COMMAND_MODULES

    found = json.loads(subprocess.run([sys.executable, "-c", REGISTERED_BY], capture_output=True, text=True,
                                      check=True).stdout)
    assert found == COMMAND_MODULES and list(found) == list(COMMAND_MODULES)
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("PREFECT_API_URL", None)
    every = [[c, "--help"] for c in COMMAND_MODULES] + [["bulid"], ["build"], ["init", "x", "y"], []]
    lazy, whole = (json.loads(subprocess.run([sys.executable, "-c", FORKED, json.dumps(every), how], cwd=tmp_path,
                                             env=env, capture_output=True, text=True, timeout=600,
                                             check=True).stdout) for how in (LAZY_APP, WHOLE_APP))
    assert len(lazy) == len(whole) == len(every)
    for args, one, all_of_them in zip(every, lazy, whole, strict=True):
        assert one == all_of_them, args
    assert all(code == 0 and out for (code, out, _), args in zip(lazy, every, strict=True) if "--help" in args)
