"""Whether this machine can build a target: its toolchains and GPUs, asked once per target.

The answer is a ``ServeGap`` (``vocabulary/targets.py``): why not, and apart from it what would change that.
"""

from __future__ import annotations

from collections.abc import Callable

from trtfarm.machine.capabilities import Capabilities
from trtfarm.machine.flavour import INSTALL_HINT
from trtfarm.machine.header import version_matches
from trtfarm.vocabulary.fleet import Flavour, ResolvedTarget
from trtfarm.vocabulary.targets import ServeGap


def serve_gap(target: ResolvedTarget, caps: Capabilities) -> ServeGap | None:
    """None when this machine can build ``target``; else why not and, as its own field, what would fix it."""
    flavour, want = target.toolchain.flavour.value, target.toolchain.version
    have = caps.versions.get(flavour)
    if have is None:
        return ServeGap(f"`{flavour}` {want} is not installed here", INSTALL_HINT[flavour].replace('VERSION', want))
    if not version_matches(have, want):
        return ServeGap(f"installed {flavour} is {have}, the target needs {want}")
    if target.toolchain.flavour is Flavour.tensorrt_rtx:
        return None  # ahead-of-time build: no GPU needed
    from trtfarm.machine.match import best_fit
    from trtfarm.vocabulary.device_spec import spec_of_target

    spec = spec_of_target(target)
    found = best_fit(spec, caps.gpus)
    if not found.ok:
        why = f" ({found.reason})" if caps.gpus.gpus else ""
        return ServeGap(f"needs a {spec.describe()} GPU to build on", f"this machine has {caps.gpus.describe()}{why}")
    return None


def buildable_here(caps: Capabilities) -> Callable[[ResolvedTarget], ServeGap | None]:
    """``serve_gap`` on ``caps``, as ``plan_targets`` asks it of each target."""
    return lambda target: serve_gap(target, caps)
