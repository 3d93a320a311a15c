"""The engine check on the GPU feeds the held-out data the build was given, not whatever sits beside the model.

``trtfarm build --heldout FILE`` (and farm.yaml's ``heldout``) name the file the accuracy gate reads; the engine
check after the build reads the same file, on this machine or on the worker that fetched the export.
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np

from trtfarm.building.build import heldout_samples
from trtfarm.building.precision_runner import with_precision
from trtfarm.building.run_job import job_model
from trtfarm.modelfile import model_source
from trtfarm.project.spec_file import spec_precision
from trtfarm.vocabulary.buildspec import BuildSpec


def _export(tmp_path, example_onnx):
    folder = tmp_path / "export"
    folder.mkdir()
    shutil.copy(example_onnx, folder / "model.onnx")
    np.savez(folder / "heldout.npz", input_ids=np.full((1, 8), 1, np.int64))  # beside the model: not the one asked
    return folder / "model.onnx"


def _planned(path, spec: BuildSpec, heldout: str | None):
    """What planning decides for the model: the recipe and data files, then the precision step (fp32: none)."""
    recipe, calibration, held = spec_precision(path, spec, None, None, heldout)
    return with_precision(None, model_source(path, "enc", verify=False), recipe, calibration, held)


def test_the_engine_check_feeds_the_heldout_file_given_on_the_command_line(tmp_path, example_onnx):
    path = _export(tmp_path, example_onnx)
    given = tmp_path / "elsewhere" / "mine.npz"
    given.parent.mkdir()
    np.savez(given, input_ids=np.full((2, 8), 7, np.int64))
    planned = _planned(path, BuildSpec(), str(given))
    here = job_model(None, SimpleNamespace(model_uri=str(path), model=planned), tmp_path / "work")
    fed = heldout_samples(here)
    assert fed is not None and fed["input_ids"].shape == (2, 8) and int(fed["input_ids"][0, 0]) == 7


def test_a_worker_feeds_the_heldout_file_farm_yaml_names_in_its_own_copy_of_the_export(tmp_path, example_onnx):
    path = _export(tmp_path, example_onnx)
    (path.parent / "data").mkdir()
    np.savez(path.parent / "data" / "held.npz", input_ids=np.full((3, 8), 5, np.int64))
    planned = _planned(path, BuildSpec(heldout="data/held.npz"), None)
    worker = tmp_path / "worker-copy"
    shutil.copytree(path.parent, worker)
    shutil.rmtree(path.parent)  # the planner's copy is gone: the worker reads its own
    here = job_model(None, SimpleNamespace(model_uri=str(worker / "model.onnx"), model=planned), tmp_path / "work")
    assert here.heldout == worker / "data" / "held.npz"
    assert heldout_samples(here)["input_ids"].shape == (3, 8)


def test_without_heldout_data_the_engine_check_generates_its_inputs(tmp_path, example_onnx):
    folder = tmp_path / "bare"
    folder.mkdir()
    shutil.copy(example_onnx, folder / "model.onnx")
    planned = _planned(folder / "model.onnx", BuildSpec(), None)
    assert planned.heldout is None and heldout_samples(planned) is None
