"""One export folder, one model name, whichever way it comes in: build, models push, a farm run of its URI, a hook.

The folder ``e0/`` holds the encoder and a farm.yaml saying ``name: p3enc``: each entry point names it ``p3enc``
(farm.yaml's ``name:``); without that line each names it ``e0`` (the documented default: the folder's name for a
``model.onnx``). A farm run and the webhook plan the export URI with ``plan_export`` (what the flow runs), on a real
file store; the build is real (TensorRT-RTX).
"""

from __future__ import annotations

import json
import shutil

import pytest

from trtfarm.planning.plan import plan_export
from trtfarm.planning.requests import MatrixRequest
from trtfarm.publishing.registry import registered_models, resolve_model
from trtfarm.store import open_store

from .conftest import RTX_FLEET
from .test_signing import trtfarm


@pytest.mark.parametrize("named", [True, False])
def test_every_entry_point_gives_one_export_folder_one_name(tmp_path, example_dir, named):
    folder = tmp_path / "e0"
    shutil.copytree(example_dir, folder)
    spec = (folder / "farm.yaml").read_text()
    (folder / "farm.yaml").write_text(spec.replace("name: encoder", "name: p3enc" if named else ""))
    expected = "p3enc" if named else "e0"
    fleet = tmp_path / "gpu_targets.yaml"
    fleet.write_text(RTX_FLEET)
    store = open_store((tmp_path / "store").as_uri())
    names = {}
    built = trtfarm("build", "e0/model.onnx", "--target", "rtx-4090-rtx1.7", "--store", store.uri, "--json",
                    cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    names["build"] = {row["model"] for row in json.loads(built.stdout)}
    pushed = trtfarm("models", "push", "e0", "--store", store.uri, cwd=tmp_path)
    assert pushed.returncode == 0, pushed.stderr
    names["models push"] = set(registered_models(store))
    request = MatrixRequest(model=folder.as_uri(), targets=["rtx-4090-rtx1.7"], store=store.uri,
                            targets_file=str(fleet))
    for entry, uri in (("farm run URI", folder.as_uri()), ("webhook file", (folder / "model.onnx").as_uri())):
        names[entry] = {plan_export(request, resolve_model(store, uri), store, farm=True).name}
    registered = resolve_model(store, expected)
    names["farm run name"] = {plan_export(request, registered, store, farm=True).name}
    assert names == dict.fromkeys(names, {expected}), names
