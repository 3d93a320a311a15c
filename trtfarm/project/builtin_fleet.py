"""This machine's built-in fleet, for a folder with no ``gpu_targets.yaml``.

Its GPUs and toolchains scanned (``machine/capabilities.py``), named as the fleet template the wheel carries names
its own (``vocabulary/machine_fleet.py``).
"""

from __future__ import annotations

import functools
from importlib import resources

from trtfarm.machine.capabilities import Capabilities, fleet_scan
from trtfarm.vocabulary.fleet import Fleet
from trtfarm.vocabulary.machine_fleet import machine_fleet


@functools.cache
def template_fleet() -> Fleet:
    """The fleet template the wheel carries (what ``trtfarm init`` writes as gpu_targets.yaml)."""
    import yaml

    text = resources.files("trtfarm").joinpath("templates", "gpu_targets.yaml").read_text(encoding="utf-8")
    return Fleet.model_validate(yaml.safe_load(text))


def this_machine_fleet(caps: Capabilities | None = None) -> Fleet:
    """The built-in fleet of this machine (NVML scan, toolchain imports)."""
    gpus, versions = fleet_scan(caps)
    return machine_fleet(gpus, versions, template_fleet())
