"""Which fleet a run uses, and the signing settings its file declares.

The fleet is ``$TRTFARM_TARGETS``, else ``gpu_targets.yaml`` in the working directory, else this machine's built-in
fleet (project/builtin_fleet.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from trtfarm.errors import UserInputError
from trtfarm.project.builtin_fleet import this_machine_fleet
from trtfarm.signing.settings import SigningSettings, env_decides, settings_from
from trtfarm.vocabulary.fleet import Fleet
from trtfarm.yamlfile import model_from_yaml

DEFAULT_TARGETS_FILE = "gpu_targets.yaml"
BUILTIN_FLEET = "builtin:this-machine"  # no fleet file: what this machine can build (project/builtin_fleet.py)


def default_targets_file() -> str:
    """``$TRTFARM_TARGETS``, else ``gpu_targets.yaml`` in the working directory, else this machine's built-in fleet."""
    if os.environ.get("TRTFARM_TARGETS"):
        return os.environ["TRTFARM_TARGETS"]
    return DEFAULT_TARGETS_FILE if Path(DEFAULT_TARGETS_FILE).is_file() else BUILTIN_FLEET



def load_fleet(path: str | Path = DEFAULT_TARGETS_FILE) -> Fleet:
    """Read and validate ``gpu_targets.yaml``; errors name the file, the line and the fix.

    ``BUILTIN_FLEET`` is this machine's built-in fleet (its GPUs and installed toolchains).
    """
    if str(path) == BUILTIN_FLEET:
        return this_machine_fleet()
    if Path(path).is_dir():
        raise UserInputError(f"{path}: is a folder, not a fleet file; give the gpu_targets.yaml in it "
                             f"({Path(path) / DEFAULT_TARGETS_FILE}) or another file")
    if not Path(path).is_file():
        raise UserInputError(f"{path}: no such fleet file (it does not exist). Fix: `trtfarm init` writes a "
                             "gpu_targets.yaml to edit; without one (and without $TRTFARM_TARGETS) trtfarm uses "
                             "this machine's built-in fleet")
    return model_from_yaml(Path(path), Fleet, hint="`trtfarm init` writes a commented gpu_targets.yaml with every key.")


def signing_settings(targets_file: str | Path | None = None, *, only: Literal["key", "trust"] | None = None,
                     env: Mapping[str, str] | None = None, fleet: Fleet | None = None) -> SigningSettings:
    """The signing key and trusted keys in force: the environment's, else ``targets_file``'s ``signing:`` block.

    The fleet file (default ``$TRTFARM_TARGETS`` or ./gpu_targets.yaml) is read only when it exists and the
    environment does not already set what is needed (``only``: the key, the trusted keys, or both); ``fleet``: that
    file, read already.
    """
    path = Path(targets_file or default_targets_file())
    if env_decides(only, env) or not path.is_file():
        return settings_from(env)
    declared, base = (fleet or load_fleet(path)).signing, path.resolve().parent
    return settings_from(env, file_key=base / declared.key if declared.key else None,
                         file_trusted=[base / p for p in declared.trusted_keys], file_source=str(path))
