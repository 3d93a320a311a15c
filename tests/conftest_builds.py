"""Real TensorRT-RTX plans published through the core (no Prefect), for loader/release/pull/gc tests."""

from __future__ import annotations

import os
from pathlib import Path

from trtfarm.building.build import build_group
from trtfarm.machine.capabilities import local_capabilities
from trtfarm.modelfile import model_source
from trtfarm.profiles.profile import profile_from_args
from trtfarm.project.buildable import buildable_here
from trtfarm.project.fleet_file import load_fleet
from trtfarm.vocabulary.fleet import select_targets
from trtfarm.vocabulary.targets import plan_targets

from .conftest import ENCODER_PROFILE, make_model


def publish_export(store, fleet_file: Path, folder: Path, seed: int, mtime: float, targets: list[str], signer=None,
                   name: str = "encoder"):
    """Write the encoder with weights ``seed`` (exported at ``mtime``) as ``name``, build and publish it for
    ``targets``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(make_model.encoder_model(seed).SerializeToString(deterministic=True))
    os.utime(path, (mtime, mtime))
    model = model_source(path, name)
    profiles = [profile_from_args(ENCODER_PROFILE)]
    plans = plan_targets(model, model.onnx_digest, select_targets(load_fleet(fleet_file), targets), profiles,
                         buildable_here(local_capabilities()))
    outcomes = []
    for plan in plans:
        outcomes += build_group(store, model, [plan], profiles, signer=signer)
    return model, {o.target: o for o in outcomes}
