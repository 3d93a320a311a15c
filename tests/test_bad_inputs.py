"""The bad-input catalogue: each bad input to `python -m trtfarm`, the exit code, the words of its one-line error,
no traceback, and nothing published in the store.

Rows are (id, command line, files to write first, exit code, words). In a command line ``{export}`` is a folder holding
the example encoder and its farm.yaml, ``{fleet}`` a valid gpu_targets.yaml, ``{store}`` the store; the files
written first may replace any of them (path relative to the work folder -> text or bytes).
"""

from __future__ import annotations

import io
import os
import shutil
import socket

import numpy as np
import pytest

from . import forkcli
from .conftest import ENCODER_PROFILE, RTX_FLEET

BUILD = ["build", "{export}/model.onnx", "--targets-file", "{fleet}", "--store", "{store}"]
PROFILE = [a for p in ENCODER_PROFILE for a in ("--profile", p)]
MASK = ["--profile", ENCODER_PROFILE[1]]


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


IDS = np.ones((4, 16), np.int64)
PRECISION = ["precision", "{export}/model.onnx", "--mode", "fp16"]
VIEW = ["--targets-file", "{fleet}", "--store", "{store}"]  # every fleet-view row's store and fleet
VIEW_ROWS = ("whatif-", "status-", "farm-dry-run-")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CATALOGUE = [
    # the model and its build spec
    ("corrupt-onnx", BUILD, {"export/model.onnx": b"\x08\x07garbage, not a protobuf \xff\xfe"}, 2,
     ["not a valid ONNX model"]),
    ("farm-yaml-key-twice", BUILD, {"export/farm.yaml": "name: encoder\nprecision: fp32\nname: decoder\n"}, 2,
     ["farm.yaml:3", "key 'name' is given twice"]),
    # the fleet
    ("fleet-not-yaml", BUILD, {"fleet.yaml": "version: 1\ntoolchains: [rtx\ngpus: {}\n"}, 2,
     ["fleet.yaml:", "not valid YAML"]),
    ("fleet-key-twice", BUILD, {"fleet.yaml": RTX_FLEET + "defaults:\n  tf32: true\n  tf32: false\n"}, 2,
     [f"fleet.yaml:{len(RTX_FLEET.splitlines()) + 3}", "key 'tf32' is given twice"]),
    ("fleet-key-twice-pools-sync", ["pools", "sync", "--targets-file", "{fleet}", "--server-wait", "1"],
     {"fleet.yaml": RTX_FLEET + "defaults:\n  tf32: true\n  tf32: false\n"}, 2, ["key 'tf32' is given twice"]),
    ("unknown-target", [*BUILD, "--target", "nope-1"], {}, 2, ["nope-1"]),
    ("bad-precision", [*BUILD, "--precision", "fp7"], {}, 2, ["--precision 'fp7'", "fp16"]),
    # profiles
    ("profile-zero-dim", [*BUILD, "--profile", "input_ids=0x4:0x4:0x4", *MASK], {}, 2, ["at least 1"]),
    ("profile-negative-dim", [*BUILD, "--profile", "input_ids=-1x4:1x4:1x4", *MASK], {}, 2, ["input_ids"]),
    ("profiles-file-zero-dim", [*BUILD, "--profiles", "p.yaml"],
     {"p.yaml": "profiles:\n  - input_ids: 1x16:16x128:32x512\n    attention_mask: 0x16:0x16:0x16\n"}, 2,
     ["p.yaml:3", "at least 1"]),
    ("profiles-file-key-twice", [*BUILD, "--profiles", "p.yaml"],
     {"p.yaml": "profiles:\n  - input_ids: 1x16:16x128:32x512\n    input_ids: 1x8:8x8:8x8\n"}, 2,
     ["p.yaml:3", "key 'input_ids' is given twice"]),
    ("profile-unknown-input", [*BUILD, "--profile", "input_idz=1x16:16x128:32x512", *MASK], {}, 2,
     ["'input_idz' is not an input"]),                                       # needs the planning check (issue 13)
    ("profile-wrong-rank", [*BUILD, "--profile", "input_ids=16:128:512", *MASK], {}, 2,
     ["has 1 dimensions but the model's input has 2"]),                       # needs the planning check (issue 13)
    # model names (issue 13 makes these one line)
    ("name-traversal", [*BUILD, *PROFILE, "--name", "../../etc/x"], {}, 2, ["../../etc/x"]),
    ("name-slash", [*BUILD, *PROFILE, "--name", "a/b"], {}, 2, ["a/b"]),
    ("name-empty", [*BUILD, *PROFILE, "--name", ""], {}, 2, ["name"]),
    # the farm
    ("farm-run-no-server", ["farm", "run", "encoder", "--targets-file", "{fleet}", "--server-wait", "1"], {}, 3,
     ["did not answer within 1 s"]),
    ("farm-run-bad-precision", ["farm", "run", "encoder", "--targets-file", "{fleet}", "--precision", "fp7"], {}, 2,
     ["invalid parameters", "precision"]),
    ("webhook-bad-root", ["webhook", "serve", "--allow-root", "http://example.com/x", "--store", "{store}"], {}, 2,
     ["--allow-root", "use s3://bucket/path or file:///path"]),
    # round three (issue 23): names are one rule, matched whole
    ("name-trailing-newline", [*BUILD, *PROFILE, "--name", "enc\n"], {}, 2, ["'enc\\n'", "not a valid name"]),
    ("farm-yaml-name-trailing-newline", [*BUILD, *PROFILE], {"export/farm.yaml": 'name: "enc\\n"\n'}, 2,
     ["farm.yaml:1", "name"]),
    # precision: outputs that are inputs, modes, regexes, and the data files
    ("precision-out-is-the-model", [*PRECISION, "--out", "{export}/model.onnx"], {}, 2,
     ["--out", "the FP32 export", "elsewhere"]),
    ("precision-out-is-heldout", [*PRECISION, "--heldout", "h.npz", "--out", "h.npz"],
     {"h.npz": _npz(input_ids=IDS, attention_mask=IDS)}, 2, ["--out h.npz", "heldout data"]),
    ("precision-mode-bogus", ["precision", "{export}/model.onnx", "--mode", "bogus"], {}, 2,
     ["--mode 'bogus'", "fp32, fp16, bf16, int8, fp8"]),
    ("precision-keep-fp32-bad-regex", [*PRECISION, "--keep-fp32", "fc[0"], {}, 2,
     ["keep_fp32", "'fc[0'", "not a valid regular expression"]),
    ("heldout-strings", [*PRECISION, "--heldout", "h.npz"],
     {"h.npz": _npz(input_ids=np.array([["a"] * 16] * 4), attention_mask=IDS)}, 2,
     ["h.npz", "'input_ids' holds <U1 values, not numbers"]),
    ("heldout-bare-npy", [*PRECISION, "--heldout", "h.npy"], {"h.npy": _npy(IDS)}, 2,
     ["h.npy", "single .npy array", "numpy.savez"]),
    ("heldout-zero-samples", [*PRECISION, "--heldout", "h.npz"],
     {"h.npz": _npz(input_ids=IDS[:0], attention_mask=IDS[:0])}, 2, ["h.npz", "no samples"]),
    ("heldout-batch-disagrees", [*PRECISION, "--heldout", "h.npz"],
     {"h.npz": _npz(input_ids=IDS, attention_mask=IDS[:3])}, 2, ["h.npz", "disagree", "'attention_mask': 3"]),
    ("calibration-strings", ["precision", "{export}/model.onnx", "--mode", "int8", "--calibration", "c.npz"],
     {"c.npz": _npz(input_ids=np.array([["x"] * 16] * 4), attention_mask=IDS)}, 2, ["c.npz", "not numbers"]),
    # numbers are checked where they are read
    ("profile-dim-1e12", [*BUILD, "--profile", "input_ids=1x16:16x128:32x1000000000000", *MASK], {}, 2,
     ["1000000000000", "largest TensorRT builds"]),
    ("profile-dim-beyond-int64", [*BUILD, "--profile", "input_ids=1x16:16x128:32x99999999999999999999", *MASK],
     {}, 2, ["99999999999999999999"]),
    ("fleet-workspace-1e14", BUILD, {"fleet.yaml": RTX_FLEET + "defaults:\n  workspace_mib: 100000000000000\n"}, 2,
     [f"fleet.yaml:{len(RTX_FLEET.splitlines()) + 2}", "workspace_mib", "1048576"]),
    ("fleet-target-workspace-1e14", BUILD, {"fleet.yaml": RTX_FLEET.replace(
        "toolchain: rtx-1.7}", "toolchain: rtx-1.7, settings: {workspace_mib: 100000000000000}}", 1)}, 2,
     ["fleet.yaml:", "workspace_mib", "1048576"]),
    ("shape-log-beyond-buildable", ["profiles", "derive", "s.jsonl"],
     {"s.jsonl": '{"input_ids": [16, 87]}\n{"input_ids": [16, 99999999999999999999]}\n'}, 2,
     ["s.jsonl", "line 2", "beyond"]),
    ("shape-log-bulk-beyond-buildable", ["profiles", "derive", "s.jsonl"],
     {"s.jsonl": '{"input_ids": [16, 87]}\n' * 50 + '{"input_ids": [16, 3000000000]}\n'}, 2,
     ["s.jsonl", "line 51", "beyond"]),
    # files
    ("fleet-not-utf8", BUILD, {"fleet.yaml": RTX_FLEET.encode() + b"# caf\xe9\n"}, 2,
     [f"fleet.yaml:{len(RTX_FLEET.splitlines()) + 1}", "not UTF-8"]),
    ("shape-log-binary-garbage", ["profiles", "derive", "s.jsonl"], {"s.jsonl": b"\x89PNG\r\n\x1a\n\xff\xfe\x00\n"},
     2, ["s.jsonl", "not UTF-8"]),
    ("profiles-file-empty", [*BUILD, "--profiles", "p.yaml"], {"p.yaml": "profiles: []\n"}, 2,
     ["p.yaml:1", "no profiles"]),
    # the store given is a file
    ("store-is-a-file", [*BUILD, *PROFILE, "--store", "{export}/farm.yaml"], {}, 1,
     ["farm.yaml", "is a file, not a folder"]),
    ("release-empty-reason", ["release", "plans/x", "--reason", "", "--store", "{store}"], {}, 2,
     ["--reason is empty"]),
    ("models-push-calibration-outside", ["models", "push", "{export}", "--store", "{store}"],
     {"export/farm.yaml": "name: encoder\ncalibration: /etc/passwd\n"}, 2,
     ["'/etc/passwd' is outside the export folder"]),
    ("webhook-dot-dot-root", ["webhook", "serve", "--allow-root", "s3://bucket/a/%2e%2e/b", "--store", "{store}"],
     {}, 2, ["'..' segments"]),
    # the fleet views (issue 36): they read the store and write nothing, whatever the input
    ("whatif-fleet-missing", ["whatif", "--fleet", "nope.yaml", *VIEW], {}, 2, ["nope.yaml", "no such fleet file"]),
    ("whatif-fleet-key-twice", ["whatif", "--fleet", "p.yaml", *VIEW],
     {"p.yaml": RTX_FLEET + "defaults:\n  tf32: true\n  tf32: false\n"}, 2,
     [f"p.yaml:{len(RTX_FLEET.splitlines()) + 3}", "key 'tf32' is given twice"]),
    ("whatif-unknown-model", ["whatif", "nope", "--fleet", "{fleet}", *VIEW], {}, 2, ["'nope'", "known models: none"]),
    ("whatif-html-is-a-file", ["whatif", "--fleet", "{fleet}", "--html", "{fleet}", *VIEW], {}, 2,
     ["--html", "is a file, not a folder"]),
    ("status-unknown-model", ["status", "nope", *VIEW], {}, 2, ["'nope'", "known models: none"]),
    ("status-html-folder-missing", ["status", "--html", "no/such/folder/status.html", *VIEW], {}, 2,
     ["--html no/such/folder/status.html", "cannot write it"]),
    ("status-store-is-a-file", ["status", "--targets-file", "{fleet}", "--store", "{export}/farm.yaml"], {}, 1,
     ["farm.yaml", "is a file, not a folder"]),
    ("status-trusted-key-missing", ["status", *VIEW], {"fleet.yaml": RTX_FLEET + "signing:\n  trusted_keys: [k.pub]\n"},
     2, ["k.pub"]),
    ("farm-dry-run-refit", ["farm", "run", "--dry-run", "--refit", *VIEW], {}, 2, ["--dry-run with --refit"]),
    ("farm-dry-run-unknown-model", ["farm", "run", "nope", "--dry-run", *VIEW], {}, 2, ["'nope' is not registered"]),
    ("farm-dry-run-unknown-target", ["farm", "run", "--dry-run", "--target", "nope-1", *VIEW], {}, 2, ["nope-1"]),
]


@pytest.mark.parametrize("name,args,files,code,words", CATALOGUE, ids=[row[0] for row in CATALOGUE])
def test_a_bad_input_is_refused_in_one_line_and_publishes_nothing(tmp_path, example_dir, name, args, files, code,
                                                                  words):
    shutil.copytree(example_dir, tmp_path / "export")
    (tmp_path / "fleet.yaml").write_text(RTX_FLEET)
    for rel, content in files.items():
        path = tmp_path / rel
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    store = tmp_path / "store"
    if name.startswith(VIEW_ROWS):  # the views read a store that is there, empty: the input is what is wrong
        store.mkdir()
    argv = [a.format(export=tmp_path / "export", fleet=tmp_path / "fleet.yaml", store=store) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "TRTFARM_", "AWS_"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), TRTFARM_WEBHOOK_SECRET="s3cret", COLUMNS="200",
               PREFECT_API_URL=f"http://127.0.0.1:{_closed_port()}/api")
    done = forkcli.trtfarm(argv, cwd=tmp_path, env=env, timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == code, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr[-3000:]
    assert len(errors) == 1, done.stderr[-3000:]
    block = done.stderr[done.stderr.index(errors[0]):]  # the error, with the lines a listing error adds under it
    for word in words:
        assert word in block, block
    published = [p for p in store.rglob("*") if p.is_file() and p.relative_to(store).parts[0] in
                 ("plans", "releases", "models")]
    assert not published and not (tmp_path / "trtfarm-store").exists()
    if name.startswith("precision-out-is"):  # refused before anything was written: the input is as it was
        assert (tmp_path / "export/model.onnx").read_bytes() == (example_dir / "model.onnx").read_bytes()
        assert not (tmp_path / "h.npz").exists() or (tmp_path / "h.npz").read_bytes() == files["h.npz"]
